"""Issue 7's target, measured: plain MILP vs the certified ilp pipeline on the reference graphs.

    python benchmarks/solve_reference_graphs.py [--time-limit 600] [--graphs vgg16 ...] [--fractions 0.9 0.8 ...]
        [--skip-plain] [--threads 1] [--ablations full_bb no_lp no_heur no_rins no_race serial no_free_once]
        [--max-batch | --max-batch-only] [--output results/benchmarks/solve_reference_graphs.csv]

Per graph x budget (fractions of checkpoint_all's peak): the plain MILP (problem 9 on HiGHS, no warm
start) and the pipeline (remat.milp.certified), each given the same time limit, asked for optimality
(relative gap 1e-4) and given the same preprocessing: the instant memory-bound check of
:func:`remat.budget.check_budget`, which both run before any model is built.

Before a cell counts, each answer is re-checked (:func:`common.recheck`): its schedule simulated again
(valid, within the budget, the reported cost, and for "optimal" within the gap of the reported bound);
"infeasible" only with a proof (the memory bound, the LP or a MILP), never from an over-budget
incumbent. Every incumbent the pipeline took on a solver's or heuristic's word is simulated too, after the
solve (outside its clock). Then the two answers must agree - same status, objectives within the gap, and
neither's schedule cheaper than the other's bound - or the cell is a ``disagree``. Each cell's
``outcome``: ``both`` (both certified, agreeing: the speed-up counts), ``tie`` (both decided by the shared
memory-bound check: 1x by construction), ``win`` (only the pipeline certified: the speed-up is at least the
one shown), ``loss`` (only the plain MILP certified), ``open`` (neither), ``disagree``.

Raw rows go to ``--output`` (CSV) with the exact command, commit and machine load beside it (``.json``),
rewritten after every cell; ``benchmarks/report.py`` prints the README's lines from those files.
``--max-batch`` adds the exact maximum batch size at 16 GB per graph (eq. 10), each feasibility probe under
the same time limit and each graph's search under ``--max-batch-total`` seconds (30 min), with rows in
``max_batch.csv`` beside ``--output``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS_DIR, RowWriter, benchmark_graphs, markdown_table, recheck  # noqa: E402

import remat.milp.certified as certified  # noqa: E402
from remat.budget import no_recompute_peak  # noqa: E402
from remat.graph.reference import REFERENCE_GRAPHS  # noqa: E402
from remat.maxbatch.limits import cost_cap  # noqa: E402
from remat.maxbatch.search import max_batch_size  # noqa: E402
from remat.milp.incumbent import Incumbent  # noqa: E402
from remat.milp.plain import solve_ilp  # noqa: E402
from remat.result import SolveResult, Status  # noqa: E402
from remat.schedule import simulate  # noqa: E402

MIP_GAP = 1e-4
MEMORY_BOUND = "memory lower bound"

COLUMNS = ["graph", "n", "budget", "budget_bytes", "time_limit", "threads",
           "plain_s", "plain_status", "plain_obj", "plain_bound", "plain_gap", "plain_proof", "plain_certified",
           "plain_note", "first_s", "gap1_s", "opt_s", "pipe_s", "status", "overhead", "bound", "gap", "source",
           "proof", "certified", "note", "incumbents_checked", "incumbents_wrong", "outcome", "speedup",
           "speedup_at_least"]


@contextlib.contextmanager
def recorded_incumbents() -> Iterator[list]:
    """Collects each schedule the pipeline takes as its incumbent at a cost it is told, not one it simulated.

    Recording is a list append, so the pipeline's clock is not charged; the schedules are simulated after
    the solve (:func:`wrong_claims`).
    """
    claims: list[tuple[object, float, str]] = []

    class Recording(Incumbent):
        def offer(self, schedule, source, cost=None):
            if cost is not None and cost < self.cost - 1e-9:
                claims.append((schedule, cost, source))
            super().offer(schedule, source, cost)

    certified.Incumbent = Recording
    try:
        yield claims
    finally:
        certified.Incumbent = Incumbent


def wrong_claims(graph, budget: float, claims: list) -> list[str]:
    """The recorded incumbents whose schedule is invalid, over the budget, or not of the cost claimed."""
    wrong = []
    for schedule, cost, source in claims:
        sim = simulate(graph, schedule, plan=False)
        if not (sim.within(budget) and math.isclose(sim.cost, cost, rel_tol=1e-9, abs_tol=1e-9)):
            wrong.append(f"{source}: claimed {cost:.9g}, simulate() gives {sim.cost:.9g} at {sim.peak_memory:.6g} B")
    return wrong


def plain_proof(result: SolveResult) -> str:
    """The plain MILP's proof of infeasibility: the shared memory bound, the solver's, or none."""
    if result.status != Status.INFEASIBLE or result.min_feasible_budget is not None:
        return ""  # an over-budget incumbent is no proof
    return "solver" if "variables" in result.stats else MEMORY_BOUND


def run_pipeline(graph, budget: float, time_limit: float, **options) -> tuple[SolveResult, str, str, int]:
    """The pipeline's answer, what it certifies after :func:`common.recheck`, its note, and incumbents checked."""
    with recorded_incumbents() as claims:
        result = certified.solve_ilp_certified(graph, budget, time_limit=time_limit, mip_gap=MIP_GAP, **options)
    verdict, note = recheck(graph, budget, result, MIP_GAP, result.stats.get("proof", ""))
    wrong = wrong_claims(graph, budget, claims)
    if wrong:
        note = "; ".join(filter(None, [note, f"{len(wrong)} incumbents fail simulate(): {wrong[0]}"]))
    result.stats["incumbents_wrong"] = len(wrong)
    return result, verdict, note, len(claims)


def agreement(a: SolveResult, a_verdict: str, b: SolveResult, b_verdict: str) -> str:
    """Why two answers to one cell contradict each other, or "" when they do not."""
    answers = ((a, a_verdict), (b, b_verdict))
    for (x, _), (y, y_verdict) in (answers, answers[::-1]):
        if x.has_schedule and y_verdict == "infeasible":
            return f"{y.strategy} proves infeasible where {x.strategy} has a schedule"
        if x.has_schedule and y.lower_bound is not None and y.lower_bound > x.cost * (1 + 1e-6) + 1e-9:
            return f"{y.strategy}'s bound {y.lower_bound:.9g} is above {x.strategy}'s schedule {x.cost:.9g}"
    if a_verdict and b_verdict:
        if a_verdict != b_verdict:
            return f"{a.strategy} says {a_verdict}, {b.strategy} says {b_verdict}"
        tolerance = MIP_GAP / (1 - MIP_GAP) + 1e-9
        if a_verdict == "optimal" and abs(a.cost - b.cost) > tolerance * max(a.cost, b.cost):
            return f"optima differ: {a.cost:.9g} vs {b.cost:.9g}"
    return ""


def cell(graph, fraction: float, time_limit: float, skip_plain: bool, ablations: list[str], threads: int) -> dict:
    budget = fraction * no_recompute_peak(graph)
    row: dict = {"graph": graph.name, "n": graph.n, "budget": fraction, "budget_bytes": budget,
                 "time_limit": time_limit, "threads": threads}
    if not skip_plain:  # first, as before this benchmark re-checked answers
        plain = solve_ilp(graph, budget, time_limit=time_limit, mip_gap=MIP_GAP, threads=threads)
    pipe, verdict, note, checked = run_pipeline(graph, budget, time_limit, threads=threads)
    ms = pipe.stats.get("milestones", {})
    proof = pipe.stats.get("proof", "")
    # Time to a schedule within 1 % of the bound, where the re-checked final answer is within 1 %.
    gap1 = ms.get("gap_1pct", pipe.solve_time) if verdict == "optimal" or (not note and pipe.gap is not None
                                                                           and pipe.gap <= 0.01) else None
    row |= {
        "first_s": ms.get("first_schedule"),
        "gap1_s": pipe.solve_time if verdict == "infeasible" else gap1,
        "opt_s": pipe.solve_time if verdict else None,
        "pipe_s": pipe.solve_time, "status": str(pipe.status), "overhead": pipe.cost / graph.total_cost,
        "bound": _relative(pipe.lower_bound, graph), "gap": pipe.gap,
        "source": pipe.stats.get("incumbent_source") or "", "proof": proof, "certified": verdict, "note": note,
        "incumbents_checked": checked, "incumbents_wrong": pipe.stats["incumbents_wrong"],
    }
    for name in ablations:
        # The pipeline with one idea taken out: its time counts only where it certifies the same answer.
        other, other_verdict, other_note, _ = run_pipeline(graph, budget, time_limit, **{"threads": threads,
                                                                                         **ABLATIONS[name]})
        clash = agreement(pipe, verdict, other, other_verdict)
        row[f"{name}_status"] = f"disagree: {clash}" if clash else (other_verdict or str(other.status))
        row[f"{name}_s"] = other.solve_time if other_verdict and verdict and not clash else None
    if skip_plain:
        row["outcome"] = "certified" if verdict else "open"
        return row
    p_proof = plain_proof(plain)
    p_verdict, p_note = recheck(graph, budget, plain, MIP_GAP, p_proof)
    row |= {"plain_s": plain.solve_time, "plain_status": str(plain.status),
            "plain_obj": plain.cost / graph.total_cost, "plain_bound": _relative(plain.lower_bound, graph),
            "plain_gap": plain.gap, "plain_proof": p_proof, "plain_certified": p_verdict, "plain_note": p_note}
    clash = agreement(plain, p_verdict, pipe, verdict)
    if clash:
        row["outcome"], row["note"] = "disagree", "; ".join(filter(None, [note, clash]))
    elif p_verdict and verdict:
        tie = p_proof == proof == MEMORY_BOUND
        row["outcome"] = "tie" if tie else "both"
        row["speedup"] = 1.0 if tie else plain.solve_time / pipe.solve_time
    elif verdict:
        row["outcome"] = "win"
        if plain.status in (Status.FEASIBLE, Status.TIME_LIMIT):  # stopped by the limit: at least this much faster
            row["speedup_at_least"] = plain.solve_time / pipe.solve_time
    else:
        row["outcome"] = "loss" if p_verdict else "open"
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
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "solve_reference_graphs.csv",
                        help="CSV of raw rows (the command and machine go beside it as .json)")
    args = parser.parse_args()
    graphs = benchmark_graphs(args.graphs)
    if not args.max_batch_only:
        solve_cells(graphs, args)
    if args.max_batch or args.max_batch_only:
        prove_max_batches(graphs, args.max_batch_budget, args.time_limit, args.max_batch_total,
                          args.output.with_name("max_batch.csv"))


def solve_cells(graphs: list, args: argparse.Namespace) -> None:
    columns = COLUMNS + [f"{a}_{k}" for a in args.ablations for k in ("s", "status")]
    out = RowWriter(args.output, columns, "solve_reference_graphs.py")
    for graph in graphs:
        for fraction in args.fractions:
            out.add(cell(graph, fraction, args.time_limit, args.skip_plain, args.ablations, args.threads))
            print(markdown_table([out.rows[-1]], columns).splitlines()[-1], flush=True)
    out.finish()
    shown = [c for c in columns if c not in ("n", "budget_bytes", "time_limit", "threads", "note", "plain_note")]
    print()
    print(markdown_table(out.rows, [c for c in shown if any(r.get(c) is not None for r in out.rows)]))
    print(f"\nraw rows: {args.output}; the summary: python benchmarks/report.py")
    for r in out.rows:
        if r.get("note") or r.get("plain_note"):
            print(f"{r['graph']} {r['budget']}: {r.get('note') or ''} {r.get('plain_note') or ''}".rstrip())


def prove_max_batches(graphs: list, budget: float, time_limit: float, total: float, output: Path) -> None:
    """Issue 7's last target: the exact maximum batch at ``budget`` per graph, each probe under ``time_limit``
    and the whole search under ``total`` seconds."""
    out = RowWriter(output, ["graph", "max_batch", "smallest_infeasible", "status", "seed", "seconds", "probes",
                             "slowest_probe_s", "schedule_checked"], "solve_reference_graphs.py")
    for graph in graphs:
        def progress(probe: dict, name: str = graph.name) -> None:
            reach = f", its schedule fits up to {probe['fits_up_to']}" if "fits_up_to" in probe else ""
            by = f" (seed: {probe['heuristic']})" if "heuristic" in probe else ""
            print(f"  {name}: batch {probe['batch']} {probe['verdict']}{by} in {probe['seconds']:.1f} s{reach}",
                  file=sys.stderr, flush=True)

        result = max_batch_size(graph, budget, strategy="ilp", time_limit=time_limit, on_probe=progress,
                                total_time_limit=total)
        seed = next((f"{p['heuristic']} {p['fits_up_to']}" for p in result.probes if "heuristic" in p), "-")
        checked = None
        if result.schedule is not None and result.max_batch:
            # The schedule that proves the lower end, simulated again at that batch.
            batched = graph.with_batch_size(result.max_batch)
            sim = simulate(batched, result.schedule, plan=False)
            checked = sim.within(budget) and sim.cost <= cost_cap(batched) + 1e-6
        out.add({"graph": graph.name, "max_batch": result.max_batch,
                 "smallest_infeasible": result.smallest_infeasible, "status": result.status, "seed": seed,
                 "seconds": result.solve_time, "probes": len(result.probes),
                 "slowest_probe_s": max((p["seconds"] for p in result.probes), default=0.0),
                 "schedule_checked": checked})
        print(markdown_table([out.rows[-1]], out.columns).splitlines()[-1], flush=True)
    out.finish()
    print(f"\nExact maximum batch size at {budget:.3g} bytes (cost within one extra forward pass, eq. 10)\n")
    print(markdown_table(out.rows, out.columns))
    proved = sum(1 for r in out.rows if r["status"] in ("optimal", "infeasible") and r["seconds"] <= 1800)
    print(f"\nproved exact within 30 min: {proved} of {len(out.rows)}")


if __name__ == "__main__":
    main()
