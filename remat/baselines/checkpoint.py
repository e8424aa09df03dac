"""The two trivial schedules: store every activation, or store (almost) nothing."""

from __future__ import annotations

import time

import numpy as np

from remat.baselines.recompute import solve_min_r
from remat.graph import DFGraph
from remat.result import SolveResult, Status, result_from_schedule
from remat.schedule import Schedule


def checkpoint_all_schedule(graph: DFGraph) -> Schedule:
    """Compute every node once, in id order, keeping each output until its last reader has run.

    This is the no-recomputation schedule the budgets of the literature are
    fractions of: ``R = I`` and ``S[t, i] = 1`` while a reader ``j >= t`` of ``i``
    is still to come.
    """
    n = graph.n
    last_use = np.full(n, -1)
    np.maximum.at(last_use, graph.edges[:, 0], graph.edges[:, 1])
    t = np.arange(n)[:, None]
    i = np.arange(n)[None, :]
    S = (i < t) & (last_use[None, :] >= t)
    return Schedule(np.eye(n, dtype=bool), S)


def solve_checkpoint_all(graph: DFGraph, budget: float, **_: object) -> SolveResult:
    """Checkpoint all (§6.1): every node computed once; the minimum possible cost."""
    start = time.perf_counter()
    schedule = checkpoint_all_schedule(graph)
    return result_from_schedule(
        "checkpoint_all", graph, schedule, budget, time.perf_counter() - start, status=Status.OPTIMAL
    )


def solve_checkpoint_last(graph: DFGraph, budget: float, **_: object) -> SolveResult:
    """Store nothing but the previous stage's output; recompute everything else when needed.

    ``S[t, t-1] = 1`` and the minimum R for that S (Checkmate's "checkpoint last
    node"): the cheapest-memory end of the trade-off for chains, at quadratic cost.
    """
    start = time.perf_counter()
    n = graph.n
    S = np.zeros((n, n), bool)
    S[np.arange(1, n), np.arange(n - 1)] = True
    schedule = Schedule(solve_min_r(graph, S), S)
    return result_from_schedule("checkpoint_last", graph, schedule, budget, time.perf_counter() - start)
