"""One cell: run a strategy on a graph at a budget and turn the answer into a tidy row."""

from __future__ import annotations

import inspect
import math
import time
from datetime import UTC, datetime
from typing import Any

from experiments.common import PROJECT_ROOT, InputError, MissingAPIError, versions

# Strategies that solve an LP/MILP and therefore take the solver options.
SOLVER_STRATEGIES = frozenset({"ilp", "ilp_plain", "approx_lp_deterministic", "approx_lp_randomized"})
SOLVER_OPTIONS = ("time_limit", "mip_gap", "threads", "backend")

RESULT_COLUMNS = [
    "experiment", "profile", "graph", "model", "cost_model", "cost_unit", "batch_size", "n_nodes",
    "strategy", "solver", "time_limit", "budget_spec", "budget", "seed", "platform", "platform_memory",
    "status", "cost", "overhead", "peak_memory", "solve_time", "gap", "lower_bound", "min_feasible_budget",
    "checkpoint_all_cost", "no_recompute_peak", "constant_memory", "message",
    "remat_version", "solver_version", "torch_version", "timestamp",
]
# A cell is identified by these; a re-run skips keys already finished.
CELL_KEY = ["graph", "cost_model", "batch_size", "strategy", "solver", "time_limit", "budget_spec", "seed"]


def uses_solver(name: str, fn: Any) -> bool:
    params = inspect.signature(fn).parameters
    return name in SOLVER_STRATEGIES or any(opt in params for opt in SOLVER_OPTIONS)


def strategy_options(name: str, fn: Any, solver: dict[str, Any] | None, seed: int | None,
                     extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The keyword options ``fn`` accepts: solver options only for strategies that solve a MILP/LP."""
    params = inspect.signature(fn).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    wanted: dict[str, Any] = {}
    if solver and uses_solver(name, fn):
        for opt in SOLVER_OPTIONS:
            if solver.get(opt) is not None and (opt in params or (takes_any and name in SOLVER_STRATEGIES)):
                wanted[opt] = solver[opt]
    if seed is not None and ("seed" in params or (takes_any and name.endswith("randomized"))):
        wanted["seed"] = int(seed)
    for key, value in (extra or {}).items():
        if key in params or takes_any:
            wanted[key] = value
    return wanted


def lookup_strategy(name: str) -> Any:
    try:
        from remat.strategies import get_strategy
    except ImportError as exc:  # pragma: no cover - the registry is part of the core
        raise MissingAPIError(f"remat.strategies.get_strategy is not importable ({exc})") from None
    try:
        return get_strategy(name)
    except ValueError as exc:
        raise InputError(f"{exc}; pick one of them with strategy=<name>") from None


def missing_strategies(names: list[str]) -> list[str]:
    from remat.strategies import strategy_names

    known = set(strategy_names())
    return [n for n in names if n not in known]


# Cheap strategies whose best in-budget schedule seeds the MILP (warm_start: heuristic).
WARM_START_FROM = ("checkpoint_all", "eviction_greedy", "linearized_greedy", "ap_greedy", "chen_greedy",
                   "griewank_logn", "ap_sqrtn", "linearized_sqrtn", "chen_sqrtn", "checkpoint_last")


def config_options(name: str) -> dict[str, Any]:
    """``options`` of ``conf/strategy/<name>.yaml`` (what sweeps use; run.py reads them through Hydra)."""
    from omegaconf import OmegaConf

    path = PROJECT_ROOT / "conf" / "strategy" / f"{name}.yaml"
    if not path.is_file():
        return {}
    return dict(OmegaConf.to_container(OmegaConf.load(path), resolve=True).get("options") or {})


def best_heuristic_schedule(graph: Any, budget: float) -> Any:
    """The cheapest in-budget schedule among :data:`WARM_START_FROM`, or None."""
    from remat.strategies import STRATEGIES

    best = None
    for name in WARM_START_FROM:
        if name not in STRATEGIES:
            continue
        try:
            result = STRATEGIES[name](graph, budget)
        except Exception:  # a chain-only heuristic on a DAG with skip connections, or a heuristic's bug
            continue
        if result.has_schedule and (best is None or result.cost < best.cost):
            best = result
    return best.schedule if best is not None else None


def solve_cell(graph: Any, name: str, budget: float, solver: dict[str, Any] | None = None,
               seed: int | None = None, extra: dict[str, Any] | None = None) -> Any:
    """Run strategy ``name``; returns its SolveResult (exceptions propagate to the caller).

    ``extra`` defaults to the strategy's config options; ``warm_start: heuristic``
    hands the best heuristic schedule to a strategy that takes a warm start.
    """
    fn = lookup_strategy(name)
    extra = dict(config_options(name) if extra is None else extra)
    warm_time = 0.0
    if extra.get("warm_start") == "heuristic":
        tick = time.perf_counter()
        extra["warm_start"] = best_heuristic_schedule(graph, budget)
        warm_time = time.perf_counter() - tick
    elif extra.get("warm_start") in ("none", False):
        extra.pop("warm_start")
    options = strategy_options(name, fn, solver, seed, extra)
    start = time.perf_counter()
    result = fn(graph, budget, **options)
    if not result.solve_time:
        result.solve_time = time.perf_counter() - start
    if warm_time:  # the heuristic warm start is part of what the solve cost
        result.solve_time += warm_time
        result.stats["warm_start_time"] = warm_time
    return result


def result_row(graph: Any, result: Any, *, budget_spec: Any, solver: dict[str, Any] | None, seed: Any,
               context: dict[str, Any]) -> dict[str, Any]:
    """A tidy row for a SolveResult; ``context`` adds experiment/model/platform fields."""
    from remat.budget import no_recompute_peak

    name = result.strategy
    solver_used = bool(solver) and name in SOLVER_STRATEGIES
    row = _graph_fields(graph)
    row.update(context)
    row.update(
        strategy=name,
        solver=solver["backend"] if solver_used else "",
        time_limit=solver.get("time_limit") if solver_used else None,
        budget_spec=str(budget_spec),
        budget=result.budget,
        seed=seed,
        status=str(result.status),
        cost=_num(result.cost),
        overhead=_num(result.overhead(graph)),
        peak_memory=_num(result.peak_memory),
        solve_time=_num(result.solve_time),
        gap=_num(result.gap),
        lower_bound=_num(result.lower_bound),
        min_feasible_budget=_num(result.min_feasible_budget),
        no_recompute_peak=no_recompute_peak(graph),
        message=_one_line(result.message),
        timestamp=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    row.update(versions(solver["backend"] if solver_used else None))
    return row


def failed_row(graph: Any, name: str, *, budget_spec: Any, budget: float | None, solver: dict[str, Any] | None,
               seed: Any, status: str, message: str, context: dict[str, Any]) -> dict[str, Any]:
    """A row for a cell that produced no SolveResult (bad budget, strategy refused the graph, crash)."""
    solver_used = bool(solver) and name in SOLVER_STRATEGIES
    row = _graph_fields(graph)
    row.update(context)
    row.update(
        strategy=name, solver=solver["backend"] if solver_used else "",
        time_limit=solver.get("time_limit") if solver_used else None,
        budget_spec=str(budget_spec), budget=budget, seed=seed, status=status, message=_one_line(message),
        timestamp=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    row.update(versions(solver["backend"] if solver_used else None))
    return row


def _graph_fields(graph: Any) -> dict[str, Any]:
    return {
        "graph": graph.name,
        "cost_unit": graph.cost_unit,
        "batch_size": graph.batch_size,
        "n_nodes": graph.n,
        "checkpoint_all_cost": graph.total_cost,
        "constant_memory": graph.constant_memory,
    }


def _num(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _one_line(text: Any) -> str:
    return " ".join(str(text or "").split())[:500]
