"""The Checkmate artifact's baselines, rebuilt from their rules so that ``simulate()`` judges them (§6.1, App. B).

The artifact (``mlsys20_artifact`` branch) turned a checkpoint set into S with rules
that keep far more than needed (PRIOR-ART.md), then min-R, then reported peaks with
a simulator of its own. :func:`artifact_checkpoint_s` states those rules for a graph in
Checkmate's Keras layout (forward ``0..L-1``, loss ``L``, the gradient of ``i`` at
``2L - i``), with segments ``[0, c_1), [c_1, c_2), ..., [c_k, L]`` (each starting at
its checkpoint, the last one running through the loss):

1. a backward value stays resident until its backward reader's stage;
2. every value is resident in the stage of each of its readers;
3. a checkpoint stays resident from its computation to the last stage;
4. in the forward pass a segment's values stay resident until the stage of its end;
5. in the backward stage of each of its nodes, the whole segment is resident;
6. a segment's gradients stay resident until its backward pass is over.

Its reporting simulator then freed, at the start of each stage, every value no node
of the stage reads and the next stage does not keep. That is a schedule transform
(:func:`drop_stage_start_frees`): dropping those entries of S leaves a valid
schedule with the same R, and ``simulate()`` of the result equals the artifact's
reported peak and cost (tests check this on the reference graphs). So these
baselines need no second accounting.

Families (:data:`ARTIFACT_BASELINES`): checkpoint all (every forward node a
checkpoint), sqrt(n) over articulation points or all forward nodes, greedy over the
same with the segment budget ``b`` on the artifact's grid - multiples ``0, s, 2s,
..., 3 - s`` of the sqrt(n) schedule's activation peak (``s = 0.01`` in its budget
sweep, 0.05 in its max-batch search) - and revolve (its precomputed tables are gone;
ours is :mod:`remat.baselines.griewank`'s).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import numpy as np

from remat.baselines.checkpoint_sets import (
    articulation_candidates,
    chain_candidates,
    cheapest_within_budget,
    greedy_checkpoints,
    linearized_candidates,
    sqrtn_checkpoints,
)
from remat.baselines.griewank import revolve_schedule
from remat.baselines.recompute import solve_min_r
from remat.graph import DFGraph, GraphError
from remat.maxbatch.limits import batch_upper_bound, largest_batch_for, qualifies
from remat.result import SolveResult, result_from_schedule
from remat.schedule import Schedule, simulate

SWEEP_GRID_STEP = 0.01  # experiment_budget_sweep.py
MAX_BATCH_GRID_STEP = 0.05  # experiment_max_batchsize_baseline.py


def require_keras_layout(graph: DFGraph) -> None:
    """Refuse graphs whose gradient of forward node ``i`` is not node ``2L - i`` (the artifact's extractor)."""
    graph.require_training_structure("the artifact's baselines")
    L, n = graph.loss, graph.n
    pairs = {(int(s), int(t)) for s, t in graph.edges}
    if n != 2 * L + 1 or any((i, n - 1 - i) not in pairs for i in range(L)):
        raise GraphError(f"the artifact's checkpoint rules need Checkmate's Keras layout (forward 0..L-1, loss L, "
                         f"the gradient of i at 2L - i, reading i); graph {graph.name!r} is not laid out so: "
                         f"use our baselines (accounting=ours)")


def artifact_checkpoint_s(graph: DFGraph, checkpoints: np.ndarray | list[int]) -> np.ndarray:
    """S of the artifact's checkpoint-set rules 1-6 (module docstring) for the forward nodes ``checkpoints``."""
    require_keras_layout(graph)
    n, L = graph.n, graph.loss
    S = np.zeros((n, n), bool)
    src, dst = graph.edges[:, 0], graph.edges[:, 1]
    for a, b in graph.edges[src >= L]:  # rule 1 (edges from a backward value end at a backward node)
        S[a + 1 : b + 1, a] = True
    S[dst, src] = True  # rule 2
    cks = sorted({int(c) for c in checkpoints})
    for c in cks:  # rule 3
        S[c + 1 :, c] = True
    for start, end in zip([0, *cks], [*cks, L + 1]):
        for t in range(start, min(end, n - 1) + 1):  # rule 4
            S[t, start : min(t, end)] = True
        for x in range(start, end):  # rule 5: stage n-1-x computes the gradient of x
            t = n - 1 - x
            S[t, start : min(t, end)] = True
        for t in range(start, min(end, n - 1) + 1):  # rule 6
            grads = n - 1 - np.arange(start, min(end, L))
            S[n - 1 - t, grads[grads < n - 1 - t]] = True
    return np.tril(S, -1)


def drop_stage_start_frees(graph: DFGraph, schedule: Schedule) -> Schedule:
    """Drop ``S[t, i]`` where no node computed in stage ``t`` reads ``i`` and ``S[t+1, i] = 0``.

    The artifact's reporting simulator freed such values at the start of stage ``t``;
    without them the schedule is still valid (no reader in the stage needs them, and the
    next stage does not keep them), and ``simulate()`` then counts what it counted.
    """
    R, S = schedule.R, schedule.S
    reads = np.zeros((graph.n, graph.n), bool)
    reads[graph.edges[:, 1], graph.edges[:, 0]] = True  # reads[j, i]: node j reads value i
    read_in_stage = (R.astype(np.int64) @ reads.astype(np.int64)) > 0
    kept_next = np.zeros_like(S)
    kept_next[:-1] = S[1:]
    return Schedule(R, S & (read_in_stage | kept_next))


def artifact_schedule(graph: DFGraph, checkpoints: np.ndarray | list[int]) -> Schedule:
    """The artifact's baseline schedule for a checkpoint set: rules 1-6, min-R, then its stage-start frees."""
    S = artifact_checkpoint_s(graph, checkpoints)
    return drop_stage_start_frees(graph, Schedule(solve_min_r(graph, S), S))


# ---------------------------------------------------------------------- families
def _sqrtn(candidates: Callable[[DFGraph], np.ndarray]) -> Callable[[DFGraph, float], Iterator[Schedule]]:
    return lambda graph, step: iter([artifact_schedule(graph, sqrtn_checkpoints(candidates(graph)))])


def _greedy(candidates: Callable[[DFGraph], np.ndarray]) -> Callable[[DFGraph, float], Iterator[Schedule]]:
    def family(graph: DFGraph, step: float) -> Iterator[Schedule]:
        # The artifact's b grid is relative to the activation peak of the linearized sqrt(n) schedule.
        reference = simulate(graph, artifact_schedule(graph, sqrtn_checkpoints(linearized_candidates(graph))),
                             plan=False).peak_memory
        pool = candidates(graph)
        sets = dict.fromkeys(tuple(greedy_checkpoints(graph, pool, f * reference))
                             for f in np.arange(0.0, 3.0 - step / 2, step))
        return (artifact_schedule(graph, cks) for cks in sets)
    return family


def _checkpoint_all(graph: DFGraph, step: float) -> Iterator[Schedule]:
    return iter([artifact_schedule(graph, np.arange(graph.loss))])


def _revolve(graph: DFGraph, step: float) -> Iterator[Schedule]:
    chain_candidates(graph)  # revolve is for linear networks
    return (drop_stage_start_frees(graph, revolve_schedule(graph, s)) for s in range(1, graph.n + 1))


FAMILIES: dict[str, Callable[[DFGraph, float], Iterator[Schedule]]] = {
    "checkpoint_all": _checkpoint_all,
    "chen_sqrtn": _sqrtn(chain_candidates),
    "ap_sqrtn": _sqrtn(articulation_candidates),
    "linearized_sqrtn": _sqrtn(linearized_candidates),
    "chen_greedy": _greedy(chain_candidates),
    "ap_greedy": _greedy(articulation_candidates),
    "linearized_greedy": _greedy(linearized_candidates),
    "griewank_logn": _revolve,
}


def _strategy(name: str) -> Callable[..., SolveResult]:
    def solve(graph: DFGraph, budget: float, grid_step: float = SWEEP_GRID_STEP, **_: object) -> SolveResult:
        start = time.perf_counter()
        schedules = FAMILIES[name](graph, grid_step)
        _, schedule = cheapest_within_budget(graph, budget, enumerate(schedules))
        return result_from_schedule(name, graph, schedule, budget, time.perf_counter() - start,
                                    options={"accounting": "paper", "grid_step": grid_step})
    solve.__doc__ = f"The artifact's {name} (module docstring): the cheapest of its schedules within the budget."
    return solve


#: Our baseline names -> the artifact's version of each, as strategies ``fn(graph, budget, **options)``.
ARTIFACT_BASELINES: dict[str, Callable[..., SolveResult]] = {name: _strategy(name) for name in FAMILIES}


def artifact_max_batch(graph: DFGraph, budget: float, strategy: str,
                       grid_step: float = MAX_BATCH_GRID_STEP) -> tuple[int, Schedule | None]:
    """The artifact's max-batch baseline (§6.4): the largest B at which one of the family's schedules fits ``budget``
    within eq. (10)'s cost cap. The family's checkpoint sets do not depend on B (every memory scales with it), so
    each schedule's largest B is found by bisection over ``simulate()``. Returns ``(B, schedule)``, ``(0, None)``
    if none fits at B = 1."""
    if strategy not in FAMILIES:
        raise ValueError(f"the artifact has no baseline {strategy!r}: pick one of {', '.join(FAMILIES)}")
    top = batch_upper_bound(graph, budget)
    best: tuple[int, Schedule | None] = (0, None)
    for schedule in FAMILIES[strategy](graph, grid_step):
        if top >= 1 and qualifies(graph, schedule, budget, 1):
            B = largest_batch_for(graph, schedule, budget, 1, top)
            if B > best[0]:
                best = (B, schedule)
    return best
