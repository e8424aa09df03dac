"""The limits the maximum-batch search works within: eq. (10)'s cost cap, the memory bound on B, time limits."""

from __future__ import annotations

import math

from remat.budget import memory_lower_bound
from remat.graph import DFGraph, GraphError
from remat.schedule import Schedule, simulate


def cost_cap(graph: DFGraph) -> float:
    """Eq. (10): the cost of one training step plus one extra forward pass."""
    graph.require_training_structure("the maximum-batch cost cap (eq. 10)")
    return 2 * graph.forward_cost + float(graph.cost[graph.loss :].sum())


def allowed_cost(graph: DFGraph) -> float:
    """Eq. (10)'s cap with a relative tolerance of 1e-9, so float rounding never rejects a schedule at the cap."""
    return cost_cap(graph) * (1 + 1e-9)


def batch_upper_bound(graph: DFGraph, budget: float) -> int:
    """A B above which no schedule fits: computing the hungriest node alone overflows (eqs. 1b, 3)."""
    one = graph.with_batch_size(1)
    need, _ = memory_lower_bound(one.with_constant_memory(0))
    scaled_need = need + one.input_memory
    if scaled_need <= 0:
        raise GraphError("the graph's memory does not grow with the batch size, so the batch is unbounded")
    return max(0, math.floor((budget - one.parameter_memory) / scaled_need))


def largest_batch_for(graph: DFGraph, schedule: Schedule, budget: float, low: int, high: int) -> int:
    """The largest ``B`` in ``[low, high]`` at which ``schedule`` keeps within ``budget`` and eq. (10)'s cap.

    ``schedule`` must qualify at ``low``. Memory only grows with ``B``, and cost
    minus cap is linear in ``B`` (every cost either scales with the batch or does
    not), so the qualifying ``B`` from ``low`` on form one interval: bisection
    over ``simulate()`` finds its end with no solver.
    """

    while low < high:
        mid = (low + high + 1) // 2
        if qualifies(graph, schedule, budget, mid):
            low = mid
        else:
            high = mid - 1
    return low


def qualifies(graph: DFGraph, schedule: Schedule, budget: float, B: int) -> bool:
    """Does ``schedule`` keep within ``budget`` and eq. (10)'s cap at batch size ``B``?"""
    g = graph.with_batch_size(B)
    sim = simulate(g, schedule, plan=False)
    return sim.within(budget) and sim.cost <= allowed_cost(g)


def tighter_limit(limit: float | None, other: float | None) -> float | None:
    """The smaller of two optional time limits (None: no limit)."""
    return limit if other is None else min(other, limit if limit is not None else math.inf)
