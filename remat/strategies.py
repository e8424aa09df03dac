"""Strategies: ``fn(graph, budget_bytes, **options) -> SolveResult``, looked up by name."""

from __future__ import annotations

from collections.abc import Callable

from remat.baselines.checkpoint import solve_checkpoint_all, solve_checkpoint_last
from remat.result import SolveResult, Status

Strategy = Callable[..., SolveResult]

STRATEGIES: dict[str, Strategy] = {
    "checkpoint_all": solve_checkpoint_all,
    "checkpoint_last": solve_checkpoint_last,
}


def register(name: str, fn: Strategy) -> None:
    STRATEGIES[name] = fn


def get_strategy(name: str) -> Strategy:
    """The strategy function registered under ``name``; unknown names list the known ones."""
    _load_optional()
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; known strategies: {', '.join(sorted(STRATEGIES))}") from None


def strategy_names() -> list[str]:
    _load_optional()
    return sorted(STRATEGIES)


def _load_optional() -> None:
    # Modules register themselves on import; importing here keeps start-up light.
    import importlib

    for module in ("milp.plain", "milp.certified", "baselines.checkpoint_sets", "baselines.griewank", "milp.rounding",
                   "baselines.eviction"):
        try:
            importlib.import_module(f"remat.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"remat.{module}":
                raise


__all__ = ["STRATEGIES", "SolveResult", "Status", "get_strategy", "register", "strategy_names"]
