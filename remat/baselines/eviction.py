"""A fast incumbent for the certified ILP: drop the cheapest-to-recompute activations first.

Checkpoint-all keeps every forward output from its computation to its last
backward reader, so its peak sits around the loss. Dropping a forward value
``i`` between its last forward reader and its first backward reader, and
recomputing it there (the minimum R of App. B.1 fills in what that needs), lowers
the memory in between by ``M_i`` at a cost of about ``C_i``. The greedy below
drops, while the peak exceeds the budget, the value resident at the peak stage
with the most bytes per unit of recomputation cost, then tries to undo each drop
that is no longer needed. It is a heuristic (no optimality claim): the MILP
pipeline uses it to have a good schedule within seconds on graphs where the LP
takes minutes.
"""

from __future__ import annotations

import time

import numpy as np

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.baselines.recompute import solve_min_r
from remat.graph import DFGraph
from remat.result import SolveResult, result_from_schedule
from remat.schedule import Schedule, simulate


def dropped_schedule(graph: DFGraph, dropped: np.ndarray) -> Schedule:
    """Checkpoint-all with each dropped forward value absent between its forward and backward readers."""
    keep = checkpoint_all_schedule(graph).S.copy()
    loss = graph.loss
    for i in np.flatnonzero(dropped):
        users = graph.users[i]
        fwd = users[users <= loss]
        bwd = users[users > loss]
        if bwd.size == 0:
            continue
        start = (fwd.max() if fwd.size else i) + 1
        keep[start : bwd.min() + 1, i] = False
    return Schedule(solve_min_r(graph, keep), keep)


def solve_eviction_greedy(graph: DFGraph, budget: float, max_rounds: int | None = None, **_: object) -> SolveResult:
    """Greedy eviction by bytes per recomputation cost at the peak stage; see the module docstring."""
    start = time.perf_counter()
    graph.require_training_structure("eviction_greedy")
    n, loss = graph.n, graph.loss
    dropped = np.zeros(n, bool)
    schedule = checkpoint_all_schedule(graph)
    sim = simulate(graph, schedule, plan=False)
    value = graph.memory / (graph.cost + 1e-9 * max(graph.cost.max(), 1.0))
    rounds = 0
    while not sim.within(budget) and rounds < (max_rounds or n):
        t_peak = int(np.argmax(sim.memory.max(1)))
        resident = np.flatnonzero(schedule.S[t_peak] & ~dropped)
        resident = resident[resident < loss]
        if resident.size == 0:
            break
        dropped[resident[np.argmax(value[resident])]] = True
        schedule = dropped_schedule(graph, dropped)
        sim = simulate(graph, schedule, plan=False)
        rounds += 1
    if sim.within(budget):
        for i in sorted(np.flatnonzero(dropped), key=lambda i: value[i]):
            dropped[i] = False
            trial = dropped_schedule(graph, dropped)
            trial_sim = simulate(graph, trial, plan=False)
            if trial_sim.within(budget) and trial_sim.cost <= sim.cost:
                schedule, sim = trial, trial_sim
            else:
                dropped[i] = True
    return result_from_schedule("eviction_greedy", graph, schedule, budget, time.perf_counter() - start,
                                stats={"dropped": np.flatnonzero(dropped).tolist()})
