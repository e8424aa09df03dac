"""The minimum recomputation R for a given checkpoint matrix S (App. B.1, §5.2, Alg. 2).

Every heuristic fixes S and every rounding scheme rounds S; this one routine then
fills R where it is needed and nowhere else.
"""

from __future__ import annotations

import heapq

import numpy as np

from remat.graph import DFGraph


def solve_min_r(graph: DFGraph, S: np.ndarray) -> np.ndarray:
    """The cheapest R that makes ``(R, S)`` a valid frontier-advancing schedule.

    Appendix B.1 / §5.2: start from ``R = I`` (eq. 8a); compute ``v`` in stage ``t``
    wherever ``S[t+1, v]`` needs it and ``v`` is not already resident (constraint
    1c); then scan each stage in reverse topological order and compute every input
    that a computed node needs but is neither computed nor checkpointed (1b).

    Every entry set is forced by a constraint, so the result is the least R (as a
    set) that is valid for ``S`` under (8a)-(8c): any other valid lower-triangular
    R with ``R >= I`` contains it, hence costs at least as much. ``S`` is first made
    consistent with (8b): entries ``S[t, v]`` with ``v >= t`` are dropped.
    """
    S = np.tril(np.asarray(S, bool), -1)
    T, n = S.shape
    if T != graph.n or n != graph.n:
        raise ValueError(f"S must be {graph.n} x {graph.n} for graph {graph.name!r}, got {S.shape}")
    R = np.eye(n, dtype=bool)
    R[:-1] |= S[1:] & ~S[:-1]
    deps = [d.tolist() for d in graph.deps]
    for t in range(T):
        row = R[t]
        resident = S[t]
        # Parents precede children in id order, so popping the largest id first
        # visits each node after every node that could require it.
        heap = [-int(v) for v in np.flatnonzero(row)]
        heapq.heapify(heap)
        while heap:
            v = -heapq.heappop(heap)
            for p in deps[v]:
                if not row[p] and not resident[p]:
                    row[p] = True
                    heapq.heappush(heap, -p)
    return R


def checkpoints_to_s(graph: DFGraph, keep: np.ndarray) -> np.ndarray:
    """S for a frontier-advancing schedule that keeps exactly the values in ``keep[t, i]``.

    ``keep`` may be any boolean ``n x n`` matrix; entries on or above the diagonal
    are dropped (a value cannot be resident before it is first computed).
    """
    return np.tril(np.asarray(keep, bool), -1)
