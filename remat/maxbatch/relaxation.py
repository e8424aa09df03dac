"""Lower bounds on the least peak memory of any schedule within a cost limit (for eq. 10's maximum batch).

The memory bound of eqs. (1b), (3) looks at one node at a time; the LP of problem
(9) with eq. (10)'s cost cap is no tighter on ResNet50. Both miss that the cap is
shared: recomputation that lowers memory at one stage is paid from the same
single extra forward pass as every other stage's. This *resident-set relaxation*
keeps that coupling and drops only the memory at steps inside a stage.

It looks at a chosen increasing list of stages ``tau_0 < tau_1 < ...`` (all of
them, or a window). For a frontier-advancing schedule (eqs. 8a-8c: stage ``t``
ends by computing node ``t`` for the first time) let ``L[k, v]`` say that ``v``
is resident when node ``tau_k`` is computed, i.e. ``v`` is in
``S[tau_k + 1] | Deps[tau_k] | {tau_k}``, and ``Rc[k, v]`` (``v <= tau_{k-1}``)
that ``v`` is computed again in some stage of the period ``(tau_{k-1}, tau_k]``.
Every valid schedule then satisfies

* ``L[k, v] = 1`` for ``v`` in ``Deps[tau_k]`` and ``v = tau_k`` (eqs. 1b, 8a);
* ``L[k, v] <= L[k-1, v] + Rc[k, v]``: resident at ``tau_k`` means carried all
  the way from ``tau_{k-1}`` (``S[tau_{k-1} + 1]`` is part of ``L[k-1]``) or
  computed during the period (eq. 1c, applied stage by stage);
* ``Rc[k, u] <= L[k-1, w] + Rc[k, w]`` for each input ``w`` of ``u``: an input of
  a recomputation was carried into the period or computed in it (eq. 1b);
* ``L[k-1, w] + Rc[k, w] >= 1`` for each input ``w <= tau_{k-1}`` of a node
  first computed strictly inside the period (eqs. 1b, 8a);
* ``sum_k sum_v C_v Rc[k, v] <= cost_limit - sum_v C_v`` (eq. 10 less the first
  computation of every node; periods are disjoint, so each ``Rc`` is at least
  one computation of its own);
* ``sum_v M_v L[k, v] <= P`` for every ``k``: what is resident when node
  ``tau_k`` is computed is part of ``U[tau_k, tau_k]`` (eqs. 2-3).

:func:`relaxation_point` is that map, and the tests apply it to schedules of
every strategy. So the least ``P`` of this MILP - or of any window of it, which
drops constraints - and every dual bound on it (its LP optimum included) is at
most the least peak, and a window whose MILP has no point with ``P`` within a
budget proves that no schedule within the cost limit fits the budget.

On ResNet50 at eq. (10)'s cap the LP over all stages gives 15.69 MB per sample
against the memory bound's 14.45 MB (16 GB batch: at most 1019, not 1107, in
127 s). The MILP over the loss and the last 48 backward stages has no point at
997 samples per 16 GB and proves it in about 2 s, where the MILP over every
backward stage decides nothing in 500 s even at 831: a window keeps
integrality, which the LP trades away by time-sharing peaks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from remat.graph import DFGraph
from remat.schedule import Schedule
from remat.solvers import MilpProblem, RowBuilder, SolverOptions, solve_milp

# The LP's optimum is trusted to this relative tolerance (HiGHS's default feasibility and optimality tolerances).
LP_TOLERANCE = 1e-6
# Windows of the last 48 backward stages decide ResNet50's 16 GB batches in ~2 s each; 64 or more time out at 60 s.
WINDOW_STAGES = 48
WINDOW_SECONDS = 10.0  # per window MILP; an undecided window proves nothing and the next one is tried


@dataclass(eq=False)
class ResidentSetRelaxation:
    """The relaxation over ``stages`` and its column maps (``-1``: absent); the last column is ``P``."""

    graph: DFGraph
    stages: np.ndarray  # tau_0 < tau_1 < ...
    problem: MilpProblem
    L: np.ndarray  # (K, n): resident when node tau_k is computed, v <= tau_k
    Rc: np.ndarray  # (K, n): computed again in (tau_{k-1}, tau_k], v <= tau_{k-1}
    memory_scale: float

    def peak(self, objective: float) -> float:
        """An objective (``P``) in bytes, with the graph's constant overhead added back."""
        return objective * self.memory_scale + self.graph.constant_memory

    def with_budget(self, budget: float) -> MilpProblem:
        """The feasibility MILP: some point has a peak within ``budget`` bytes (objective dropped)."""
        p = self.problem
        ub = p.ub.copy()
        ub[-1] = (budget - self.graph.constant_memory) / self.memory_scale
        return MilpProblem(np.zeros_like(p.c), p.A, p.row_lb, p.row_ub, p.lb, ub, p.integrality)


def build_resident_set_relaxation(graph: DFGraph, cost_limit: float,
                                  stages: np.ndarray | list[int] | None = None) -> ResidentSetRelaxation:
    """The relaxation of the module docstring over ``stages`` (default: every stage), in matrix form.

    Minimising its last column ``P`` bounds the least peak of any schedule costing at most ``cost_limit``.
    """
    n = graph.n
    tau = np.arange(n) if stages is None else np.unique(np.asarray(stages, dtype=np.int64))
    if tau.size == 0 or tau[0] < 0 or tau[-1] >= n:
        raise ValueError(f"stages must be a non-empty list of stages in 0..{n - 1}, got {stages!r}")
    K = tau.size
    src, dst = graph.edges[:, 0], graph.edges[:, 1]
    v_row = np.arange(n)[None, :]
    prev = np.concatenate([[-1], tau[:-1]])  # tau_{k-1}; -1: no earlier period is modelled
    l_mask = v_row <= tau[:, None]
    r_mask = v_row <= prev[:, None]
    L = np.full((K, n), -1, dtype=np.int64)
    Rc = np.full((K, n), -1, dtype=np.int64)
    L[l_mask] = np.arange(int(l_mask.sum()))
    Rc[r_mask] = np.arange(int(r_mask.sum())) + int(l_mask.sum())
    P = int(l_mask.sum() + r_mask.sum())
    N = P + 1
    memory_scale = float(max(graph.memory.max(), 1))
    cost_scale = float(graph.cost.max()) if graph.cost.max() > 0 else 1.0
    M, C = graph.memory / memory_scale, graph.cost / cost_scale

    c = np.zeros(N)
    c[P] = 1.0
    lb, ub = np.zeros(N), np.ones(N)
    ub[P] = np.inf
    lb[L[np.arange(K), tau]] = 1.0
    at, reads = _period_of(tau, dst)
    lb[L[at[reads], src[reads]]] = 1.0
    integrality = np.ones(N, bool)
    integrality[P] = False

    rows = RowBuilder(N)
    kk, vv = np.nonzero(r_mask)
    rows.add([(L[kk, vv], 1.0), (L[kk - 1, vv], -1.0), (Rc[kk, vv], -1.0)], -np.inf, 0.0)
    ke, ee = np.nonzero(dst[None, :] <= prev[:, None])
    w, u = src[ee], dst[ee]
    rows.add([(Rc[ke, u], 1.0), (L[ke - 1, w], -1.0), (Rc[ke, w], -1.0)], -np.inf, 0.0)
    inside = (at >= 1) & (at < K) & ~reads  # edges read by a node first computed strictly inside a period
    inside &= src <= prev[np.minimum(at, K - 1)]
    need = np.unique(np.stack([at[inside], src[inside]], axis=1), axis=0).reshape(-1, 2)
    rows.add([(L[need[:, 0] - 1, need[:, 1]], 1.0), (Rc[need[:, 0], need[:, 1]], 1.0)], 1.0, np.inf)
    ids = rows.add([(np.full(K, P), -1.0)], -np.inf, 0.0)
    kl, vl = np.nonzero(l_mask)
    rows.add_pairs(ids[kl], L[kl, vl], M[vl])
    spare = (cost_limit - float(graph.cost.sum())) / cost_scale
    cost_row = rows.add([(np.array([P]), 0.0)], -np.inf, spare, size=1)
    rows.add_pairs(np.full(kk.size, cost_row[0]), Rc[kk, vv], C[vv])
    A, row_lb, row_ub = rows.matrix()
    problem = MilpProblem(c, A, row_lb, row_ub, lb, ub, integrality)
    return ResidentSetRelaxation(graph, tau, problem, L, Rc, memory_scale)


def _period_of(tau: np.ndarray, node: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each node, the first k with ``tau_k >= node`` (``K`` if none), and whether ``tau_k == node``."""
    at = np.searchsorted(tau, node)
    return at, (at < tau.size) & (tau[np.minimum(at, tau.size - 1)] == node)


def relaxation_point(relaxation: ResidentSetRelaxation, schedule: Schedule) -> np.ndarray:
    """The relaxation's vector for a frontier-advancing ``schedule`` (the map of the module docstring)."""
    graph, tau = relaxation.graph, relaxation.stages
    n, K = graph.n, tau.size
    resident = np.zeros((K, n), bool)
    after = tau + 1 < n
    resident[after] = schedule.S[tau[after] + 1]
    resident[np.arange(K), tau] = True
    at, reads = _period_of(tau, graph.edges[:, 1])
    resident[at[reads], graph.edges[reads, 0]] = True
    computed = np.zeros((K, n), bool)
    counts = np.vstack([np.zeros((1, n), np.int64), np.cumsum(schedule.R, axis=0)])  # counts[t]: rows < t
    computed[1:] = counts[tau[1:] + 1] - counts[tau[:-1] + 1] > 0
    x = np.zeros(relaxation.problem.num_vars)
    for idx, mat in ((relaxation.L, resident), (relaxation.Rc, computed)):
        mask = idx >= 0
        x[idx[mask]] = mat[mask]
    x[-1] = (resident * graph.memory[None, :]).sum(axis=1).max() / relaxation.memory_scale
    return x


def least_peak_lower_bound(graph: DFGraph, cost_limit: float, time_limit: float | None = None,
                           backend: str = "highs", threads: int = 1,
                           stages: np.ndarray | list[int] | None = None) -> float | None:
    """A proved lower bound (bytes) on the peak of every frontier-advancing schedule costing at most ``cost_limit``.

    The LP optimum of the resident-set relaxation over ``stages`` (default all),
    less ``LP_TOLERANCE``; None when the LP does not finish within
    ``time_limit``. ``inf`` when even the relaxation has no point within the cost
    limit (no schedule has).
    """
    relaxation = build_resident_set_relaxation(graph, cost_limit, stages)
    out = solve_milp(relaxation.problem.relaxed(), backend, SolverOptions(time_limit, threads=threads))
    if out.status == "infeasible":
        return float("inf")
    if out.status != "optimal" or out.objective is None:
        return None
    return relaxation.peak(out.objective * (1 - LP_TOLERANCE))


def backward_windows(graph: DFGraph, length: int = WINDOW_STAGES) -> list[np.ndarray]:
    """Stage lists for window relaxations: ``length`` consecutive stages each, half overlapping, with the loss.

    The windows cover the backward pass from its end (where the first layers'
    large activations are read) to the loss; each includes the loss stage,
    whose resident set holds every value kept from the forward pass.
    """
    graph.require_training_structure("window relaxations of the backward pass")
    first, n = graph.loss + 1, graph.n
    if n - first <= length:
        return [np.arange(graph.loss, n)]
    ends = list(range(n, first + length - 1, -(length // 2)))
    if ends[-1] != first + length:
        ends.append(first + length)
    return [np.concatenate([[graph.loss], np.arange(end - length, end)]) for end in ends]


def budget_ruled_out(graph: DFGraph, budget: float, cost_limit: float, stages: np.ndarray | list[int] | None = None,
                     time_limit: float | None = None, backend: str = "highs", threads: int = 1) -> bool | None:
    """Does the relaxation over ``stages`` prove that no schedule costing at most ``cost_limit`` fits ``budget``?

    True: its MILP has no point with a peak within ``budget`` (a proof); False: it
    has one (the relaxation cannot decide); None: undecided within ``time_limit``.
    """
    relaxation = build_resident_set_relaxation(graph, cost_limit, stages)
    out = solve_milp(relaxation.with_budget(budget), backend, SolverOptions(time_limit, threads=threads))
    if out.status == "infeasible":
        return True
    return False if out.status in ("optimal", "feasible") else None


def smallest_batch_ruled_out(graph: DFGraph, budget: float, low: int, high: int,
                             cost_limit_at: Callable[[DFGraph], float], deadline: float | None = None,
                             window_seconds: float = WINDOW_SECONDS, backend: str = "highs",
                             threads: int = 1) -> int | None:
    """The least ``B`` in ``(low, high]`` that a window relaxation proves infeasible at ``budget``, or None.

    ``cost_limit_at(g)`` is the cost limit for the graph ``g`` at a batch size
    (eq. 10's cap). A window's feasibility is monotone in ``B`` (memory only
    grows, the cap's slack scales with the costs), so bisection over ``B`` with
    :func:`backward_windows` finds where the windows' proofs begin. A window
    feasible at some ``B`` cannot prove anything at a smaller one and is skipped
    there; one undecided within ``window_seconds`` is skipped there too, and the
    window that proved last is tried first. ``deadline`` (a
    ``time.perf_counter()`` value) ends the bisection early.
    """
    windows = backward_windows(graph)
    cannot_prove_up_to = [0] * len(windows)  # the largest B at which each window was feasible or undecided
    order = list(range(len(windows)))
    proved: int | None = None
    lo, hi = low, high + 1
    while hi - lo > 1:
        B = (lo + hi) // 2
        g = graph.with_batch_size(B)
        limit = cost_limit_at(g)
        for i in [i for i in order if cannot_prove_up_to[i] < B]:
            left = None if deadline is None else deadline - time.perf_counter()
            if left is not None and left <= 0:
                return proved
            seconds = window_seconds if left is None else min(window_seconds, left)
            if budget_ruled_out(g, budget, limit, windows[i], seconds, backend, threads):
                hi = proved = B
                order.remove(i)
                order.insert(0, i)
                break
            cannot_prove_up_to[i] = B
        else:
            lo = B
    return proved
