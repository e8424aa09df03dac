"""Fig. 7 (R and S matrices as images) and Fig. 1 (memory over the schedule).

For each graph, strategy and budget: the schedule's R and S go to
``results/schedules/<graph>__<strategy>__<budget>.npz`` and the memory after every
computed node, in execution order, to ``results/schedules.csv`` (one row per
step: stage, node, whether it is a backward node, bytes in use, cumulative cost).
Figures: ``python -m analysis fig7`` and ``python -m analysis fig1``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from experiments.common import InputError, as_list, names, project_path, resolve_budget, write_rows
from experiments.graphs import load_spec
from experiments.solving import solve_cell
from experiments.sweep import results_file, settings, solver_settings
from experiments.tracking import Tracker

COLUMNS = ["graph", "strategy", "budget_spec", "budget", "status", "platform", "platform_memory", "step", "stage",
           "node", "backward", "memory", "cost_cum"]


def main(cfg: Any, output_dir: Path) -> Path:
    from tqdm import tqdm

    grid = settings(cfg)
    graphs, strategies = names(grid.get("graphs")), names(grid.get("strategies"))
    budgets = as_list(grid.get("budgets"))
    if not (graphs and strategies and budgets):
        raise InputError("schedules needs experiment.graphs, experiment.strategies and experiment.budgets")
    solver = solver_settings(cfg, grid)
    folder = project_path(cfg.paths.results) / "schedules"
    folder.mkdir(parents=True, exist_ok=True)
    tracker = Tracker(cfg.get("mlflow"))
    rows: list[dict[str, Any]] = []
    for spec in graphs:
        graph = load_spec(spec, cfg.cost_model.name, cfg.get("frontend", "torch"), cfg.paths.results)
        for strategy in tqdm(strategies, desc=f"schedules {spec}", unit="strategy"):
            for budget_spec in budgets:
                budget = resolve_budget(budget_spec, graph)
                result = solve_cell(graph, strategy, budget, solver)
                if strategy == "checkpoint_all" and not result.has_schedule:
                    result = _unbounded_checkpoint_all(graph, budget)
                if not result.has_schedule:
                    rows.append({"graph": spec, "strategy": strategy, "budget_spec": budget_spec, "budget": budget,
                                 "status": str(result.status)})
                    continue
                path = folder / f"{_slug(spec)}__{strategy}__{_slug(budget_spec)}.npz"
                np.savez_compressed(path, R=result.schedule.R, S=result.schedule.S, memory=result.simulation.memory,
                                    budget=budget, cost=result.cost, peak_memory=result.peak_memory)
                rows.extend(_timeline(graph, result, spec, strategy, budget_spec, budget, cfg.platform))
                tracker.log(grid["name"], {"experiment": grid["name"], "graph": spec, "strategy": strategy,
                                           "budget_spec": budget_spec, "budget": budget, "status": str(result.status),
                                           "cost": result.cost, "peak_memory": result.peak_memory,
                                           "overhead": result.overhead(graph), "solve_time": result.solve_time},
                            [path], run_name=f"{spec}/{strategy}/{budget_spec}")
    out = results_file(cfg, grid["name"])
    write_rows(out, rows, COLUMNS)
    return out


def _unbounded_checkpoint_all(graph: Any, budget: float) -> Any:
    """Checkpoint-all's schedule even over the budget: Fig. 1's no-rematerialization reference curve."""
    from remat.baselines.checkpoint import checkpoint_all_schedule
    from remat.result import SolveResult, Status
    from remat.schedule import simulate

    schedule = checkpoint_all_schedule(graph)
    return SolveResult("checkpoint_all", Status.INFEASIBLE, budget, schedule, simulate(graph, schedule),
                       message="over the budget: shown as the no-rematerialization reference")


def _timeline(graph: Any, result: Any, spec: str, strategy: str, budget_spec: Any, budget: float,
              platform: Any) -> list[dict[str, Any]]:
    R, U = result.schedule.R, result.simulation.memory
    stages, nodes = np.nonzero(R)  # row-major: stage by stage, nodes in id order within a stage
    backward = graph.is_backward if graph.loss is not None else np.zeros(graph.n, bool)
    cost = np.cumsum(graph.cost[nodes])
    return [{"graph": spec, "strategy": strategy, "budget_spec": budget_spec, "budget": budget,
             "status": str(result.status), "platform": platform.name, "platform_memory": platform.memory,
             "step": i, "stage": int(t), "node": int(k), "backward": bool(backward[k]), "memory": float(U[t, k]),
             "cost_cum": float(cost[i])} for i, (t, k) in enumerate(zip(stages, nodes))]


def _slug(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", str(value)).strip("_")
