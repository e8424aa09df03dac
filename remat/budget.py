"""Memory budgets: how users write them, the least budget any schedule needs, and the no-recomputation peak.

Every front end (``run.py``, the experiments, ``remat.torch.optimize``) reads a
budget with :func:`resolve_budget`, so all take the same forms:

* bytes: a whole number above 1 (``12000000000``) or a size with a unit
  (``"12GB"``, ``"500MiB"``; decimal kB/MB/GB/TB, binary KiB/MiB/GiB/TiB);
* a fraction in (0, 1] of the no-recomputation peak (checkpoint-all under ``simulate()``);
* ``"span:f"``, f in [0, 1]: ``lb + f (peak - lb)`` with ``lb`` the memory bound of
  :func:`memory_lower_bound` - a point inside every graph's own feasible range.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.graph import DFGraph
from remat.schedule import simulate


class BudgetError(ValueError):
    """A budget that is malformed or below what the graph needs; the message names the forms or the fix."""


BUDGET_FORMS = (
    'give bytes (e.g. 12000000000), a size with a unit ("12GB", "500MiB"), a fraction in (0,1] of the '
    'no-recomputation peak (e.g. 0.7), or "span:f" (f in [0,1] of the way from the smallest computable budget '
    "to that peak)"
)
_UNITS = {
    "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
}  # fmt: skip
_BUDGET_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


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


# ---------------------------------------------------------------------- the forms users write
def parse_budget(spec: Any) -> tuple[str, float]:
    """Split a budget spec into ``("fraction", f)``, ``("bytes", b)`` or ``("span", f)``, without a graph.

    A number in (0, 1] is a fraction of checkpoint_all's peak; a whole number
    above 1 or a size with a unit is bytes; ``span:f`` is ``("span", f)`` (see
    the module docstring). Raises :class:`BudgetError` naming the accepted forms.
    """
    if isinstance(spec, bool) or spec is None:
        raise BudgetError(f"budget {spec!r} is not a number: {BUDGET_FORMS}")
    if isinstance(spec, str) and spec.strip().lower().startswith("span:"):
        try:
            value = float(spec.split(":", 1)[1])
        except ValueError:
            value = math.nan
        if not 0 <= value <= 1:
            raise BudgetError(f"budget {spec!r} needs a number in [0,1] after 'span:': {BUDGET_FORMS}")
        return "span", value
    if isinstance(spec, (int, float, np.number)):
        value, unit = float(spec), ""
    elif isinstance(spec, str):
        match = _BUDGET_RE.match(spec)
        if not match:
            raise BudgetError(f"budget {spec!r} is not numeric: {BUDGET_FORMS}")
        value, unit = float(match.group(1)), match.group(2).lower()
        if unit and unit not in _UNITS:
            raise BudgetError(f"budget {spec!r} has an unknown unit {match.group(2)!r}: {BUDGET_FORMS}")
    else:
        raise BudgetError(f"budget {spec!r} ({type(spec).__name__}) is not a number or a string: {BUDGET_FORMS}")
    if not math.isfinite(value) or value <= 0:
        raise BudgetError(f"budget {spec!r} must be positive: {BUDGET_FORMS}")
    if unit:
        return "bytes", float(round(value * _UNITS[unit]))
    if value <= 1:
        return "fraction", value
    if value != round(value):
        raise BudgetError(f"budget {spec!r} is neither a fraction in (0,1] nor a whole number of bytes: {BUDGET_FORMS}")
    return "bytes", value


def span_budget(graph: DFGraph, f: float, peak: float | None = None) -> float:
    """``lb + f (peak - lb)`` with ``lb`` the memory needed to compute the hungriest node (a hard lower bound)."""
    lower, _ = memory_lower_bound(graph)
    peak = no_recompute_peak(graph) if peak is None else peak
    return float(round(lower + f * (peak - lower)))


def budget_bytes(spec: Any, graph: DFGraph) -> float:
    """The bytes that ``spec`` (any form of the module docstring) means for ``graph``, unchecked."""
    kind, value = parse_budget(spec)
    if kind == "bytes":
        return value
    peak = no_recompute_peak(graph)
    return value * peak if kind == "fraction" else span_budget(graph, value, peak)


def resolve_budget(spec: Any, graph: DFGraph) -> float:
    """The budget in bytes that ``spec`` (any form of the module docstring) means for ``graph``.

    Refuses budgets below the graph's constant overhead, naming it.
    """
    budget = budget_bytes(spec, graph)
    if budget < graph.constant_memory:
        raise BudgetError(
            f"budget {spec!r} = {format_bytes(budget)} is below graph {graph.name!r}'s constant overhead "
            f"(inputs, parameters, gradients) of {format_bytes(graph.constant_memory)}: give a budget above it"
        )
    return budget


def describe_budget(spec: Any, graph: DFGraph, budget: float) -> str:
    """One line saying what ``spec`` resolved to, with the graph's bound and no-recomputation peak."""
    lower, _ = memory_lower_bound(graph)
    peak = no_recompute_peak(graph)
    return (f"{format_bytes(budget)} (spec {spec}; least computable {format_bytes(lower)}, "
            f"no-recompute peak {format_bytes(peak)})")


def least_feasible_budget(
    graph: DFGraph, feasible: Callable[[float], bool], rel_tol: float = 0.005, max_probes: int = 24
) -> float | None:
    """The least budget (to ``rel_tol``) at which ``feasible(budget)`` holds, by bisection.

    Searches between :func:`memory_lower_bound` (nothing is feasible below it)
    and the no-recomputation peak (where checkpoint-all is); assumes
    ``feasible`` is monotone in the budget, as it is for every strategy that
    keeps its schedule when given more memory. None when even the peak fails.
    """
    lo, _ = memory_lower_bound(graph)
    hi = no_recompute_peak(graph)
    if feasible(lo):
        return float(lo)
    if not feasible(hi):
        return None
    for _ in range(max_probes):
        if hi - lo <= rel_tol * hi:
            break
        mid = float(round((lo + hi) / 2))
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    return float(hi)


def format_bytes(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= size:
            return f"{value / size:.3f} {unit}"
    return f"{value:.0f} B"
