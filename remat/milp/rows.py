"""The constraint families of Checkmate's MILP (paper §4, problem 9) as vectorised triplets.

Each ``add_*`` function appends one family to a :class:`~remat.solvers.RowBuilder`
given the column maps ``R``, ``S``, ``U``, ``F`` of :func:`remat.milp.formulation.build_checkmate_milp`
(``-1`` where a variable is structurally absent); memory and cost arrive already scaled.
"""

from __future__ import annotations

import numpy as np

from remat.graph import DFGraph
from remat.solvers import RowBuilder


def add_cost_row(rows: RowBuilder, R: np.ndarray, r_mask: np.ndarray, C: np.ndarray, bound: float) -> None:
    """``sum C R <= bound``: eq. (10)'s cap on the schedule's cost (the maximum-batch search)."""
    cols = R[r_mask]
    coef = np.broadcast_to(C, R.shape)[r_mask]
    ids = rows.add([(np.array([-1]), 0.0)], -np.inf, bound, size=1)
    rows.add_pairs(np.full(cols.size, ids[0]), cols, coef)


def add_free_rows(rows: RowBuilder, graph: DFGraph, R: np.ndarray, S: np.ndarray, F: np.ndarray, form: str,
                  lower: bool = True) -> None:
    """Eqs. (7b)-(7c): Free[t,(i,k)] = 1 exactly when num_hazards(t, i, k) = 0."""
    T, n = R.shape
    src, dst = graph.edges[:, 0], graph.edges[:, 1]
    S_next = np.full_like(S, -1)
    S_next[:-1] = S[1:]
    tt, ee = np.nonzero(F >= 0)
    i, k = src[ee], dst[ee]
    free, r_k, s_next = F[tt, ee], R[tt, k], S_next[tt, i]
    # Later users j > k of i, as (edge e, user j) pairs, expanded over the stages of each Free variable.
    pe, pj = _later_user_pairs(graph)
    order = np.argsort(pe, kind="stable")
    pe, pj = pe[order], pj[order]
    starts = np.searchsorted(pe, ee)
    counts = np.searchsorted(pe, ee, side="right") - starts
    rep = np.repeat(np.arange(ee.size), counts)
    offs = np.arange(rep.size) - np.repeat(np.cumsum(counts) - counts, counts)
    later = R[tt[rep], pj[starts[rep] + offs]]
    present = later >= 0
    rep, later = rep[present], later[present]
    if lower:
        # (7b): 1 - Free <= hazards  <=>  Free - R[t,k] + S[t+1,i] + sum R[t,j] >= 0
        ids = rows.add([(free, 1.0), (r_k, -1.0), (s_next, 1.0)], 0.0, np.inf)
        rows.add_pairs(ids[rep], later, 1.0)
    if form == "paper":
        # (7c): kappa (1 - Free) >= hazards, kappa = the number of hazards that can occur.
        kappa = 1.0 + (s_next >= 0) + np.bincount(rep, minlength=ee.size)
        upper = rows.add([(free, kappa), (r_k, -1.0), (s_next, 1.0)], -np.inf, kappa - 1.0)
        rows.add_pairs(upper[rep], later, 1.0)
    else:
        rows.add([(free, 1.0), (r_k, -1.0)], -np.inf, 0.0)
        has_s = s_next >= 0
        rows.add([(free[has_s], 1.0), (s_next[has_s], 1.0)], -np.inf, 1.0)
        rows.add([(free[rep], 1.0), (later, 1.0)], -np.inf, 1.0)


def add_free_once_rows(rows: RowBuilder, graph: DFGraph, R: np.ndarray, S: np.ndarray, F: np.ndarray) -> None:
    """``sum_k Free[t,(i,k)] <= R[t,i] + S[t,i]``: a value is freed at most once in a stage, and only if present.

    Valid for every schedule: by eq. (5) only the last reader of ``i`` computed in
    stage ``t`` can free it, and a reader needs ``i`` computed or checkpointed
    (eq. 1b). The LP relaxation lacks it: there Free of one value after several
    readers, each within (7c), can sum to more than the value's memory, so eqs.
    (2)-(4) release bytes that were never allocated.
    """
    free_cols, pairs, inverse = freed_value_groups(graph, F)
    t, i = np.divmod(pairs, graph.n)
    ids = rows.add([(R[t, i], -1.0), (S[t, i], -1.0)], -np.inf, 0.0)
    rows.add_pairs(ids[inverse], free_cols, 1.0)


def freed_value_groups(graph: DFGraph, F: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Free columns grouped by the value they free: (columns, ``t * n + i`` of each group, group of each column)."""
    tf, ef = np.nonzero(F >= 0)
    pairs, inverse = np.unique(tf * graph.n + graph.edges[ef, 0], return_inverse=True)
    return F[tf, ef], pairs, inverse


def add_memory_rows(rows: RowBuilder, graph: DFGraph, R: np.ndarray, S: np.ndarray, U: np.ndarray,
                    F: np.ndarray, M: np.ndarray, constant: float) -> np.ndarray:
    """Eqs. (2)-(4): U[t,0] = const + sum M S[t] + M_0 R[t,0]; U[t,k] = U[t,k-1] - freed + M_k R[t,k].

    Returns the row of each U[t, k] as a (T, n) matrix, -1 where absent (the
    maximum-batch model rescales these rows).
    """
    T, n = R.shape
    src, dst = graph.edges[:, 0], graph.edges[:, 1]
    row_of = np.full((T, n), -1, dtype=np.int64)
    t0 = np.flatnonzero(U[:, 0] >= 0)
    row_of[t0, 0] = rows.add([(U[t0, 0], 1.0), (R[t0, 0], -M[0])], constant, constant)
    ts, ii = np.nonzero(S[t0] >= 0)
    rows.add_pairs(row_of[t0[ts], 0], S[t0[ts], ii], -M[ii])
    tt, kk = np.nonzero(U[:, 1:] >= 0)
    kk = kk + 1
    row_of[tt, kk] = rows.add([(U[tt, kk], 1.0), (U[tt, kk - 1], -1.0), (R[tt, kk], -M[kk])], 0.0, 0.0)
    tf, ef = np.nonzero(F >= 0)
    rows.add_pairs(row_of[tf, dst[ef] + 1], F[tf, ef], M[src[ef]])
    return row_of


def add_step_memory_rows(rows: RowBuilder, graph: DFGraph, R: np.ndarray, S: np.ndarray, F: np.ndarray,
                         M: np.ndarray, room: float, steps: np.ndarray) -> np.ndarray:
    """Eqs. (2)-(4) summed up to step ``k`` of stage ``t``, one row per ``(t, k)`` in ``steps``:

    ``sum M S[t] + sum_{j<=k} M_j R[t,j] - sum_{edges (i,j), j<k} M_i Free[t,(i,j)] <= budget - const``.
    """
    T, n = R.shape
    src, dst = graph.edges[:, 0], graph.edges[:, 1]
    t, k = steps[:, 0], steps[:, 1]
    ids = rows.add([(np.full(len(steps), -1), 0.0)], -np.inf, room, size=len(steps))
    pr, ii = np.nonzero(S[t] >= 0)
    rows.add_pairs(ids[pr], S[t[pr], ii], M[ii])
    pr, jj = np.nonzero((R[t] >= 0) & (np.arange(n)[None, :] <= k[:, None]))
    rows.add_pairs(ids[pr], R[t[pr], jj], M[jj])
    pr, ee = np.nonzero((F[t] >= 0) & (dst[None, :] < k[:, None]))
    rows.add_pairs(ids[pr], F[t[pr], ee], -M[src[ee]])
    row_of = np.full((T, n), -1, dtype=np.int64)
    row_of[t, k] = ids
    return row_of


def _later_user_pairs(graph: DFGraph) -> tuple[np.ndarray, np.ndarray]:
    """All (edge e = (i, k), user j of i with j > k) pairs."""
    src, dst = graph.edges[:, 0], graph.edges[:, 1]
    # Edges are sorted by (src, dst), so the later users of edge e are the following edges with the same src.
    last = np.searchsorted(src, src, side="right")
    count = last - np.arange(graph.m) - 1
    pe = np.repeat(np.arange(graph.m), count)
    offs = np.arange(pe.size) - np.repeat(np.cumsum(count) - count, count)
    pj = dst[pe + 1 + offs]
    return pe, pj
