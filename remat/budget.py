"""Memory budgets: the least budget any schedule needs, and the no-recomputation peak budgets are fractions of."""

from __future__ import annotations

import math

import numpy as np

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.graph import DFGraph
from remat.schedule import simulate


def memory_lower_bound(graph: DFGraph) -> tuple[float, int]:
    """A budget below which no schedule exists, and the node that forces it.

    Computing node k needs its inputs resident and its output allocated on top of
    the constant overhead: ``const + M_k + sum_{i in Deps[k]} M_i`` (eqs. 1b, 3).
    """
    need = graph.memory.astype(float).copy()
    np.add.at(need, graph.edges[:, 1], graph.memory[graph.edges[:, 0]])
    k = int(np.argmax(need))
    return graph.constant_memory + float(need[k]), k


def check_budget(graph: DFGraph, budget: float) -> str | None:
    """Why ``budget`` cannot be met, for budgets that fail a cheap test; None otherwise."""
    if not (isinstance(budget, (int, float, np.number)) and math.isfinite(budget) and budget > 0):
        raise ValueError(f"budget must be a positive number of bytes, got {budget!r}")
    if budget < graph.constant_memory:
        return (f"budget {budget:.6g} B is below the constant overhead {graph.constant_memory:.6g} B "
                f"(inputs, parameters, gradients); raise the budget")
    bound, k = memory_lower_bound(graph)
    if budget < bound:
        return (f"budget {budget:.6g} B is below {bound:.6g} B, the memory needed to compute node {k} "
                f"({graph.names[k]!r}) with its inputs resident; raise the budget")
    return None


def no_recompute_peak(graph: DFGraph) -> float:
    """Peak memory of :func:`checkpoint_all_schedule` under ``simulate()``."""

    return simulate(graph, checkpoint_all_schedule(graph), plan=False).peak_memory
