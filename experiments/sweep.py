"""The grid runner behind budget_sweep, approx_ratio and rounding: graph x strategy x budget x seed.

Every finished cell is appended to ``results/<experiment>.csv`` at once and logged
to MLflow; cells whose key is already in the file with a final status are skipped,
so a killed sweep resumes where it stopped. Infeasible, time-limited and failed
cells are recorded with their status and the sweep carries on.

``experiment.grid`` names the ``params.yaml`` section to run (default: the
experiment's name) and the results file; ``accountings`` in a grid runs its cells
under each accounting (:mod:`experiments.accounting`), recorded in the rows.
"""

from __future__ import annotations

import logging
import tempfile
from itertools import product
from pathlib import Path
from typing import Any

from experiments.accounting import accountings, artifact_strategy, cell_budget, graph_for
from experiments.common import (
    PROJECT_ROOT,
    InputError,
    MissingAPIError,
    append_row,
    as_list,
    done_keys,
    names,
    project_path,
    read_rows,
    row_key,
    write_rows,
)
from experiments.graphs import load_spec
from experiments.solving import (
    CELL_KEY,
    RESULT_COLUMNS,
    SOLVER_STRATEGIES,
    failed_row,
    lookup_strategy,
    missing_strategies,
    result_row,
    solve_cell,
)
from experiments.tracking import Tracker

log = logging.getLogger(__name__)
GRID_KEYS = ("graphs", "strategies", "budgets", "seeds", "cost_model", "time_limit", "mip_gap", "skip_missing",
             "accountings")
# Rows carry the accounting they were run under, and it is part of a cell's key.
SWEEP_COLUMNS = [*RESULT_COLUMNS, "accounting"]
SWEEP_KEY = [*CELL_KEY, "accounting"]


def settings(cfg: Any) -> dict[str, Any]:
    """The experiment's settings: ``params.yaml[<profile>][<name>]`` overlaid by non-null ``experiment.*`` keys."""
    from omegaconf import OmegaConf

    exp = OmegaConf.to_container(cfg.experiment, resolve=True)
    name, profile = exp["name"], exp.get("profile")
    section = exp.get("grid") or name
    out: dict[str, Any] = {}
    params_file = project_path(exp.get("params_file") or "params.yaml")
    if profile:
        if not params_file.is_file():
            raise InputError(f"{params_file} is missing: restore params.yaml or set experiment.profile=null")
        params = OmegaConf.to_container(OmegaConf.load(params_file), resolve=True) or {}
        if profile not in params:
            raise InputError(f"profile {profile!r} is not in {params_file.name}: use one of "
                             f"{', '.join(k for k, v in params.items() if isinstance(v, dict))}")
        if exp.get("grid") and section not in params[profile]:
            raise InputError(f"experiment.grid={section!r} is not a section of {params_file.name}[{profile}]")
        out.update(params[profile].get(section) or {})
    out.update({k: v for k, v in exp.items() if v is not None and k not in ("name", "profile", "params_file", "grid")})
    out["name"], out["profile"], out["grid"] = name, profile, section
    return out


def solver_settings(cfg: Any, grid: dict[str, Any]) -> dict[str, Any]:
    solver = dict(cfg.solver)
    for key in ("time_limit", "mip_gap", "threads"):
        if grid.get(key) is not None:
            solver[key] = grid[key]
    return solver


def results_file(cfg: Any, name: str) -> Path:
    return project_path(cfg.paths.results) / f"{name}.csv"


def takes_seed(name: str) -> bool:
    return name.endswith("randomized")


def run_grid(cfg: Any, grid: dict[str, Any] | None = None) -> Path:
    """Run every cell of the experiment's grid that is not already in its CSV; returns the CSV path."""
    from tqdm import tqdm

    grid = grid or settings(cfg)
    name = grid["name"]
    graphs, strategies = names(grid.get("graphs")), names(grid.get("strategies"))
    budgets, seeds = as_list(grid.get("budgets")), [int(s) for s in as_list(grid.get("seeds")) or [0]]
    if not (graphs and strategies and budgets):
        raise InputError(f"experiment {name!r} needs graphs, strategies and budgets: set experiment.graphs=[...], "
                         f"experiment.strategies=[...], experiment.budgets=[...] or experiment.profile=quick")
    missing = missing_strategies(strategies)
    if missing and not grid.get("skip_missing"):
        raise MissingAPIError(f"strategies not registered yet: {', '.join(missing)} (remat.strategies); "
                              f"drop them from experiment.strategies or pass experiment.skip_missing=true")
    strategies = [s for s in strategies if s not in missing]
    for s in missing:
        log.warning("skipping strategy %s: not registered in remat.strategies yet", s)
    solver = solver_settings(cfg, grid)
    cost_model = grid.get("cost_model") or cfg.cost_model.name
    out = results_file(cfg, grid.get("grid") or name)
    add_column(out, "accounting", "ours")
    done = done_keys(out, SWEEP_KEY)
    tracker = Tracker(cfg.get("mlflow"))
    cells = [(g, s, b, seed, a) for a in accountings(cfg, grid) for g, s, b in product(graphs, strategies, budgets)
             for seed in (seeds if takes_seed(s) else seeds[:1])]
    cache: dict[str, Any] = {}
    counts = {"run": 0, "skipped": 0}
    with tempfile.TemporaryDirectory() as tmp, tqdm(cells, desc=name, unit="cell", dynamic_ncols=True) as bar:
        for spec, strategy, budget_spec, seed, accounting in bar:
            bar.set_postfix_str(f"{spec} {strategy} {budget_spec} {accounting}", refresh=False)
            graph = _graph(cache, spec, cost_model, grid, cfg)
            if graph is None:
                continue
            context = {"experiment": name, "profile": grid.get("profile") or "", "graph": spec,
                       "model": spec.split(":", 1)[1] if spec.startswith("model:") else "",
                       "cost_model": cost_model if spec.startswith("model:") else "reference",
                       "platform": cfg.platform.name, "platform_memory": cfg.platform.memory,
                       "accounting": accounting}
            key_fields = dict(context, batch_size=graph.batch_size, strategy=strategy, budget_spec=str(budget_spec),
                              seed=seed, solver=solver["backend"] if strategy in SOLVER_STRATEGIES else "",
                              time_limit=solver.get("time_limit") if strategy in SOLVER_STRATEGIES else None)
            if row_key(key_fields, SWEEP_KEY) in done:
                counts["skipped"] += 1
                continue
            row, artifacts = run_cell(graph, strategy, budget_spec, solver, seed, context, Path(tmp))
            append_row(out, row, SWEEP_COLUMNS, replace_key=SWEEP_KEY)
            tracker.log(name, row, artifacts, run_name=f"{spec}/{strategy}/{budget_spec}/s{seed}/{accounting}")
            counts["run"] += 1
    log.info("%s: %d cells run, %d already done, results in %s", name, counts["run"], counts["skipped"], out)
    return out


def add_column(path: Path, column: str, value: str) -> None:
    """Give an older results file a new column (``value`` in every old row), so appended rows keep it."""
    rows = read_rows(path)
    if not path.is_file() or not rows or column in rows[0]:
        return
    header = list(rows[0])
    write_rows(path, [{**r, column: value} for r in rows], [*header, column])


def run_cell(graph: Any, strategy: str, budget_spec: Any, solver: dict[str, Any], seed: int,
             context: dict[str, Any], tmp: Path) -> tuple[dict[str, Any], list[Path]]:
    """Solve one cell under its ``context["accounting"]``; every outcome, including a crash, becomes a row."""
    accounting = context.get("accounting", "ours")
    source, graph = graph, graph_for(graph, accounting)
    common = {"budget_spec": budget_spec, "solver": solver, "seed": seed, "context": context}
    try:
        budget = cell_budget(budget_spec, graph, source, accounting)
    except InputError as exc:
        return failed_row(graph, strategy, budget=None, status="infeasible", message=str(exc), **common), []
    try:
        artifact = artifact_strategy(strategy, accounting)
        if artifact is not None:
            result = artifact(graph, budget)
        else:
            result = solve_cell(graph, strategy, budget, solver, seed if takes_seed(strategy) else None)
    except Exception as exc:  # a refused graph, a licence limit, or a bug: record it and carry on with the sweep
        expected = isinstance(exc, (ValueError, RuntimeError, MemoryError))
        log.warning("%s on %s at %s failed: %s", strategy, graph.name, budget_spec, exc, exc_info=not expected)
        return failed_row(graph, strategy, budget=budget, status="error", message=f"{type(exc).__name__}: {exc}",
                          **common), []
    row = result_row(graph, result, **common)
    artifacts = []
    if result.schedule is not None:
        path = tmp / "schedule.json"
        result.schedule.save(path)
        artifacts.append(path)
    return row, artifacts


def _graph(cache: dict[str, Any], spec: str, cost_model: str, grid: dict[str, Any], cfg: Any) -> Any:
    if spec not in cache:
        try:
            cache[spec] = load_spec(spec, cost_model, cfg.get("frontend", "torch"), cfg.paths.results)
        except MissingAPIError as exc:
            if not grid.get("skip_missing"):
                raise
            log.warning("skipping graph %s: %s", spec, exc)
            cache[spec] = None
    return cache[spec]


__all__ = ["GRID_KEYS", "PROJECT_ROOT", "lookup_strategy", "results_file", "run_grid", "settings"]
