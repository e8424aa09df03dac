"""Fig. 6 (§6.4): the largest batch size each strategy trains at within a platform's memory.

A batch size counts when the strategy's schedule fits the memory with at most one
extra forward pass of cost (eq. 10). The search itself is the library's
``remat.maxbatch.search.max_batch_size(graph, budget, strategy, ...)``.
Under ``accounting=paper`` (or ``accountings: [ours, paper]`` in the grid) the
device is 16e9 bytes, the MILP searches ``16e9 - 2P`` and the baselines are the
artifact's, searched at ``16e9 - 4P`` (:func:`remat.paper.artifact_max_batch`):
what the paper's Fig. 6 measured. Figure: ``python -m analysis fig6``.
"""

from __future__ import annotations

import inspect
import logging
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from experiments.accounting import accountings, device_memory, graph_for
from experiments.common import (
    PROJECT_ROOT,
    InputError,
    MissingAPIError,
    append_row,
    as_list,
    done_keys,
    names,
    row_key,
    versions,
)
from experiments.graphs import load_spec
from experiments.solving import SOLVER_OPTIONS, SOLVER_STRATEGIES, missing_strategies
from experiments.sweep import add_column, results_file, settings, solver_settings
from experiments.tracking import Tracker

log = logging.getLogger(__name__)
COLUMNS = ["experiment", "profile", "graph", "cost_unit", "n_nodes", "strategy", "solver", "time_limit", "platform",
           "platform_memory", "accounting", "budget", "graph_batch_size", "status", "max_batch", "smallest_infeasible",
           "cost", "solve_time",
           "message", "remat_version", "solver_version", "torch_version", "timestamp"]
KEY = ["graph", "strategy", "solver", "time_limit", "platform", "accounting"]


def platform_memory(name: str) -> int:
    from omegaconf import OmegaConf

    path = PROJECT_ROOT / "conf" / "platform" / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        raise InputError(f"unknown platform {name!r}: pick one of {known}")
    return int(OmegaConf.load(path).memory)


def main(cfg: Any, output_dir: Path) -> Path:
    from tqdm import tqdm

    try:
        from remat.maxbatch.search import max_batch_size
    except ImportError:
        raise MissingAPIError("max_batch needs remat.maxbatch.search.max_batch_size(graph, budget, strategy, ...)"
                              " (the lead's max-batch search), which is not available yet") from None
    grid = settings(cfg)
    graphs, strategies = names(grid.get("graphs")), names(grid.get("strategies"))
    platforms = [str(p) for p in as_list(grid.get("platforms"))] or [cfg.platform.name]
    missing = missing_strategies(strategies)
    if missing and not grid.get("skip_missing"):
        raise MissingAPIError(f"strategies not registered yet: {', '.join(missing)}")
    strategies = [s for s in strategies if s not in missing]
    solver = solver_settings(cfg, grid)
    out = results_file(cfg, grid["name"])
    add_column(out, "accounting", "ours")
    done = done_keys(out, KEY)
    tracker = Tracker(cfg.get("mlflow"))
    cells = [(g, s, p, a) for a in accountings(cfg, grid) for g in graphs for s in strategies for p in platforms]
    graphs_loaded: dict[str, Any] = {}
    for spec, strategy, platform, accounting in tqdm(cells, desc="max_batch", unit="cell"):
        uses = strategy in SOLVER_STRATEGIES
        row = {"experiment": grid["name"], "profile": grid.get("profile") or "", "graph": spec, "strategy": strategy,
               "solver": solver["backend"] if uses else "", "time_limit": solver.get("time_limit") if uses else None,
               "platform": platform, "platform_memory": device_memory(platform_memory(platform), accounting),
               "accounting": accounting}
        if row_key(row, KEY) in done:
            continue
        if spec not in graphs_loaded:
            graphs_loaded[spec] = load_spec(spec, grid.get("cost_model") or cfg.cost_model.name,
                                            cfg.get("frontend", "torch"), cfg.paths.results)
        graph = graphs_loaded[spec]
        row.update(cost_unit=graph.cost_unit, n_nodes=graph.n, graph_batch_size=graph.batch_size,
                   timestamp=datetime.now(UTC).isoformat(timespec="seconds"),
                   **versions(solver["backend"] if uses else None))
        options = {k: solver[k] for k in SOLVER_OPTIONS if uses and solver.get(k) is not None}
        if grid.get("total_time_limit") is not None:
            options["total_time_limit"] = float(grid["total_time_limit"])
        params = inspect.signature(max_batch_size).parameters
        options["on_probe"] = partial(_log_probe, f"{spec}/{strategy}")
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            options = {k: v for k, v in options.items() if k in params}
        start = time.perf_counter()
        try:
            answer = _search(graph, float(row["platform_memory"]), strategy, accounting, max_batch_size, options)
            row.update(_unpack(answer))
        except Exception as exc:  # record the failed cell and carry on
            log.warning("max_batch %s %s failed: %s", spec, strategy, exc,
                        exc_info=not isinstance(exc, (ValueError, RuntimeError)))
            row.update(status="error", message=f"{type(exc).__name__}: {exc}")
        row.setdefault("solve_time", time.perf_counter() - start)
        append_row(out, row, COLUMNS, replace_key=KEY)
        tracker.log(grid["name"], row, run_name=f"{spec}/{strategy}/{platform}/{accounting}")
    return out


def _search(graph: Any, memory: float, strategy: str, accounting: str, search: Any, options: dict[str, Any]) -> Any:
    """One cell's answer: our search, or under the paper's accounting its budgets and the artifact's baselines."""
    if accounting != "paper":
        return {**_unpack(search(graph, memory, strategy, **options)), "budget": memory}
    from remat.paper import ARTIFACT_BASELINES, artifact_max_batch, paper_budget, parameter_bytes

    P = parameter_bytes(graph)
    plain = graph_for(graph, accounting)
    role = "solver" if strategy in SOLVER_STRATEGIES else "max_batch_baseline"
    budget = paper_budget(memory, P, role)
    if strategy in ARTIFACT_BASELINES:
        t0 = time.perf_counter()
        batch, _ = artifact_max_batch(plain, budget, strategy)
        return {"max_batch": batch, "smallest_infeasible": None, "budget": budget,
                "solve_time": time.perf_counter() - t0, "status": "optimal" if batch else "infeasible",
                "message": "the artifact's baseline at 16e9 - 4P (its max-batch search subtracted P twice)"}
    return {**_unpack(search(plain, budget, strategy, **options)), "budget": budget}


def _log_probe(cell: str, probe: dict[str, Any]) -> None:
    """Progress on long searches (ResNet50's probes take minutes each): one line per probe."""
    reach = f", its schedule fits up to {probe['fits_up_to']}" if "fits_up_to" in probe else ""
    log.info("%s: batch %s %s in %.1f s%s", cell, probe["batch"], probe["verdict"], probe["seconds"], reach)


def _unpack(answer: Any) -> dict[str, Any]:
    """Accept an int, a dict of row fields, or a result object with the batch size and, optionally,
    status/cost/solve_time/message."""
    if isinstance(answer, dict):
        return answer
    if isinstance(answer, (int, float)):
        return {"max_batch": int(answer), "status": "feasible" if answer > 0 else "infeasible"}
    out: dict[str, Any] = {}
    for name in ("max_batch", "batch_size", "max_batch_size"):
        if getattr(answer, name, None) is not None:
            out["max_batch"] = int(getattr(answer, name))
            break
    for name in ("status", "cost", "solve_time", "message", "smallest_infeasible"):
        value = getattr(answer, name, None)
        if value is not None:
            out[name] = str(value) if name in ("status", "message") else value
    out.setdefault("status", "feasible" if out.get("max_batch") else "infeasible")
    return out
