"""The minimum recomputation R for a given checkpoint matrix S (App. B.1, §5.2, Alg. 2).

Every heuristic fixes S and every rounding scheme rounds S; this one routine then
fills R where it is needed and nowhere else.
"""

from __future__ import annotations

import numpy as np

from remat.graph import DFGraph


def solve_min_r(graph: DFGraph, S: np.ndarray) -> np.ndarray:
    """The cheapest R that makes ``(R, S)`` valid, for a frontier-advancing S.

    Starts from ``R = I`` (eq. 8a), computes ``v`` in stage ``t`` wherever
    ``S[t+1, v]`` needs it and ``v`` is not already resident (constraint 1c), then
    scans each stage in reverse topological order and computes every input that a
    computed node needs but is neither computed nor checkpointed (constraint 1b).
    Each entry is set only when a constraint forces it, so R is optimal given S
    (§5.2). ``S`` is first made consistent: ``S[t, v]`` for ``v >= t`` is dropped.
    """
    S = np.tril(np.asarray(S, bool), -1)
    T, n = S.shape
    if T != graph.n or n != graph.n:
        raise ValueError(f"S must be {graph.n} x {graph.n} for graph {graph.name!r}, got {S.shape}")
    R = np.eye(n, dtype=bool)
    R[:-1] |= S[1:] & ~S[:-1]
    deps = graph.deps
    for t in range(T):
        row, resident = R[t], S[t]
        for v in range(t, -1, -1):
            if row[v]:
                parents = deps[v]
                row[parents[~resident[parents]]] = True
    return R


def checkpoints_to_s(graph: DFGraph, keep: np.ndarray) -> np.ndarray:
    """S for a frontier-advancing schedule that keeps exactly the values in ``keep[t, i]``.

    ``keep`` may be any boolean ``n x n`` matrix; entries on or above the diagonal
    are dropped (a value cannot be resident before it is first computed).
    """
    return np.tril(np.asarray(keep, bool), -1)
