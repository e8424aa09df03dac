"""Checkmate's optimal rematerialization MILP (paper §4, problem 9), in matrix form.

Variables per stage ``t`` (``T = n`` stages):

* ``R[t, i]``, ``S[t, i]`` binary (eq. 1f); with frontier-advancing stages
  (eqs. 8a-8c) only ``i <= t`` (R) and ``i < t`` (S) exist and ``R[t, t] = 1``;
* ``U[t, k]`` continuous memory after computing ``k`` in stage ``t`` (eqs. 2-3),
  bounded by the budget;
* ``Free[t, (i, k)]`` binary per edge (eqs. 5, 7a-7c), with §4.8's ``Free[t,k,k]``
  eliminated and - structurally - only where it can change a later ``U``.

Variables that are structurally zero are never created; every constraint family
is built as vectorised (row, column, value) triplets (:class:`RowBuilder`). The
unpartitioned variant (eqs. 1a-1f with memory, App. A) shares the builder.
Memory is divided by the largest node memory and cost by the largest node cost so
the solver sees numbers near 1.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from remat.graph import DFGraph
from remat.milp.rows import (
    add_cost_row,
    add_free_once_rows,
    add_free_rows,
    add_memory_rows,
    add_step_memory_rows,
    freed_value_groups,
)
from remat.schedule import Schedule, free_matrix, memory_matrix
from remat.solvers import MilpProblem, RowBuilder


@dataclass(eq=False)
class CheckmateMilp:
    """Problem (9) for one graph and budget, with the maps from (t, i) to columns (-1 = absent)."""

    graph: DFGraph
    budget: float
    partitioned: bool
    problem: MilpProblem
    R: np.ndarray
    S: np.ndarray
    U: np.ndarray
    F: np.ndarray
    memory_scale: float
    cost_scale: float
    memory_rows: np.ndarray  # (T, n): the row of U[t, k]'s recurrence, -1 where U[t, k] does not exist
    build_time: float = 0.0

    def schedule(self, x: np.ndarray) -> Schedule:
        """Round a (near-)integral solution vector to a Schedule."""
        return Schedule(_gather(x, self.R) > 0.5, _gather(x, self.S) > 0.5)

    def fractional(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The (possibly fractional) R and S of a solution vector, 0 where structurally absent."""
        return _gather(x, self.R), _gather(x, self.S)

    def memory(self, x: np.ndarray) -> np.ndarray:
        """The solver's U in bytes (NaN where no U variable exists)."""
        U = np.full(self.U.shape, np.nan)
        mask = self.U >= 0
        U[mask] = x[self.U[mask]] * self.memory_scale
        return U

    def cost(self, objective: float) -> float:
        return objective * self.cost_scale

    def vector(self, schedule: Schedule) -> np.ndarray:
        """The solution vector of a valid schedule (a warm start), with Free and U per eqs. (2)-(5)."""
        x = np.zeros(self.problem.num_vars)
        for idx, mat in ((self.R, schedule.R), (self.S, schedule.S)):
            mask = idx >= 0
            x[idx[mask]] = mat[mask]
        free = free_matrix(self.graph, schedule)
        mask = self.F >= 0
        x[self.F[mask]] = free[mask]
        mask = self.U >= 0
        x[self.U[mask]] = memory_matrix(self.graph, schedule, free)[mask] / self.memory_scale
        return x

    def restrict(self, centre: Schedule, free_R: np.ndarray, free_S: np.ndarray) -> None:
        """Fix every R and S column to ``centre``'s value except where ``free_R`` / ``free_S`` (local search)."""
        for idx, values, free in ((self.R, centre.R, free_R), (self.S, centre.S, free_S)):
            fixed = (idx >= 0) & ~free
            self.problem.lb[idx[fixed]] = self.problem.ub[idx[fixed]] = values[fixed]

    def fits(self, schedule: Schedule) -> bool:
        """Whether a schedule lies in this MILP's variable space (e.g. frontier-advancing when partitioned)."""
        return not (schedule.R[self.R < 0].any() or schedule.S[self.S < 0].any())


def build_checkmate_milp(
    graph: DFGraph,
    budget: float,
    partitioned: bool = True,
    free_formulation: str = "paper",
    cost_bound: float | None = None,
    frontier_relaxation: bool = False,
    extra_steps: np.ndarray | None = None,
    free_once: bool = False,
    columns: tuple[np.ndarray, np.ndarray] | None = None,
) -> CheckmateMilp:
    """Build problem (9) (or, with ``partitioned=False``, eqs. 1a-1f with memory).

    ``free_formulation="paper"`` encodes Free by eqs. (7b)-(7c) with the big-M
    ``kappa`` of Lemma 4.2 counting only hazards that can occur;
    ``"tight"`` replaces (7c) with one inequality per hazard
    (``Free <= R[t,k]``, ``Free + S[t+1,i] <= 1``, ``Free + R[t,j] <= 1``),
    the standard exact linearisation of the product in eq. (5), whose LP
    relaxation is at least as strong. ``cost_bound`` adds ``sum C R <= cost_bound``
    (eq. 10's form, used by the maximum-batch search).

    ``frontier_relaxation=True`` builds a *relaxation* for lower bounds: the
    budget is enforced only at each stage's frontier step ``U[t, t]`` (eqs. 2-4
    summed over the stage, so no U variables), and Free keeps only its upper
    bounds (7c) - Free enters memory with a minus sign, so its lower bound (7b)
    never binds at an optimum of the relaxation. Its LP optimum is a valid lower
    bound on (9); its schedules must be checked by ``simulate()``. ``extra_steps``
    (pairs ``(t, k)``, ``k < t``) enforce the budget at those steps too, as the
    sum of eqs. (2)-(4) up to ``k``: still a relaxation, tightened where a
    relaxed schedule broke the budget (:mod:`remat.milp.frontier`).

    ``free_once`` adds the valid inequality ``sum_k Free[t,(i,k)] <= R[t,i] +
    S[t,i]`` (:func:`add_free_once_rows`).

    ``columns=(R_cols, S_cols)`` (boolean ``T x n``) builds only those R and S
    columns; the others are zero. A stage with no R column is left out entirely,
    with its memory and its rows (1c) into the next stage, so a run of stages
    ``a..b`` with ``S[a]`` and ``S[b+1]`` fixed by the caller is an exact model of
    that window (:mod:`remat.milp.windows`); its size follows the window, not the graph.
    """
    start = time.perf_counter()
    if frontier_relaxation and not partitioned:
        raise ValueError("the frontier relaxation is defined for frontier-advancing (partitioned) stages only")
    if extra_steps is not None and not frontier_relaxation:
        raise ValueError("extra_steps only applies to the frontier relaxation; (9) bounds every step already")
    if free_formulation not in ("paper", "tight"):
        raise ValueError(f"free_formulation must be 'paper' or 'tight', got {free_formulation!r}")
    n, T = graph.n, graph.n
    src, dst = graph.edges[:, 0], graph.edges[:, 1]
    t_col = np.arange(T)[:, None]
    i_row = np.arange(n)[None, :]
    structural = (i_row <= t_col) if partitioned else np.ones((T, n), bool)
    r_mask = structural if columns is None else structural & columns[0]
    s_mask = (i_row < t_col) if partitioned else (t_col >= 1) & np.ones((1, n), bool)
    if columns is not None:
        s_mask = s_mask & columns[1]
    in_model = r_mask.any(1)  # the stages this model holds (all of them unless columns leave some out)
    u_mask = structural & in_model[:, None] & (not frontier_relaxation)
    # Free[t, (i, k)] matters only through U[t, k+1]: it needs R[t, k] and U[t, k+1] to exist.
    u_next = np.zeros((T, n), bool)
    u_next[:, :-1] = structural[:, 1:] & in_model[:, None]
    f_mask = r_mask[:, dst] & u_next[:, dst]

    counter = 0

    def allocate(mask: np.ndarray) -> np.ndarray:
        nonlocal counter
        idx = np.full(mask.shape, -1, dtype=np.int64)
        size = int(mask.sum())
        idx[mask] = np.arange(counter, counter + size)
        counter += size
        return idx

    R, S, U, F = allocate(r_mask), allocate(s_mask), allocate(u_mask), allocate(f_mask)
    N = counter
    memory_scale = float(max(graph.memory.max(), 1))
    cost_scale = float(graph.cost.max()) if graph.cost.max() > 0 else 1.0
    M = graph.memory / memory_scale
    C = graph.cost / cost_scale

    c = np.zeros(N)
    c[R[r_mask]] = np.broadcast_to(C, (T, n))[r_mask]
    lb, ub = np.zeros(N), np.ones(N)
    integrality = np.ones(N, bool)
    integrality[U[u_mask]] = False
    # U can never exceed everything resident twice over; a tighter bound keeps presolve well scaled.
    ub[U[u_mask]] = min(budget, graph.constant_memory + 2 * float(graph.memory.sum())) / memory_scale
    if partitioned:
        diagonal = R[np.arange(n), np.arange(n)]
        lb[diagonal[diagonal >= 0]] = 1.0  # eq. (8a)

    rows = RowBuilder(N)
    # (1b): R[t, j] <= R[t, i] + S[t, i] for every edge (i, j).
    tt, ee = np.nonzero(R[:, dst] >= 0)
    rows.add([(R[tt, dst[ee]], 1.0), (R[tt, src[ee]], -1.0), (S[tt, src[ee]], -1.0)], -np.inf, 0.0)
    # (1c): S[t, i] <= R[t-1, i] + S[t-1, i], for each stage t-1 in the model.
    tt, ii = np.nonzero((S[1:] >= 0) & in_model[:-1, None])
    rows.add([(S[tt + 1, ii], 1.0), (R[tt, ii], -1.0), (S[tt, ii], -1.0)], -np.inf, 0.0)
    if not partitioned:
        # (1e) generalised: every sink is computed at some stage, so every node is.
        sinks = np.setdiff1d(np.arange(n), src)
        ids = rows.add([(R[0, sinks], 1.0)], 1.0, np.inf)
        for t in range(1, T):
            rows.add_pairs(ids, R[t, sinks], 1.0)
    add_free_rows(rows, graph, R, S, F, free_formulation, lower=not frontier_relaxation)
    if free_once:
        add_free_once_rows(rows, graph, R, S, F)
    if frontier_relaxation:
        room = (budget - graph.constant_memory) / memory_scale
        stages = np.flatnonzero(in_model)
        steps = np.stack([stages, stages], axis=1)
        if extra_steps is not None:
            steps = np.unique(np.concatenate([steps, np.asarray(extra_steps, np.int64).reshape(-1, 2)]), axis=0)
        memory_rows = add_step_memory_rows(rows, graph, R, S, F, M, room, steps)
    else:
        memory_rows = add_memory_rows(rows, graph, R, S, U, F, M, graph.constant_memory / memory_scale)
    if cost_bound is not None:
        add_cost_row(rows, R, r_mask, C, cost_bound / cost_scale)
    A, row_lb, row_ub = rows.matrix()
    problem = MilpProblem(c, A, row_lb, row_ub, lb, ub, integrality)
    return CheckmateMilp(graph, budget, partitioned, problem, R, S, U, F, memory_scale, cost_scale, memory_rows,
                         time.perf_counter() - start)


def frontier_model_columns(graph: DFGraph) -> int:
    """How many columns the whole frontier relaxation of (9) has: R and S below the diagonal, and Free."""
    n = graph.n
    return n * n + int((n - 1 - graph.edges[:, 1]).clip(min=0).sum())


def free_once_violation(milp: CheckmateMilp, x: np.ndarray) -> float:
    """The largest ``sum_k Free[t,(i,k)] - R[t,i] - S[t,i]`` of a (fractional) solution: > 0 where it breaks the
    inequality of :func:`~remat.milp.rows.add_free_once_rows` (a value freed more than once in a stage)."""
    free_cols, pairs, inverse = freed_value_groups(milp.graph, milp.F)
    if free_cols.size == 0:
        return 0.0
    freed = np.bincount(inverse, weights=x[free_cols], minlength=pairs.size)
    R, S = milp.fractional(x)
    return float((freed - R.ravel()[pairs] - S.ravel()[pairs]).max())


def _gather(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    out = np.zeros(idx.shape)
    mask = idx >= 0
    out[mask] = x[idx[mask]]
    return out
