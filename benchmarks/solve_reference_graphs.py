"""Issue 7's target, measured: plain MILP vs the certified ilp pipeline on the reference graphs.

    python benchmarks/solve_reference_graphs.py [--time-limit 600] [--graphs vgg16 ...] [--fractions 0.9 0.8 ...]
        [--skip-plain] [--threads 1] [--ablations full_bb no_lp no_heur no_rins no_race serial]
        [--max-batch | --max-batch-only]

Per graph x budget (fractions of checkpoint_all's peak): the plain MILP (problem 9 on
HiGHS, no warm start, no memory-bound shortcut) and the pipeline (remat.milp.certified), each given the
same time limit and asked for optimality (relative gap 1e-4). Columns: plain time /
status / objective / bound; pipeline time to first schedule, to a certified 1 % gap, to
optimality, objective, bound; and the speed-up to optimality where both prove it.
The summary gives the geometric-mean speed-up and how many cells meet each target
(1 % certified gap or infeasibility proof within the limit; first schedule <= 10 s).
``--max-batch`` adds the exact maximum batch size at 16 GB per graph (eq. 10), each
feasibility probe under the same time limit and each graph's search under
``--max-batch-total`` seconds (30 min), with the total time to the proof or the bracket reached.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import benchmark_graphs, markdown_table  # noqa: E402

from remat.budget import no_recompute_peak  # noqa: E402
from remat.graph.reference import REFERENCE_GRAPHS  # noqa: E402
from remat.maxbatch.search import max_batch_size  # noqa: E402
from remat.milp.certified import solve_ilp_certified  # noqa: E402
from remat.milp.plain import solve_ilp  # noqa: E402
from remat.result import Status  # noqa: E402


def cell(graph, fraction: float, time_limit: float, skip_plain: bool, ablations: list[str], threads: int) -> dict:
    budget = fraction * no_recompute_peak(graph)
    row: dict = {"graph": graph.name, "budget": fraction}
    if not skip_plain:
        plain = solve_ilp(graph, budget, time_limit=time_limit, memory_bound_check=False, threads=threads)
        row |= {"plain_s": plain.solve_time, "plain_status": str(plain.status),
                "plain_obj": plain.cost / graph.total_cost, "plain_bound": _relative(plain.lower_bound, graph),
                "plain_gap": plain.gap}
    pipe = solve_ilp_certified(graph, budget, time_limit=time_limit, mip_gap=1e-4, threads=threads)
    for name in ablations:
        # The pipeline with one idea taken out, to measure that idea on its own.
        other = solve_ilp_certified(graph, budget, time_limit=time_limit, mip_gap=1e-4,
                                    **{"threads": threads, **ABLATIONS[name]})
        certified = other.status in (Status.OPTIMAL, Status.INFEASIBLE)
        row[f"{name}_s"] = other.solve_time if certified else None
    ms = pipe.stats.get("milestones", {})
    proved_infeasible = pipe.status == Status.INFEASIBLE
    row |= {
        "first_s": ms.get("first_schedule"),
        "gap1_s": ms.get("gap_1pct", 0.0 if proved_infeasible else None),
        "opt_s": pipe.solve_time if pipe.status in (Status.OPTIMAL, Status.INFEASIBLE) else None,
        "status": str(pipe.status),
        "overhead": pipe.cost / graph.total_cost,
        "bound": _relative(pipe.lower_bound, graph),
        "gap": pipe.gap,
        "source": pipe.stats.get("incumbent_source") or pipe.stats.get("proof", ""),
    }
    if not skip_plain and plain.status in (Status.OPTIMAL, Status.INFEASIBLE) and row["opt_s"]:
        row["speedup"] = plain.solve_time / max(row["opt_s"], 1e-3)
    return row


def _relative(bound: float | None, graph) -> float | None:
    return None if bound is None else bound / graph.total_cost


# Ablations: the pipeline without one of its ideas.
ABLATIONS = {
    "full_bb": {"exact_model": "full"},  # branch and cut on (9) instead of the lazy frontier relaxation
    "no_lp": {"use_lp": False},  # no LP bound / rounding stage
    "no_heur": {"heuristics": ()},  # no heuristic incumbents
    "no_rins": {"local_search": False},  # no RINS local search before branch and bound
    "no_race": {"race_with": None},  # one exact engine even with --threads 2
    "serial": {"threads": 1},  # one engine on one thread
    "no_free_once": {"free_once": False},  # without the inequality that frees a value at most once per stage
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time-limit", type=float, default=600.0)
    parser.add_argument("--graphs", nargs="+", default=list(REFERENCE_GRAPHS))
    parser.add_argument("--fractions", nargs="+", type=float, default=[0.9, 0.8, 0.7, 0.6, 0.5])
    parser.add_argument("--skip-plain", action="store_true", help="run only the pipeline")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads for the plain MILP and the pipeline alike (2+ races two exact engines)")
    parser.add_argument("--max-batch", action="store_true",
                        help="also prove the exact maximum batch size (eq. 10) at --max-batch-budget per graph")
    parser.add_argument("--max-batch-only", action="store_true", help="only the maximum batch sizes")
    parser.add_argument("--max-batch-budget", type=float, default=16e9)
    parser.add_argument("--max-batch-total", type=float, default=1800.0,
                        help="seconds for one graph's whole search (the target's 30 min); it then reports its bracket")
    parser.add_argument("--ablations", nargs="*", default=[], choices=sorted(ABLATIONS),
                        help="also time the pipeline without each of these ideas (time to a certified answer)")
    args = parser.parse_args()
    graphs = benchmark_graphs(args.graphs)
    if not args.max_batch_only:
        solve_cells(graphs, args)
    if args.max_batch or args.max_batch_only:
        prove_max_batches(graphs, args.max_batch_budget, args.time_limit, args.max_batch_total)


def solve_cells(graphs: list, args: argparse.Namespace) -> None:
    rows = []
    for graph in graphs:
        for fraction in args.fractions:
            rows.append(cell(graph, fraction, args.time_limit, args.skip_plain, args.ablations, args.threads))
            print(markdown_table([rows[-1]], list(rows[-1])).splitlines()[-1], flush=True)
    columns = ["graph", "budget", "plain_s", "plain_status", "plain_obj", "plain_bound", "plain_gap", "first_s",
               "gap1_s", "opt_s", "status", "overhead", "bound", "gap", "source", "speedup"]
    columns += [f"{a}_s" for a in args.ablations]
    print()
    print(markdown_table(rows, [c for c in columns if any(c in r for r in rows)]))
    speedups = [r["speedup"] for r in rows if r.get("speedup")]
    optimal = [r["speedup"] for r in rows if r.get("speedup") and r.get("plain_status") == "optimal"]
    gap_ok = sum(1 for r in rows if r["gap1_s"] is not None and r["gap1_s"] <= args.time_limit)
    first_ok = sum(1 for r in rows if r["status"] == "infeasible" or (r["first_s"] is not None and r["first_s"] <= 10))
    summary = (f"\ncells: {len(rows)}; certified <= 1 % gap or proved infeasible: {gap_ok}; first schedule <= 10 s "
               f"(or proved infeasible): {first_ok}")
    if not args.skip_plain:
        summary += (f"; geometric-mean speed-up over the {len(optimal)} cells the plain MILP proved optimal: "
                    f"{geomean(optimal):.2f}x; over the {len(speedups)} it proved optimal or infeasible: "
                    f"{geomean(speedups):.2f}x")
    print(summary)
    for name in args.ablations:
        # Each idea's worth: geometric mean of (time without it) / (time with it) where both were certified.
        pairs = [(r[f"{name}_s"], r["opt_s"]) for r in rows if r.get(f"{name}_s") and r.get("opt_s")
                 and r["status"] != "infeasible"]
        if pairs:
            print(f"ablation {name}: {geomean([a / b for a, b in pairs]):.2f}x the full pipeline's time "
                  f"(geometric mean over {len(pairs)} cells), slower in {sum(a > b for a, b in pairs)}")


def prove_max_batches(graphs: list, budget: float, time_limit: float, total: float) -> None:
    """Issue 7's last target: the exact maximum batch at ``budget`` per graph, each probe under ``time_limit``
    and the whole search under ``total`` seconds."""
    rows = []
    for graph in graphs:
        def progress(probe: dict, name: str = graph.name) -> None:
            reach = f", its schedule fits up to {probe['fits_up_to']}" if "fits_up_to" in probe else ""
            by = f" (seed: {probe['heuristic']})" if "heuristic" in probe else ""
            print(f"  {name}: batch {probe['batch']} {probe['verdict']}{by} in {probe['seconds']:.1f} s{reach}",
                  file=sys.stderr, flush=True)

        result = max_batch_size(graph, budget, strategy="ilp", time_limit=time_limit, on_probe=progress,
                                total_time_limit=total)
        seed = next((f"{p['heuristic']} {p['fits_up_to']}" for p in result.probes if "heuristic" in p), "-")
        rows.append({"graph": graph.name, "max_batch": result.max_batch,
                     "smallest_infeasible": result.smallest_infeasible, "status": result.status, "seed": seed,
                     "seconds": result.solve_time, "probes": len(result.probes),
                     "slowest_probe_s": max((p["seconds"] for p in result.probes), default=0.0)})
        print(markdown_table([rows[-1]], list(rows[-1])).splitlines()[-1], flush=True)
    print(f"\nExact maximum batch size at {budget:.3g} bytes (cost within one extra forward pass, eq. 10)\n")
    print(markdown_table(rows, list(rows[0])))
    proved = sum(1 for r in rows if r["status"] in ("optimal", "infeasible") and r["seconds"] <= 1800)
    print(f"\nproved exact within 30 min: {proved} of {len(rows)}")


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


if __name__ == "__main__":
    main()
