"""Every strategy on the reference graphs: overhead, ratio to the best proved bound, max batch at 16 GB.

    python benchmarks/strategies.py [--time-limit 60] [--graphs ...] [--fractions 0.9 0.7 0.5]
                                    [--strategies ...] [--max-batch-budget 16e9] [--skip-max-batch]

Table 1: for each graph x budget (fractions of checkpoint_all's peak) every strategy's
overhead (cost / checkpoint_all cost) and its ratio to the best lower bound any exact
method proved at that budget (the ilp pipeline's or the LP's). Table 2: the maximum
batch size per strategy at a 16 GB budget (cost at most one extra forward pass, eq. 10),
found by the same search for every strategy; for ilp the search is exact.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import benchmark_graphs, markdown_table  # noqa: E402

from remat.budget import no_recompute_peak  # noqa: E402
from remat.graph import GraphError  # noqa: E402
from remat.graph.reference import REFERENCE_GRAPHS  # noqa: E402
from remat.maxbatch.search import max_batch_size  # noqa: E402
from remat.strategies import get_strategy, strategy_names  # noqa: E402

TIMED = {"ilp", "ilp_plain", "approx_lp_deterministic", "approx_lp_randomized"}


def run(strategy: str, graph, budget: float, time_limit: float):
    options = {"time_limit": time_limit} if strategy in TIMED else {}
    if strategy == "ilp":
        options["mip_gap"] = 0.01
    try:
        return get_strategy(strategy)(graph, budget, **options)
    except GraphError:
        return None  # a chain-only baseline on a non-linear graph


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--graphs", nargs="+", default=list(REFERENCE_GRAPHS))
    parser.add_argument("--fractions", nargs="+", type=float, default=[0.9, 0.7, 0.5])
    parser.add_argument("--strategies", nargs="+", default=[s for s in strategy_names() if s != "ilp_plain"])
    parser.add_argument("--max-batch-budget", type=float, default=16e9)
    parser.add_argument("--skip-max-batch", action="store_true")
    args = parser.parse_args()
    graphs = benchmark_graphs(args.graphs)
    rows = []
    for graph in graphs:
        peak = no_recompute_peak(graph)
        for fraction in args.fractions:
            budget = fraction * peak
            results = {s: run(s, graph, budget, args.time_limit) for s in args.strategies}
            bounds = [r.lower_bound for r in results.values() if r is not None and r.lower_bound is not None]
            bound = max(bounds) if bounds else graph.total_cost
            row = {"graph": graph.name, "budget": fraction, "bound": bound / graph.total_cost}
            for s, r in results.items():
                if r is None:
                    row[s] = "n/a"
                elif r.has_schedule:
                    row[s] = f"{r.overhead(graph):.3f} ({r.cost / bound:.3f})"
                else:
                    row[s] = str(r.status)
            rows.append(row)
            print(markdown_table([row], list(row)).splitlines()[-1], flush=True)
    print("\nOverhead (ratio to the best proved lower bound); n/a = not applicable to this graph\n")
    print(markdown_table(rows, list(rows[0])))
    if args.skip_max_batch:
        return
    batch_rows = []
    for graph in graphs:
        row = {"graph": graph.name, "paper batch": graph.batch_size}
        for s in args.strategies:
            if s in ("approx_lp_randomized", "checkpoint_last"):
                continue
            try:
                result = max_batch_size(graph, args.max_batch_budget, strategy=s,
                                        time_limit=args.time_limit if s in TIMED else None)
            except GraphError:
                row[s] = "n/a"
                continue
            proved = " (exact)" if s == "ilp" and result.exact else ""
            row[s] = f"{result.max_batch}{proved}"
        batch_rows.append(row)
        print(markdown_table([row], list(row)).splitlines()[-1], flush=True)
    print(f"\nMaximum batch size at {args.max_batch_budget:.3g} bytes\n")
    print(markdown_table(batch_rows, list(batch_rows[0])))


if __name__ == "__main__":
    main()
