"""The default experiment of run.py: one graph (or zoo model), one strategy, one budget.

Prints a summary table and saves ``schedule.json``, ``summary.json`` and
``summary.csv`` in Hydra's output directory. Every input is checked before any
file is written.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from experiments.common import (
    InputError,
    MissingAPIError,
    append_row,
    format_bytes,
    project_path,
    resolve_budget,
    write_rows,
)
from experiments.graphs import load_spec, model_graph
from experiments.solving import RESULT_COLUMNS, lookup_strategy, result_row, solve_cell
from experiments.tracking import Tracker
from remat.budget import describe_budget


def graph_from_config(cfg: Any) -> tuple[Any, str, str]:
    """(graph, label, cost model) from ``graph=`` or ``model=``; exactly one must be given."""
    from omegaconf import OmegaConf

    model = cfg.get("model")
    if cfg.get("graph") and model:
        raise InputError("give either graph=<reference name | path.json> or model=<name>, not both")
    if cfg.get("graph"):
        return load_spec(str(cfg.graph)), str(cfg.graph), "reference"
    if model:
        spec = OmegaConf.to_container(model, resolve=True)
        graph = model_graph(spec, cfg.cost_model.name, cfg.get("frontend", "torch"), cfg.paths.results)
        return graph, f"model:{spec['name']}", cfg.cost_model.name
    raise InputError("no graph given: pass graph=<reference name | path.json> (e.g. graph=vgg16) or model=<name> "
                     "(e.g. model=unet)")


def main(cfg: Any, output_dir: Path) -> dict[str, Any]:
    from omegaconf import OmegaConf

    # Checks on the config alone come first, so a refused run loads or extracts no graph.
    steps = int(cfg.get("train", {}).get("steps", 0) or 0)
    if steps > 0 and not cfg.get("model"):
        raise InputError("train.steps > 0 needs model=<name> (a graph file has no weights to train); drop train.steps")
    if steps > 0 and (cfg.get("frontend", "torch") != "torch" or cfg.cost_model.name == "reference"):
        raise InputError("train.steps > 0 trains the PyTorch model: use frontend=torch, cost_model=flops or profile")
    graph, label, cost_model = graph_from_config(cfg)
    budget = resolve_budget(cfg.budget, graph)
    name = cfg.strategy.name
    fn = lookup_strategy(name)  # an unknown strategy fails here, before anything is written
    trainer = _trainer() if steps > 0 else None
    solver = OmegaConf.to_container(cfg.solver, resolve=True)
    options = cfg.strategy.get("options")
    extra = OmegaConf.to_container(options, resolve=True) if options is not None else {}
    history: list[dict[str, float]] = []
    params = inspect.signature(fn).parameters
    if "on_incumbent" in params:
        extra["on_incumbent"] = incumbent_printer(graph, history)  # the anytime answer, as it improves
    if "stop" in params:
        extra["stop"] = threading.Event()  # Ctrl-C or SIGTERM ends the solve with the best schedule so far
    with stop_on_signals(extra.get("stop")):
        result = solve_cell(graph, name, budget, solver, int(cfg.seed), extra)
    context = {"experiment": "solve", "graph": label, "model": cfg.model.name if cfg.get("model") else "",
               "cost_model": cost_model, "platform": cfg.platform.name, "platform_memory": cfg.platform.memory}
    row = result_row(graph, result, budget_spec=cfg.budget, solver=solver, seed=int(cfg.seed), context=context)
    print(summary_table(row, graph))
    if result.schedule is not None:
        _atomic_write(output_dir / "schedule.json", lambda p: result.schedule.save(p))
    _atomic_write(output_dir / "summary.json", lambda p: Path(p).write_text(json.dumps(row, indent=1, default=str)))
    _atomic_write(output_dir / "summary.csv", lambda p: write_rows(Path(p), [row], RESULT_COLUMNS))
    if cfg.get("record"):
        append_row(project_path(cfg.paths.results) / f"{cfg.record}.csv", row, RESULT_COLUMNS)
    Tracker(cfg.get("mlflow")).log("solve", row, [output_dir / "schedule.json", output_dir / "summary.json"],
                                   run_name=f"{label}/{name}/{cfg.budget}", history=history)
    if trainer is not None and result.schedule is not None:
        _train(trainer, cfg, graph, result.schedule, steps)
    print(f"saved to {output_dir}")
    return row


def incumbent_printer(graph: Any, history: list[dict[str, float]] | None = None) -> Any:
    """Print each improving schedule: time, cost and proved bound (x checkpoint-all), and their gap.

    Each event is also appended to ``history`` (wall-clock time, seconds, cost, bound, gap) for MLflow.
    """
    base = graph.total_cost or 1.0

    def show(seconds: float, cost: float, bound: float) -> None:
        gap = (cost - bound) / cost if cost > 0 else 0.0
        print(f"  {seconds:8.1f} s  cost {cost / base:.5f}x  bound {bound / base:.5f}x  gap {100 * gap:6.2f} %",
              flush=True)
        if history is not None:
            history.append({"time": time.time(), "seconds": seconds, "cost": cost, "lower_bound": bound, "gap": gap})

    return show


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event | None) -> Iterator[None]:
    """While the solve runs, SIGINT and SIGTERM set ``stop`` (the strategy then answers with what it has).

    A second Ctrl-C interrupts at once, as usual. Outside the main thread, or
    without a ``stop``, signals keep their usual effect.
    """
    if stop is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: Any) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stop.set()
        print(f"\n{signal.Signals(signum).name}: ending the solve with the best schedule so far "
              f"(Ctrl-C again to quit at once)", file=sys.stderr, flush=True)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def summary_table(row: dict[str, Any], graph: Any) -> str:
    def num(key: str, fmt: str) -> str:
        value = row.get(key)
        return "-" if value is None else format(value, fmt)

    peak, budget = row.get("peak_memory"), row.get("budget")
    share = f" ({peak / budget:.1%} of budget)" if peak is not None and budget else ""
    lines = [
        ("graph", f"{row['graph']} ({graph.n} nodes, cost unit {graph.cost_unit})"),
        ("strategy", row["strategy"] + (f" [{row['solver']}]" if row.get("solver") else "")),
        ("status", row["status"]),
        ("cost", f"{num('cost', '.6g')} (checkpoint_all {graph.total_cost:.6g})"),
        ("overhead vs checkpoint_all", "-" if row.get("overhead") is None else f"{row['overhead']:.4f}x"),
        ("peak memory", f"{format_bytes(peak) if peak is not None else '-'}{share}"),
        ("budget", describe_budget(row["budget_spec"], graph, budget) if budget is not None else "-"),
        ("solve time", f"{num('solve_time', '.3f')} s"),
        ("gap", "-" if row.get("gap") is None else f"{row['gap']:.2%}"),
    ]
    if row.get("message"):
        lines.append(("message", row["message"]))
    width = max(len(k) for k, _ in lines)
    rule = "-" * (width + 50)
    return "\n".join([rule, *(f"{k:<{width}}  {v}" for k, v in lines), rule])


def _atomic_write(path: Path, write: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    if tmp.exists():
        tmp.unlink()
    write(tmp)
    os.replace(tmp, path)


def _trainer() -> Any:
    try:
        from remat.torch.train import train
    except ImportError as exc:
        raise MissingAPIError(f"train.steps > 0 needs remat.torch.train ({exc})") from None
    return train


def _train(fn: Any, cfg: Any, graph: Any, schedule: Any, steps: int) -> None:
    from omegaconf import OmegaConf

    from experiments.graphs import input_shape
    from remat.models import get_model, zoo_loss

    spec = OmegaConf.to_container(cfg.model, resolve=True)
    model = get_model(cfg.model.name, **dict(spec.get("kwargs") or {}))
    options = {"model": model, "graph": graph, "schedule": schedule, "steps": steps, "loss": zoo_loss(spec["name"]),
               "batch_size": int(cfg.model.batch_size), "sample_shape": input_shape(spec), "seed": int(cfg.seed)}
    params = inspect.signature(fn).parameters
    out = fn(**{k: v for k, v in options.items() if k in params})
    last = out[-1] if out else {}
    print(f"trained {steps} steps with the schedule: last loss {last.get('loss', float('nan')):.4f}, "
          f"peak {last.get('tracked_peak', 0) / 2**20:.1f} MiB tracked vs {last.get('predicted_peak', 0) / 2**20:.1f} "
          f"MiB predicted by simulate()")
