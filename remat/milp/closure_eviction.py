"""A fast schedule for any DAG: at the most exceeded stage, leave out the values that are cheapest to bring back.

:mod:`remat.baselines.eviction` drops one value at a time by bytes per unit of
its own cost, which misses that dropping a cheap value may force an expensive
input to be recomputed with it. Here each round takes the stage with the
highest step of the current schedule (under ``simulate()``) and leaves out a set
of the values carried through it unread: the set that frees the excess at the
least price, where a value's price is the cost of its recomputation closure
(itself and every input not present then, recursively, as in
:mod:`remat.milp.closure_bound`) at the stage of its next reader. Choosing the
set is a covering knapsack, solved exactly (HiGHS).

A value ``v`` left out at stage ``t`` is absent from just after its last reader
up to stage ``t`` until its next reader after ``t`` (``S[s, v] = 0`` in
between), so the minimum R of App. B.1
(:func:`~remat.baselines.recompute.solve_min_r`) recomputes it, with what it
needs, in that reader's stage. Each round is judged by ``simulate()``; at the
end a pass restores every interval the budget no longer needs. It works on
plain DAGs as on training graphs and makes no optimality claim; the ilp
pipeline uses it as an incumbent. On the PyTorch U-Net at 0.7 of its
no-recomputation peak it finds 1.0347x (the proved optimum is 1.0346x, greedy
eviction 1.102x); on random layered DAGs, whose values have many readers, its
choices can cascade into long recomputation chains.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.baselines.recompute import solve_min_r
from remat.graph import DFGraph
from remat.result import SolveResult, result_from_schedule
from remat.schedule import Schedule, Simulation, simulate
from remat.solvers import MilpProblem, RowBuilder, SolverOptions, solve_milp

STAGE_SECONDS = 5.0  # one eviction MILP at most this long (its best point so far is used)


def drop_intervals(readers: np.ndarray, v: int, t: int) -> list[tuple[int, int]]:
    """The ways ``(first, last)`` to leave ``v`` out at stage ``t``: ``S[first..last, v]`` cleared, ``v`` recomputed
    in stage ``last``.

    The long way runs from just after the last reader before ``t`` (or ``v``
    itself) to the next reader after ``t``, which recomputes it; the short way
    clears only stages ``t`` and ``t + 1`` and recomputes ``v`` in stage
    ``t + 1``, while its inputs may still be there. None when no reader comes
    after ``t`` (nothing to leave out) or ``t`` itself reads ``v``.
    """
    later = readers[readers > t]
    if later.size == 0 or np.any(readers == t):
        return []
    earlier = readers[readers < t]
    first = (int(earlier.max()) if earlier.size else v) + 1
    ways = [(first, int(later.min()))]
    if later.min() > t + 1:
        ways.append((t, t + 1))
    return ways


def recomputation_closure(graph: DFGraph, schedule: Schedule, v: int, s: int) -> list[int]:
    """The nodes stage ``s`` must compute, besides what it computes now, to compute ``v`` there (``v`` included).

    An input is present in stage ``s`` when it is checkpointed into it or
    computed there already (eq. 1b); ``v`` itself counts as absent.
    """
    present = schedule.S[s] | schedule.R[s]
    present[v] = False
    added: list[int] = []
    todo = [v]
    seen = {v}
    while todo:
        x = todo.pop()
        added.append(x)
        for p in graph.deps[x]:
            p = int(p)
            if not present[p] and p not in seen:
                seen.add(p)
                todo.append(p)
    return added


def closure_evictions(graph: DFGraph, schedule: Schedule, t: int, excess: float,
                      time_limit: float) -> list[tuple[int, int, int]]:
    """The intervals ``(v, first, last)`` to leave out so that stage ``t`` frees ``excess`` bytes most cheaply.

    Candidates are the values carried through stage ``t`` (``S[t]`` and
    ``S[t+1]``), each in the ways of :func:`drop_intervals` that no recomputation inside the interval reads,
    so leaving one out frees its bytes at every step of stage ``t``; its price
    is the cost of its recomputation closure at the stage that recomputes it
    (:func:`recomputation_closure`, on the current schedule). The cheapest set
    freeing ``excess`` bytes, one way per value, is a covering knapsack, solved
    exactly as a MILP (HiGHS). Empty when no set of candidates frees enough.
    """
    R, S = schedule.R, schedule.S
    nxt = S[t + 1] if t + 1 < graph.n else np.zeros(graph.n, bool)
    readers_computed = np.zeros((graph.n, graph.n), bool)  # [stage, value]: a node computed in the stage reads it
    stages, edge = np.nonzero(R[:, graph.edges[:, 1]])
    readers_computed[stages, graph.edges[edge, 0]] = True
    candidates, prices = [], []
    for v in np.flatnonzero(S[t, :t] & nxt[:t]):
        for first, last in drop_intervals(graph.users[v], int(v), t):
            if readers_computed[first: last, v].any():
                continue  # a recomputation inside the interval reads v
            candidates.append((int(v), first, last))
            prices.append(float(graph.cost[recomputation_closure(graph, schedule, int(v), last)].sum()))
    if not candidates:
        return []
    values = np.array([v for v, _, _ in candidates])
    unique, which = np.unique(values, return_inverse=True)
    if graph.memory[unique].sum() < excess:
        return []
    memory = graph.memory[values].astype(float)
    scale = max(max(prices), 1e-12)
    k = len(candidates)
    rows = RowBuilder(k)
    cover = rows.add([(np.array([-1]), 0.0)], excess / memory.max(), np.inf, size=1)
    rows.add_pairs(np.repeat(cover, k), np.arange(k), memory / memory.max())
    once = rows.add([(np.full(unique.size, -1), 0.0)], -np.inf, 1.0)  # one way per value
    rows.add_pairs(once[which], np.arange(k), 1.0)
    A, lo, hi = rows.matrix()
    problem = MilpProblem(np.array(prices) / scale, A, lo, hi, np.zeros(k), np.ones(k), np.ones(k, bool))
    solved = solve_milp(problem, "highs", SolverOptions(time_limit=max(time_limit, 1e-3), mip_gap=1e-6))
    if solved.x is None:
        return []
    return [c for c, take in zip(candidates, solved.x > 0.5) if take]


def _schedule(graph: DFGraph, S: np.ndarray) -> tuple[Schedule, Simulation]:
    schedule = Schedule(solve_min_r(graph, S), S)
    return schedule, simulate(graph, schedule, plan=False)


def solve_closure_eviction(graph: DFGraph, budget: float, time_limit: float | None = None,
                           max_rounds: int | None = None,
                           on_schedule: Callable[[Schedule, float], None] | None = None,
                           **_: object) -> SolveResult:
    """Leave out the cheapest values at the most exceeded stage until the budget holds (module docstring).

    ``time_limit`` covers both passes; ``on_schedule(schedule, cost)`` hears the
    first schedule within the budget at once, before the restoring pass.
    """
    start = time.perf_counter()
    schedule = checkpoint_all_schedule(graph)
    sim = simulate(graph, schedule, plan=False)
    full, S = schedule.S, schedule.S.copy()
    drops: list[tuple[int, int, int]] = []  # (value, first, last) of every interval left out
    rounds = 0
    while not sim.within(budget) and rounds < (max_rounds or graph.n):
        left = None if time_limit is None else time_limit - (time.perf_counter() - start)
        if left is not None and left <= 0:
            break
        steps = np.where(schedule.R, sim.memory, -np.inf).max(1)
        t = int(np.argmax(steps))
        new = closure_evictions(graph, schedule, t, steps[t] - budget,
                                STAGE_SECONDS if left is None else min(STAGE_SECONDS, left))
        if not new:
            break
        for v, first, last in new:
            S[first: last + 1, v] = False
        drops += new
        schedule, sim = _schedule(graph, S)
        rounds += 1
    if sim.within(budget) and on_schedule is not None:
        on_schedule(schedule, sim.cost)
    if sim.within(budget):
        # Restore each interval the budget no longer needs, most expensive recomputation first, while time is left.
        for v, first, last in sorted(drops, key=lambda d: -graph.cost[d[0]]):
            if time_limit is not None and time.perf_counter() - start > time_limit:
                break
            trial_S = S.copy()
            trial_S[first: last + 1, v] = full[first: last + 1, v]
            trial, trial_sim = _schedule(graph, trial_S)
            if trial_sim.within(budget) and trial_sim.cost <= sim.cost:
                S, schedule, sim = trial_S, trial, trial_sim
    return result_from_schedule("closure_eviction", graph, schedule, budget, time.perf_counter() - start,
                                stats={"rounds": rounds, "intervals_dropped": len(drops)})
