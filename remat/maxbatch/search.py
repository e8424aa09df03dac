"""Maximum batch size under a memory budget (paper §6.4, eq. 10).

The largest batch ``B`` whose B-scaled graph (activations, gradients and inputs
grow with B; parameters do not) has a valid schedule within the budget costing at
most one extra forward pass: ``cost <= 2 sum_fwd C + sum_bwd C`` (eq. 10).

``method="search"`` (any strategy): feasibility is monotone in B for the MILP, so
B is found by galloping then bisection over feasibility MILPs (objective dropped:
any schedule within the budget and the cost cap will do), reporting the largest
B proved feasible and the smallest proved infeasible. A feasible probe's schedule
proves every larger B it still fits unchanged (:func:`largest_batch_for`), so the
search moves on from there. Heuristics are searched the same way, each probe
being one run of the strategy.

For the MILP the search starts from the best fast heuristic's own maximum batch,
or from a schedule found by local search if that fits more: a checkpoint set,
then rematerialization stages chosen freely from it (each schedule is a point
of the MILP's space; together the two take up to 450 s). Above the seed, window MILPs of the
resident-set relaxation (:mod:`remat.maxbatch.relaxation`, HiGHS) bisect for the least B they
prove infeasible, which replaces the memory bound as the top of the search. ``time_limit``
bounds each probe and ``total_time_limit`` the search; an open search reports status ``time_limit``.

``method="milp"`` (the MILP only) is the paper's own single model, with B an
integer variable (:mod:`remat.maxbatch.single_milp`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from remat.graph import DFGraph, GraphError
from remat.maxbatch.limits import allowed_cost, batch_upper_bound, cost_cap, largest_batch_for, tighter_limit
from remat.maxbatch.probes import probe_milp, probe_strategy
from remat.maxbatch.relaxation import smallest_batch_ruled_out
from remat.maxbatch.result import MaxBatchResult
from remat.maxbatch.seeds import best_heuristic_batch
from remat.schedule import Schedule


def max_batch_size(
    graph: DFGraph,
    budget: float,
    strategy: str = "ilp",
    method: str = "search",
    time_limit: float | None = None,
    threads: int = 1,
    backend: str = "highs",
    on_probe: Callable[[dict[str, Any]], None] | None = None,
    hard_limits: bool = True,
    total_time_limit: float | None = None,
    **options: Any,
) -> MaxBatchResult:
    """The maximum batch size for ``strategy`` at ``budget`` bytes; see the module docstring.

    ``time_limit`` bounds each probe (search) or the single model (milp); with
    ``hard_limits`` (the default) an ``ilp`` probe's solvers run in a child
    process that is killed at its limit, since HiGHS can overrun its own limit
    on large models. ``on_probe`` hears each probe's ``{"batch", "verdict",
    "seconds"}`` as it ends, with ``"fits_up_to"``: the largest B its schedule
    (found at ``batch``, valid unchanged at every B up to there) proves feasible.
    ``total_time_limit`` bounds the whole search: each probe gets at most what is
    left, and the search stops when none is, answering with the bracket it reached.
    """
    if total_time_limit is not None and not total_time_limit > 0:
        raise ValueError(f"total time limit must be positive seconds, got {total_time_limit!r}; omit it for no limit")
    if graph.batch_size is None:
        raise GraphError(f"graph {graph.name!r} does not record its batch size; it cannot be rescaled")
    cost_cap(graph)
    start = time.perf_counter()
    if method == "milp":
        if strategy != "ilp":
            raise ValueError("method='milp' is the MILP's own model; use method='search' for other strategies")
        from remat.maxbatch.single_milp import max_batch_single_milp

        limit = tighter_limit(time_limit, total_time_limit)
        return max_batch_single_milp(graph, budget, limit, threads, backend, start)
    if method != "search":
        raise ValueError(f"unknown method {method!r}; choose 'search' or 'milp'")
    hi_bound = batch_upper_bound(graph, budget)
    probes: list[dict[str, Any]] = []
    best: tuple[int, Schedule | None] = (0, None)
    infeasible = hi_bound + 1
    unknown: list[int] = []

    def time_left() -> float | None:
        return None if total_time_limit is None else total_time_limit - (time.perf_counter() - start)

    def out_of_time() -> bool:
        left = time_left()
        return left is not None and left <= 0

    def probe(B: int) -> str:
        t0 = time.perf_counter()
        g = graph.with_batch_size(B)
        if strategy == "ilp":
            verdict, schedule = probe_milp(g, budget, tighter_limit(time_limit, time_left()), threads, backend,
                                            hard_limits)
        else:
            verdict, schedule = probe_strategy(g, budget, strategy, options)
        return note(B, verdict, schedule, t0)

    def note(B: int, verdict: str, schedule: Schedule | None, t0: float, **extra: Any) -> str:
        """Record a probe's answer (and tell ``on_probe``), moving the bracket."""
        nonlocal best, infeasible
        record = {"batch": B, "verdict": verdict, "seconds": time.perf_counter() - t0, **extra}
        if verdict == "feasible":
            # For the MILP a schedule is a proof for every B it fits (other strategies must be rerun at each B).
            reach = largest_batch_for(graph, schedule, budget, B, hi_bound) if strategy == "ilp" else B
            record["fits_up_to"] = reach
            if reach > best[0]:
                best = (reach, schedule)
        elif verdict == "infeasible":
            infeasible = min(infeasible, B)
        elif verdict == "unknown":
            unknown.append(B)
        probes.append(record)
        if on_probe is not None:
            on_probe(record)
        return verdict

    def bracket() -> tuple[int, int]:
        """Largest B proved feasible, and the smallest B above it not (yet) known to be feasible."""
        return best[0], min([infeasible, *(u for u in unknown if u > best[0])])

    if strategy == "ilp" and hi_bound >= 1:
        t0 = time.perf_counter()
        seed = best_heuristic_batch(graph, budget, hi_bound, max_batch_size,
                                    None if total_time_limit is None else start + total_time_limit)
        if seed is not None:
            name, B, schedule = seed
            note(B, "feasible", schedule, t0, heuristic=name)
        if best[0] < hi_bound and not out_of_time():
            t0 = time.perf_counter()
            ruled_out = smallest_batch_ruled_out(graph, budget, best[0], hi_bound, allowed_cost,
                                                 None if total_time_limit is None else start + total_time_limit)
            if ruled_out is not None:
                note(ruled_out, "infeasible", None, t0, proof="resident_set_relaxation")
                hi_bound = ruled_out - 1
    if hi_bound >= 1:
        # Gallop and end on the top (the memory bound, or the relaxation's): when it is tight (MobileNet at
        # 16 GB) the answer is then proved at once, with no bisection over near-infeasible, slow probes.
        # The first probe always runs, so that even a spent time limit answers with something.
        B = min(2 * best[0], hi_bound) if best[0] else 1
        while best[0] < hi_bound and not (probes and out_of_time()) and probe(B) == "feasible":
            B = min(2 * best[0], hi_bound)
        lo, hi = bracket()
        while hi - lo > 1 and not out_of_time():
            probe((lo + hi) // 2)
            lo, hi = bracket()
    elapsed = time.perf_counter() - start
    # An unknown probe between the largest feasible and the smallest infeasible B leaves the answer unproved.
    lo, hi = bracket()
    stopped = hi - lo > 1 and out_of_time()
    if stopped:
        # Only a proof bounds the answer from above: an unknown probe does not.
        message = (f"stopped at the total time limit of {total_time_limit:g} s: the maximum batch is in "
                   f"[{lo}, {infeasible - 1}]; give more time to narrow it")
    elif not best[0]:
        message = f"no batch size B >= 1 fits {budget:.6g} bytes within one extra forward pass"
    else:
        message = ""
    return MaxBatchResult(strategy, "search", budget, best[0], infeasible, elapsed, best[1], probes, message, stopped)
