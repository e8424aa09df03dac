"""How the plain Checkmate MILP (problem 9 on HiGHS) scales: size, build and solve time.

    python benchmarks/ilp_scaling.py [--time-limit 120] [--graphs linear8 vgg16 ...] [--fractions 0.9 0.7 0.5]

Budgets are fractions of the no-recomputation peak (checkpoint_all under simulate()).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DEFAULT_GRAPHS, benchmark_graphs, markdown_table  # noqa: E402

from remat.budget import (
    check_budget,  # noqa: E402
    no_recompute_peak,  # noqa: E402
)
from remat.milp.formulation import build_checkmate_milp  # noqa: E402
from remat.milp.plain import solve_ilp  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time-limit", type=float, default=120.0, help="seconds per solve (default 120)")
    parser.add_argument("--graphs", nargs="+", default=list(DEFAULT_GRAPHS))
    parser.add_argument("--fractions", nargs="+", type=float, default=[0.9, 0.7, 0.5])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    rows = []
    for graph in benchmark_graphs(args.graphs):
        peak = no_recompute_peak(graph)
        for fraction in args.fractions:
            budget = fraction * peak
            t0 = time.perf_counter()
            milp = build_checkmate_milp(graph, budget)
            build = time.perf_counter() - t0
            result = solve_ilp(graph, budget, time_limit=args.time_limit, threads=args.threads)
            row = {
                "graph": graph.name, "n": graph.n, "budget": fraction,
                "variables": milp.problem.num_vars, "constraints": milp.problem.num_rows,
                "build_s": build, "solve_s": result.solve_time, "status": str(result.status),
                "objective": result.cost, "overhead": result.overhead(graph), "gap": result.gap,
                "note": "lower bound" if check_budget(graph, budget) else "",
            }
            rows.append(row)
            print(markdown_table([row], list(row)).splitlines()[-1], flush=True)
    print()
    print(markdown_table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
