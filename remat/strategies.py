"""The registry of strategies: ``fn(graph, budget_bytes, **options) -> SolveResult``, looked up by name.

Every strategy of the paper and of this project is listed here; a user's own
strategy joins them with :func:`register` and is then run, swept and compared
by the same experiments.
"""

from __future__ import annotations

from collections.abc import Callable

from remat.baselines import BASELINES
from remat.milp.certified import solve_ilp_certified
from remat.milp.closure_eviction import solve_closure_eviction
from remat.milp.plain import solve_ilp
from remat.milp.rounding import solve_approx_lp_deterministic, solve_approx_lp_randomized
from remat.result import SolveResult, Status

Strategy = Callable[..., SolveResult]

STRATEGIES: dict[str, Strategy] = {
    **BASELINES,
    # The user-facing "ilp" is the certified pipeline; "ilp_plain" is problem (9) handed to the solver as is.
    "ilp": solve_ilp_certified,
    "ilp_plain": solve_ilp,
    "approx_lp_deterministic": solve_approx_lp_deterministic,
    "approx_lp_randomized": solve_approx_lp_randomized,
    "closure_eviction": solve_closure_eviction,
}


def register(name: str, fn: Strategy) -> None:
    """Add (or replace) the strategy ``name``."""
    STRATEGIES[name] = fn


def get_strategy(name: str) -> Strategy:
    """The strategy function registered under ``name``; unknown names list the known ones."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; known strategies: {', '.join(sorted(STRATEGIES))}") from None


def strategy_names() -> list[str]:
    return sorted(STRATEGIES)


__all__ = ["STRATEGIES", "SolveResult", "Status", "Strategy", "get_strategy", "register", "strategy_names"]
