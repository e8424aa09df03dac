"""Schedules chosen by when each activation is rematerialized (generalising App. B's checkpoint sets, §6.4).

A checkpoint-set schedule (App. B) makes one of two choices for each forward
value: a checkpoint is kept from its forward computation to its last use; any
other value is recomputed at the first backward stage that reads its segment and
kept from there to its last use. Let the stage be free: each forward value ``v``
is kept through the forward pass until its last forward reader, and in the
backward pass it is either

* ``KEEP``: kept from its computation to its last use (a checkpoint),
* a stage ``s`` from the loss's to the one before its last reader: recomputed
  in stage ``s`` and kept from there to its last use, or
* ``RECOMPUTE``: never kept across stages; every stage that needs it recomputes it.

The choices give S (:func:`materialization_s`), the least R for that S comes
from :func:`~remat.baselines.recompute.solve_min_r` (App. B.1), and
:func:`~remat.schedule.simulate` measures the result, so every point is a valid
schedule of the MILP's space. A segment's values rematerialized at different
stages give two-level recomputation, which no checkpoint set expresses. On
MobileNet at eq. (10)'s cap the best checkpoint set the search of
:mod:`~remat.maxbatch.checkpoint_search` finds fits 905 samples in 16 GB; this
family reaches 1234, the memory bound, in about 10 s more (commit cc04960). On
ResNet50 it goes from the checkpoint search's 553 to 687 in 150 s (cc04960) and
to 766 in 300 s (b7d656f); both measured with
``benchmarks/solve_reference_graphs.py --max-batch-only``.

:func:`least_peak_materialization` minimises the peak by iterated local search:
a climb changes one value's choice at a time, trying first only the values live
at a stage where memory peaks (no other change can lower the peak), and scores
by (peak, stages at the peak, cost), so lowering one of several equal peaks
counts as progress. Where no such move helps, every value is tried, which can
lower the cost and leave room for later moves. Not a bound: exactness rests on
the solvers, as for every heuristic.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import numpy as np

from remat.baselines.recompute import solve_min_r
from remat.graph import DFGraph
from remat.schedule import Schedule, Simulation, simulate

KEEP, RECOMPUTE = -1, -2
# Stage moves double in reach: a good stage is often a whole residual block (tens of stages) away.
SHIFTS = (1, 2, 4, 8, 16, 32)
PATIENCE = 20  # kicks in a row without improvement; on MobileNet the bound comes in the first climb
Score = tuple[float, int, float]
Scorer = Callable[[np.ndarray], tuple[Score, np.ndarray]]


def _intervals(graph: DFGraph) -> tuple[np.ndarray, np.ndarray]:
    """Each value's last reader overall, and (forward values) its last forward reader; -1 where none."""
    last = np.array([int(u[-1]) if len(u) else -1 for u in graph.users], dtype=np.int64)
    last_forward = np.array([int(u[u <= graph.loss][-1]) if len(u[u <= graph.loss]) else -1 for u in graph.users],
                            dtype=np.int64)
    return last, last_forward


def materialization_s(graph: DFGraph, when: np.ndarray) -> np.ndarray:
    """S for the choices ``when`` (one per forward value: ``KEEP``, ``RECOMPUTE`` or a backward stage).

    Backward values are kept from their computation to their last reader, as in
    every checkpoint-set schedule; forward values as the module docstring says.
    """
    L, n = graph.loss, graph.n
    if len(when) != L:
        raise ValueError(f"need one choice per forward value ({L}), got {len(when)}")
    last, last_forward = _intervals(graph)
    ids = np.arange(n)
    t = ids[:, None]
    forward = np.where(ids < L, last_forward, last)
    S = (t > ids) & (t <= forward)
    when = np.asarray(when, dtype=np.int64)
    start = np.where(when == KEEP, ids[:L] + 1, when + 1)
    end = np.where(when == RECOMPUTE, -1, last[:L])
    S[:, :L] |= (t >= start) & (t <= end)
    return S


def materialization_of(graph: DFGraph, S: np.ndarray) -> np.ndarray:
    """The choices whose :func:`materialization_s` is ``S``, for any S of that form (e.g. a checkpoint set's).

    Any other S is read approximately (each value's first backward residency), so
    its choices may score differently from the schedule it came from.
    """
    last, _ = _intervals(graph)
    when = np.full(graph.loss, RECOMPUTE, dtype=np.int64)
    for v in range(graph.loss):
        if last[v] > v and S[v + 1 : last[v] + 1, v].all():
            when[v] = KEEP
            continue
        kept = np.flatnonzero(S[graph.loss + 1 :, v])
        if len(kept):
            when[v] = kept[0] + graph.loss
    return when


def materialization_moves(graph: DFGraph, when: np.ndarray, v: int, last: np.ndarray) -> list[int]:
    """The other choices tried for value ``v``: KEEP, RECOMPUTE, shifts of its stage, or its readers' stages."""
    lo, hi = graph.loss, int(last[v]) - 1
    if hi < lo:
        return []  # no backward reader: the choice changes nothing
    current = int(when[v])
    options = {KEEP, RECOMPUTE}
    if current >= 0:
        options |= {min(hi, current + d) for d in SHIFTS} | {max(lo, current - d) for d in SHIFTS}
    else:
        readers = [int(u) for u in graph.users[v] if u > lo]
        options |= {max(lo, u - 1) for u in readers} | {u for u in readers if u <= hi}
    options.discard(current)
    return sorted(options)


def peak_score(graph: DFGraph, cost_limit: float) -> Scorer:
    """(peak, stages at the peak, cost) of the choices' schedule, infinite above ``cost_limit``; and the values live
    (kept or computed) at a stage where memory peaks, the only ones whose change can lower the peak.

    Cached on the choices, since the climbs revisit them.
    """
    @functools.cache
    def cached(key: bytes) -> tuple[Score, np.ndarray]:
        schedule = _schedule(graph, np.frombuffer(key, dtype=np.int64))
        sim = simulate(graph, schedule, plan=False)
        if not (sim.valid and sim.cost <= cost_limit):
            return (np.inf, 0, np.inf), np.zeros(0, np.int64)
        stage_peak = sim.memory.max(axis=1)
        # Equal peaks from different stages can differ in the last bits of their float sums.
        hot = stage_peak >= sim.peak_memory * (1 - 1e-9)
        live = (schedule.S[hot] | schedule.R[hot]).any(axis=0)[: graph.loss]
        return (float(sim.peak_memory), int(hot.sum()), float(sim.cost)), np.flatnonzero(live)

    return lambda when: cached(np.asarray(when, dtype=np.int64).tobytes())


def climb_materialization(graph: DFGraph, when: np.ndarray, score: Scorer, rng: np.random.Generator,
                          deadline: float | None = None) -> tuple[np.ndarray, Score]:
    """First-improvement hill climbing over the choices, minimising ``score`` (module docstring).

    Values are tried in an order drawn from ``rng``: first those live at a stage
    where memory peaks, then, if none of their moves helps, all of them; the
    climb ends where no single change improves, or at ``deadline`` (a
    ``time.perf_counter()`` value), checked before each value.
    """
    last, _ = _intervals(graph)
    best, live = score(when)
    if not np.isfinite(best[0]):
        return when, best
    wide = False
    while True:
        values = np.arange(graph.loss) if wide else live
        improved = False
        for v in rng.permutation(values):
            if deadline is not None and time.perf_counter() > deadline:
                return when, best  # a pass over every value takes ~20 s on ResNet50: stop mid-pass
            for option in materialization_moves(graph, when, int(v), last):
                trial = when.copy()
                trial[v] = option
                found, found_live = score(trial)
                if found < best:
                    when, best, live, improved = trial, found, found_live, True
                    break
            if improved:
                break
        if improved:
            wide = False
        elif wide:
            break
        else:
            wide = True
    return when, best


def least_peak_materialization(graph: DFGraph, cost_limit: float, start: Schedule, time_limit: float | None = None,
                               patience: int = PATIENCE, kick_size: int = 4, seed: int = 0,
                               good_enough: Callable[[Schedule], bool] | None = None,
                               ) -> tuple[Schedule, Simulation] | None:
    """A schedule of this family of least peak memory within ``cost_limit``, by iterated local search from ``start``.

    ``start`` (e.g. a checkpoint set's schedule) is read as choices by
    :func:`materialization_of`. After each climb the best choices so far are
    kicked (``kick_size`` random values given a random other choice, from a
    generator seeded with ``seed``) and climbed again; the search stops after
    ``patience`` kicks in a row without improvement or after ``time_limit``
    seconds, or as soon as ``good_enough`` holds for the best schedule (asked
    after each climb that improves it). ``None`` when ``start`` read this way is
    not within ``cost_limit``.
    """
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    score = peak_score(graph, cost_limit)
    rng = np.random.default_rng(seed)
    best, best_score = climb_materialization(graph, materialization_of(graph, start.S), score, rng, deadline)
    if not np.isfinite(best_score[0]):
        return None

    def done() -> bool:
        return good_enough is not None and good_enough(_schedule(graph, best))

    last, _ = _intervals(graph)
    movable = np.array([v for v in range(graph.loss) if last[v] > graph.loss], dtype=np.int64)
    idle = 0
    finished = done()
    while not finished and len(movable) and idle < patience and (deadline is None or time.perf_counter() < deadline):
        idle += 1
        kicked = best.copy()
        for v in rng.choice(movable, min(kick_size, len(movable)), replace=False):
            kicked[v] = rng.choice(materialization_moves(graph, kicked, int(v), last))
        found, found_score = climb_materialization(graph, kicked, score, rng, deadline)
        if found_score < best_score:
            best, best_score, idle = found, found_score, 0
            finished = done()
    schedule = _schedule(graph, best)
    return schedule, simulate(graph, schedule, plan=False)


def _schedule(graph: DFGraph, when: np.ndarray) -> Schedule:
    """The choices' schedule: their S and the least R for it (App. B.1)."""
    S = materialization_s(graph, when)
    return Schedule(solve_min_r(graph, S), S)
