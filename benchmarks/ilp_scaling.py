"""How the plain Checkmate MILP (problem 9 on HiGHS) scales: size, build and solve time.

    python benchmarks/ilp_scaling.py [--time-limit 120] [--graphs linear8 vgg16 ...] [--fractions 0.9 0.7 0.5]
        [--output results/benchmarks/ilp_scaling.csv]

Budgets are fractions of the no-recomputation peak (checkpoint_all under simulate()). The MILP is timed
alone: the instant memory-bound check (:func:`remat.budget.check_budget`) is not run before it, so a cell
below the memory bound shows how long the MILP takes to prove that, and ``memory_bound_infeasible`` says
which cells the check would settle at once. Each answer is re-checked by ``simulate()``
(:func:`common.recheck`): ``certified`` is "optimal" or "infeasible" only when that holds. Raw rows go to
``--output`` with the command beside it (``.json``); ``benchmarks/report.py`` summarises them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DEFAULT_GRAPHS, RESULTS_DIR, RowWriter, benchmark_graphs, markdown_table, recheck  # noqa: E402

from remat.budget import check_budget, no_recompute_peak  # noqa: E402
from remat.milp.formulation import build_checkmate_milp  # noqa: E402
from remat.milp.plain import solve_ilp  # noqa: E402
from remat.result import Status  # noqa: E402

MIP_GAP = 1e-4
COLUMNS = ["graph", "n", "budget", "variables", "constraints", "build_s", "solve_s", "status", "objective",
           "overhead", "gap", "certified", "note", "memory_bound_infeasible", "time_limit"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time-limit", type=float, default=120.0, help="seconds per solve (default 120)")
    parser.add_argument("--graphs", nargs="+", default=list(DEFAULT_GRAPHS))
    parser.add_argument("--fractions", nargs="+", type=float, default=[0.9, 0.7, 0.5])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "ilp_scaling.csv")
    args = parser.parse_args()
    out = RowWriter(args.output, COLUMNS, "ilp_scaling.py")
    for graph in benchmark_graphs(args.graphs):
        peak = no_recompute_peak(graph)
        for fraction in args.fractions:
            budget = fraction * peak
            t0 = time.perf_counter()
            milp = build_checkmate_milp(graph, budget)
            build = time.perf_counter() - t0
            result = solve_ilp(graph, budget, time_limit=args.time_limit, mip_gap=MIP_GAP, threads=args.threads,
                               memory_bound_check=False)
            proved = result.status == Status.INFEASIBLE and result.min_feasible_budget is None
            certified, note = recheck(graph, budget, result, MIP_GAP, "solver" if proved else "")
            out.add({
                "graph": graph.name, "n": graph.n, "budget": fraction,
                "variables": milp.problem.num_vars, "constraints": milp.problem.num_rows,
                "build_s": build, "solve_s": result.solve_time, "status": str(result.status),
                "objective": result.cost, "overhead": result.overhead(graph), "gap": result.gap,
                "certified": certified, "note": note,
                "memory_bound_infeasible": check_budget(graph, budget) is not None, "time_limit": args.time_limit,
            })
            print(markdown_table([out.rows[-1]], COLUMNS).splitlines()[-1], flush=True)
    out.finish()
    print()
    print(markdown_table(out.rows, COLUMNS))


if __name__ == "__main__":
    main()
