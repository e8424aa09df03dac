"""A lower bound on problem (9)'s cost, one stage at a time: what must be recomputed for a frontier step to fit.

In a frontier-advancing schedule (eqs. 8a-8c) stage ``t`` ends by computing node
``t`` for the first time, and nothing after it. Let ``H`` be the values resident
at that step ``(t, t)``. Then, for every schedule that keeps to the budget:

* ``const + sum_{h in H} M_h <= U[t, t] <= budget`` (eqs. 2-3; a value resident
  twice only adds to U), with ``t`` and its inputs ``Deps[t]`` in ``H`` (eq. 1b);
* a value ``v < t`` read by some node ``j > t`` but not in ``H`` is not
  checkpointed into stage ``t + 1`` (``S[t+1, v] = 1`` would keep it resident
  to the end of stage ``t``), so it is computed again in a stage of
  ``(t, j]`` (eqs. 1b, 1c): an extra computation, its first being at stage ``v``;
* an input ``u`` of a node computed again after stage ``t`` must be present then;
  if ``u`` is not in ``H`` it, too, is computed again after stage ``t`` (same
  argument).

So the nodes computed again after stage ``t`` include a set ``W`` that contains
every such ``v`` and is closed under "an input not in ``H``". Each extra
computation costs ``C_w``, hence every schedule costs at least

    sum_i C_i + max_t  min { sum_{w in W} C_w : (H, W) as above at stage t },

a valid lower bound on (9) for every stage ``t`` on its own. Each inner minimum
is a small MILP (a knapsack over ``H`` with precedence rows over ``W``), built in
matrix form here and solved by HiGHS; its *dual* bound is what counts, so a
stage stopped by a time limit still contributes soundly. Stages where
checkpoint-all's frontier step fits the budget contribute 0 and are skipped.

The bound sees what the LP relaxation of (9) misses: a tensor is resident or
not, and dropping one pays for the whole chain of recomputation behind it. On the
paper's graphs and the PyTorch U-Net it lies within 0.7 % of the proved optimum
(within 0.01 % for U-Net at 0.7 of its no-recomputation peak, where the LP of (9)
is 3.4 % below it). It does not couple stages, so where many stages each need a
little recomputation that one shared recomputation cannot serve, the LP and
branch and bound of :mod:`remat.milp.certified` remain the stronger bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.graph import DFGraph
from remat.schedule import memory_matrix
from remat.solvers import MilpProblem, RowBuilder, SolverOptions, solve_milp

STAGE_SECONDS = 20.0  # one stage's MILP at most this long (its dual bound still counts when stopped)


@dataclass
class ClosureBound:
    """What :func:`recomputation_lower_bound` proved; every in-budget schedule costs >= ``total_cost + extra``."""

    extra: float
    stage: int | None = None  # the stage that gives ``extra``
    held: np.ndarray | None = None  # that stage's least-cost resident set at its frontier step (bool per node)
    recomputed: np.ndarray | None = None  # and the nodes it must compute again (bool per node)
    infeasible_stage: int | None = None  # a stage whose frontier step cannot fit: no schedule exists
    stages_over: int = 0  # stages whose checkpoint-all frontier step exceeds the budget
    stages_solved: int = 0  # of those, solved to optimality
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        """Whether every stage that could contribute was solved to optimality."""
        return self.infeasible_stage is not None or self.stages_solved == self.stages_over


def stages_over_budget(graph: DFGraph, budget: float) -> tuple[np.ndarray, np.ndarray]:
    """The stages whose frontier step exceeds ``budget`` under checkpoint-all, most exceeded first, and the excess."""
    frontier = np.diagonal(memory_matrix(graph, checkpoint_all_schedule(graph)))
    over = np.flatnonzero(frontier > budget * (1 + 1e-9))
    order = np.argsort(-frontier[over], kind="stable")
    return over[order], frontier[over[order]] - budget


def stage_closure_problem(graph: DFGraph, budget: float, t: int,
                          last_reader: np.ndarray) -> tuple[MilpProblem, float]:
    """The MILP of stage ``t`` (module docstring) and its cost scale: columns ``h_0..h_t`` then ``w_0..w_{t-1}``.

    ``last_reader[v]`` is the largest id reading ``v`` (-1 if none).
    """
    H = np.arange(t + 1)
    W = t + 1 + np.arange(t)
    N = 2 * t + 1
    cost_scale = float(graph.cost.max()) if graph.cost.max() > 0 else 1.0
    memory_scale = float(max(graph.memory.max(), 1))
    c = np.zeros(N)
    c[W] = graph.cost[:t] / cost_scale
    lb, ub = np.zeros(N), np.ones(N)
    lb[H[t]] = 1.0
    lb[H[graph.deps[t]]] = 1.0
    rows = RowBuilder(N)
    # const + sum M_h h <= budget: the resident set fits at the frontier step.
    knapsack = rows.add([(np.array([-1]), 0.0)], -np.inf, (budget - graph.constant_memory) / memory_scale, size=1)
    rows.add_pairs(np.repeat(knapsack, t + 1), H, graph.memory[: t + 1] / memory_scale)
    # A value read after stage t is resident or computed again.
    live = np.flatnonzero(last_reader[:t] > t)
    rows.add([(H[live], 1.0), (W[live], 1.0)], 1.0, np.inf)
    # An input of a node computed again is resident or computed again too.
    inner = graph.edges[graph.edges[:, 1] < t]
    u, v = inner[:, 0], inner[:, 1]
    rows.add([(W[v], 1.0), (H[u], -1.0), (W[u], -1.0)], -np.inf, 0.0)
    A, row_lb, row_ub = rows.matrix()
    return MilpProblem(c, A, row_lb, row_ub, lb, ub, np.ones(N, bool)), cost_scale


def recomputation_lower_bound(graph: DFGraph, budget: float, time_limit: float | None = None,
                              stage_seconds: float = STAGE_SECONDS, threads: int = 1,
                              stop: object | None = None) -> ClosureBound:
    """The stage-closure lower bound of the module docstring: max over stages of the least forced recomputation.

    Stages are solved most exceeded first until ``time_limit`` (seconds, None:
    all) or ``stop`` (a ``threading.Event``) ends the scan; the answer is valid
    whatever was scanned. A stage whose MILP is infeasible proves that no
    schedule fits the budget at all (``infeasible_stage``; ``extra`` is inf).
    """
    start = time.perf_counter()
    over, _ = stages_over_budget(graph, budget)
    out = ClosureBound(0.0, stages_over=int(over.size))
    last_reader = np.full(graph.n, -1)
    np.maximum.at(last_reader, graph.edges[:, 0], graph.edges[:, 1])
    for t in over:
        left = None if time_limit is None else time_limit - (time.perf_counter() - start)
        if (left is not None and left <= 0) or (stop is not None and stop.is_set()):
            break
        problem, cost_scale = stage_closure_problem(graph, budget, int(t), last_reader)
        limit = stage_seconds if left is None else min(stage_seconds, left)
        solved = solve_milp(problem, "highs", SolverOptions(time_limit=max(limit, 1e-3), mip_gap=1e-6,
                                                            threads=threads))
        if solved.status == "infeasible":
            out.extra, out.stage, out.infeasible_stage = np.inf, int(t), int(t)
            break
        out.stages_solved += solved.status == "optimal"
        bound = solved.bound if solved.bound is not None and np.isfinite(solved.bound) else 0.0
        if bound * cost_scale > out.extra:
            out.extra, out.stage = bound * cost_scale, int(t)
            if solved.x is not None:
                out.held, out.recomputed = np.zeros(graph.n, bool), np.zeros(graph.n, bool)
                out.held[: t + 1] = solved.x[: t + 1] > 0.5
                out.recomputed[:t] = solved.x[t + 1:] > 0.5
    out.seconds = time.perf_counter() - start
    return out
