"""Checkpoint sets chosen by local search rather than by one threshold (§6.1, App. B.2).

Chen et al.'s greedy (Alg. 3) places checkpoints wherever a running sum of
activation bytes passes a segment budget ``b``, and the ``*_greedy`` heuristics
only search over ``b``. Every subset of the forward nodes is a checkpoint set,
though, and :func:`~remat.baselines.checkpoint_sets.checkpoint_set_schedule` turns any
of them into a schedule whose cost and peak :func:`~remat.schedule.simulate`
measures. :func:`hill_climb_checkpoints` starts from the best set of the greedy's
grid and moves one checkpoint at a time (drop it, add one, or shift one a few
nodes along the topological order) while the score improves;
:func:`iterated_hill_climb` restarts it from random perturbations of the best.

This matters most for the maximum batch (§6.4, eq. 10), where the question is the
least peak memory within one extra forward pass: on ResNet50 the greedy's best
set needs 32.9 MB per sample (486 at 16 GB), the searched set 28.9 MB (553), in
about 100 s (measured at commit 00183be with ``benchmarks/solve_reference_graphs.py
--graphs resnet50 --max-batch-only``). Like the heuristics it starts from, the result is a valid schedule
and a point of the MILP's space, not a bound.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable

import numpy as np

from remat.baselines.checkpoint_sets import (
    articulation_candidates,
    checkpoint_set_schedule,
    greedy_checkpoint_sets,
    linearized_candidates,
)
from remat.graph import DFGraph
from remat.schedule import Schedule, Simulation, simulate

Score = tuple[float, float]
SHIFTS = (1, 2, 3)
PATIENCE = 20  # kicks in a row without improvement; ResNet50's best came after 6


def checkpoint_moves(checkpoints: frozenset[int], node: int, candidates: frozenset[int],
                     shifts: Iterable[int] = SHIFTS) -> list[frozenset[int]]:
    """The sets one move from ``checkpoints`` at ``node``: drop or shift it if checkpointed, else add it."""
    if node not in checkpoints:
        return [checkpoints | {node}]
    rest = checkpoints - {node}
    moves = [rest]
    for d in shifts:
        for to in (node - d, node + d):
            if to in candidates and to not in checkpoints:
                moves.append(rest | {to})
    return moves


def peak_within_cost(graph: DFGraph, cost_limit: float) -> Callable[[frozenset[int]], Score]:
    """The score of a checkpoint set: (peak memory, cost) of its schedule, the peak infinite above ``cost_limit``.

    Cached, since the climbs revisit sets; minimising it is eq. (10)'s question
    (the least memory within one extra forward pass) over checkpoint sets.
    """
    @functools.cache
    def score(checkpoints: frozenset[int]) -> Score:
        sim = simulate(graph, checkpoint_set_schedule(graph, sorted(checkpoints)), plan=False)
        return (sim.peak_memory if sim.valid and sim.cost <= cost_limit else np.inf, sim.cost)

    return score


def hill_climb_checkpoints(start: Iterable[int], candidates: Iterable[int], score: Callable[[frozenset[int]], Score],
                           time_limit: float | None = None) -> tuple[frozenset[int], Score]:
    """First-improvement hill climbing over checkpoint sets, minimising ``score``.

    The candidates are visited in ascending order, cyclically; at each, the
    first of :func:`checkpoint_moves` that lowers the score is taken. The climb
    ends at a local optimum (a whole cycle with no improving move) or when
    ``time_limit`` seconds have passed; without a time limit it is
    deterministic. ``score`` is called for every move tried, so pass a cached
    one (:func:`peak_within_cost`).
    """
    order = sorted({int(c) for c in candidates})
    allowed = frozenset(order)
    current = frozenset(int(c) for c in start)
    best = score(current)
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    i = since = 0
    while order and since < len(order):
        if deadline is not None and time.perf_counter() > deadline:
            break
        since += 1
        for move in checkpoint_moves(current, order[i], allowed):
            s = score(move)
            if s < best:
                current, best, since = move, s, 0
                break
        i = (i + 1) % len(order)
    return current, best


def iterated_hill_climb(start: Iterable[int], candidates: Iterable[int], score: Callable[[frozenset[int]], Score],
                        time_limit: float | None = None, patience: int = PATIENCE, kick_size: int = 3,
                        seed: int = 0) -> tuple[frozenset[int], Score]:
    """Iterated local search (Lourenço, Martin & Stützle 2003) over checkpoint sets.

    After :func:`hill_climb_checkpoints` reaches a local optimum, the best set so
    far is "kicked" (``kick_size`` random candidates toggled, from a generator
    seeded with ``seed``) and climbed again, keeping the result when it scores
    lower. Stops after ``patience`` kicks in a row that find nothing better, or
    after ``time_limit`` seconds, whichever comes first. The landscape is rugged: on
    ResNet50 the first climb stops at 524 samples in 16 GB and the kicks reach 553.
    """
    deadline = None if time_limit is None else time.perf_counter() + time_limit

    def left() -> float | None:
        return None if deadline is None else deadline - time.perf_counter()

    order = sorted({int(c) for c in candidates})
    best, best_score = hill_climb_checkpoints(start, order, score, left())
    rng = np.random.default_rng(seed)
    idle = 0
    while order and idle < patience and (deadline is None or left() > 0):
        idle += 1
        kicked = set(best)
        kicked.symmetric_difference_update(int(c) for c in rng.choice(order, min(kick_size, len(order)), replace=False))
        found, found_score = hill_climb_checkpoints(kicked, order, score, left())
        if found_score < best_score:
            best, best_score, idle = found, found_score, 0
    return best, best_score


def least_peak_checkpoint_set(graph: DFGraph, cost_limit: float, time_limit: float | None = None,
                              patience: int = PATIENCE) -> tuple[Schedule, Simulation] | None:
    """A checkpoint-set schedule of least peak memory among those costing at most ``cost_limit``, by local search.

    Starts from the least-peak set within ``cost_limit`` of Chen's greedy over the
    linearized and the articulation-point candidates (App. B), then searches
    subsets of the forward nodes (:func:`iterated_hill_climb`; ``time_limit``
    and ``patience`` bound it; the grid, a few seconds on ResNet50, counts against
    ``time_limit`` but always runs). ``None`` when no set of the greedy's grid is
    within ``cost_limit``.
    """
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    score = peak_within_cost(graph, cost_limit)
    candidates = linearized_candidates(graph)
    starts = (frozenset(int(c) for c in s)
              for cands in (candidates, articulation_candidates(graph)) for s in greedy_checkpoint_sets(graph, cands))
    start = min(starts, key=score)
    if not np.isfinite(score(start)[0]):
        return None
    left = None if deadline is None else max(deadline - time.perf_counter(), 0.0)
    best, _ = iterated_hill_climb(start, candidates, score, left, patience)
    schedule = checkpoint_set_schedule(graph, sorted(best))
    return schedule, simulate(graph, schedule, plan=False)
