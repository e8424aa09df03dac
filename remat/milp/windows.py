"""Better schedules for large graphs: problem (9) solved exactly over a window of stages, the rest held fixed.

Problem (9)'s stages are linked only through the checkpoint matrix: stage ``t``
reads ``S[t]`` and writes ``S[t+1]`` (eq. 1c); its memory (eqs. 2-5) and its
computations involve nothing else. So with ``S[a]`` and ``S[b+1]`` fixed to a
valid schedule's values, stages ``a..b`` form a problem of their own, and any
of its solutions, spliced into that schedule, is a valid whole schedule whose
cost changes by the window's change. The window's model is built with only its
own columns (:func:`~remat.milp.formulation.build_checkmate_milp` with
``columns``), restricted further to the values in play there - what the centre
computes or keeps in the window, and their inputs two levels up - so its size
follows the window and not the graph: a few thousand columns where the whole
model of a 2,500-node graph has millions.

:func:`improve_by_windows` sweeps windows over the stages, most expensive first,
solving each with the lazy frontier solver (:mod:`remat.milp.frontier`, every
answer checked by ``simulate()`` on the whole graph) from the current best
schedule, and keeps every improvement (large neighbourhood search). Nothing here
is a lower bound; the certificate comes from the bounds of the ilp pipeline.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from remat.graph import DFGraph
from remat.milp.frontier import solve_frontier_lazily
from remat.schedule import Schedule
from remat.solvers import SolverOptions

WINDOW_STAGES = 12  # stages per window (GPT-2 at 0.5 of its peak: 12 reach the optimum in 30 s, 24 stall)
WINDOW_SECONDS = 20.0  # one window's solve at most this long


def values_in_play(graph: DFGraph, centre: Schedule, a: int, b: int, depth: int = 2) -> np.ndarray:
    """The values a window ``a..b`` may compute or keep: the centre's there, and their inputs ``depth`` levels up."""
    active = centre.R[a: b + 1].any(0) | centre.S[a: b + 2].any(0)
    src, dst = graph.edges[:, 0], graph.edges[:, 1]
    for _ in range(depth):
        grown = active.copy()
        grown[src[active[dst]]] = True
        active = grown
    return active


def window_columns(graph: DFGraph, centre: Schedule, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """The R and S columns of window ``a..b``: its stages, the values in play, and ``S[a]``, ``S[b+1]``."""
    n = graph.n
    active = values_in_play(graph, centre, a, b)
    R = np.zeros((n, n), bool)
    S = np.zeros((n, n), bool)
    R[a: b + 1] = active[None, :]
    S[a: b + 2] = active[None, :]
    S[a] &= centre.S[a]
    if b + 1 < n:
        S[b + 1] &= centre.S[b + 1]
    return R, S


def splice(centre: Schedule, window: Schedule, a: int, b: int) -> Schedule:
    """``centre`` with stages ``a..b`` (and the checkpoints into them) taken from ``window``."""
    R, S = centre.R.copy(), centre.S.copy()
    R[a: b + 1] = window.R[a: b + 1]
    S[a + 1: b + 1] = window.S[a + 1: b + 1]
    return Schedule(R, S)


def solve_window(graph: DFGraph, budget: float, centre: Schedule, a: int, b: int, options: SolverOptions,
                 backend: str = "highs") -> tuple[Schedule, float] | None:
    """The best schedule that equals ``centre`` outside stages ``a..b`` (module docstring), or None if none is better.

    ``centre`` must keep to the budget; the answer's cost is ``simulate()``'s.
    """
    R_cols, S_cols = window_columns(graph, centre, a, b)
    free_R = np.zeros_like(R_cols)
    free_S = np.zeros_like(S_cols)
    free_R[a: b + 1] = True
    free_S[a + 1: b + 1] = True

    def complete(schedule: Schedule) -> Schedule:
        return splice(centre, schedule, a, b)

    found = solve_frontier_lazily(graph, budget, options, backend, warm_start=centre,
                                  neighbourhood=(centre, free_R, free_S), columns=(R_cols, S_cols),
                                  complete=complete)
    return (found.schedule, found.cost) if found.schedule is not None else None


def window_order(graph: DFGraph, centre: Schedule, length: int) -> list[tuple[int, int]]:
    """Windows of ``length`` stages, overlapping by half, the ones with the most recomputation cost first."""
    n = graph.n
    step = max(length // 2, 1)
    starts = list(range(0, max(n - length, 0) + 1, step))
    if starts[-1] + length < n:
        starts.append(n - length)
    extra = (centre.R.astype(float) * graph.cost[None, :]).sum(1) - graph.cost
    windows = [(s, min(s + length, n) - 1) for s in starts]
    return sorted(windows, key=lambda w: -extra[w[0]: w[1] + 1].sum())


def improve_by_windows(graph: DFGraph, budget: float, centre: Schedule, centre_cost: float,
                       options: SolverOptions, on_schedule: Callable[[Schedule, float], None] | None = None,
                       length: int = WINDOW_STAGES, window_seconds: float = WINDOW_SECONDS,
                       backend: str = "highs") -> tuple[Schedule, float]:
    """Large neighbourhood search over stage windows from ``centre`` (module docstring); the best schedule found.

    Windows without recomputation are skipped; sweeps repeat while one improves.
    ``options.time_limit`` covers the whole search and ``options.stop`` ends it;
    ``on_schedule(schedule, cost)`` hears each improvement.
    """
    start = time.perf_counter()
    best, best_cost = centre, centre_cost
    improved = True
    while improved:
        improved = False
        for a, b in window_order(graph, best, length):
            left = None if options.time_limit is None else options.time_limit - (time.perf_counter() - start)
            if (left is not None and left <= 0) or (options.stop is not None and options.stop.is_set()):
                return best, best_cost
            if not (best.R[a: b + 1].sum(1) > 1).any():
                continue  # nothing recomputed in the window: it is already as cheap as it gets
            limit = window_seconds if left is None else min(window_seconds, left)
            found = solve_window(graph, budget, best, a, b,
                                 SolverOptions(limit, 1e-4, options.threads, options.verbose, stop=options.stop,
                                               extra=dict(options.extra)), backend)
            if found is not None and found[1] < best_cost - 1e-9 * max(best_cost, 1.0):
                best, best_cost = found
                improved = True
                if on_schedule is not None:
                    on_schedule(best, best_cost)
    return best, best_cost
