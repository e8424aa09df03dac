"""Where the maximum-batch search starts: the largest batch a fast heuristic or a local search reaches (§6.4)."""

from __future__ import annotations

import time
from collections.abc import Callable

from remat.graph import DFGraph, GraphError
from remat.maxbatch.checkpoint_search import least_peak_checkpoint_set
from remat.maxbatch.limits import allowed_cost, largest_batch_for, qualifies, tighter_limit
from remat.maxbatch.materialization_search import least_peak_materialization
from remat.maxbatch.probes import FAST_HEURISTICS
from remat.maxbatch.result import MaxBatchResult
from remat.schedule import Schedule

# (graph, budget, strategy=name) -> a MaxBatchResult: the search run for one heuristic
HeuristicSearch = Callable[..., MaxBatchResult]

CLIMB_SECONDS = 150.0  # the seed's checkpoint local search reaches its best in ~100 s on ResNet50


MATERIALIZE_SECONDS = 300.0  # then the rematerialization-stage search (ResNet50: 553 -> 766 in 300 s)


def best_heuristic_batch(graph: DFGraph, budget: float, hi_bound: int, heuristic_search: HeuristicSearch,
                         deadline: float | None = None) -> tuple[str, int, Schedule] | None:
    """The largest batch a fast heuristic's own search reaches within the cap, with its schedule.

    ``heuristic_search(graph, budget, strategy=name)`` is the search that finds a
    heuristic's maximum batch (:func:`remat.maxbatch.search.max_batch_size`; passed in
    because that search starts here).

    Each such schedule is a point of the MILP's space, so the MILP's answer is at
    least this (§6.4 compares the strategies the same way). Seeding the search
    with it keeps the reported lower end at or above every baseline's even where
    the solver probes run out of time (ResNet50). Then, unless a heuristic has
    reached the memory bound ``hi_bound``, a checkpoint set of least peak within
    the cap is sought by local search at the best heuristic's batch
    (:mod:`remat.maxbatch.checkpoint_search`) for at most ``CLIMB_SECONDS``,
    and from its result a schedule with freely chosen rematerialization stages
    (:mod:`remat.maxbatch.materialization_search`) for at most
    ``MATERIALIZE_SECONDS``, all ending by ``deadline`` (a ``time.perf_counter()``
    value) if one is given.
    """
    best: tuple[str, int, Schedule] | None = None
    for name in FAST_HEURISTICS:
        try:
            found = heuristic_search(graph, budget, strategy=name)
        except (GraphError, ValueError):
            continue  # chain-only heuristics on other graphs
        B = found.max_batch
        if B > (best[1] if best else 0) and found.schedule is not None and qualifies(graph, found.schedule, budget, B):
            best = (name, B, found.schedule)
    climb_time = tighter_limit(CLIMB_SECONDS, None if deadline is None else deadline - time.perf_counter())
    if (best and best[1] >= hi_bound) or climb_time <= 0:
        return best
    B = best[1] if best else 1
    scaled = graph.with_batch_size(B)
    climbed = least_peak_checkpoint_set(scaled, allowed_cost(scaled), climb_time)
    if climbed is not None:
        best = _fitting_more(graph, budget, B, hi_bound, best, "checkpoint_local_search", climbed[0])
    left = tighter_limit(MATERIALIZE_SECONDS, None if deadline is None else deadline - time.perf_counter())
    if climbed is None or best is None or best[1] >= hi_bound or left <= 0:
        return best
    B = best[1]
    scaled = graph.with_batch_size(B)
    found = least_peak_materialization(scaled, allowed_cost(scaled), climbed[0], left,
                                       good_enough=lambda s: qualifies(graph, s, budget, hi_bound))
    if found is not None:
        best = _fitting_more(graph, budget, B, hi_bound, best, "materialization_local_search", found[0])
    return best


def _fitting_more(graph: DFGraph, budget: float, B: int, hi_bound: int, best: tuple[str, int, Schedule] | None,
                  name: str, schedule: Schedule) -> tuple[str, int, Schedule] | None:
    """``(name, reach, schedule)`` if ``schedule`` fits at ``B`` and its reach beats ``best``'s; else ``best``."""
    if not qualifies(graph, schedule, budget, B):
        return best
    reach = largest_batch_for(graph, schedule, budget, B, hi_bound)
    return (name, reach, schedule) if reach > (best[1] if best else 0) else best
