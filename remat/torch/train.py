"""Training loops on top of the schedule executor: one step, or ``steps`` SGD steps on synthetic data."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from remat.graph import DFGraph
from remat.schedule import Schedule
from remat.torch.execute import ScheduleExecutor
from remat.torch.execute_support import ExecutionError, StepResult, random_batch


def execute_step(
    model: nn.Module, graph: DFGraph, schedule: Schedule, sample: Any, target: Any, **options: Any
) -> StepResult:
    """One training step of ``model`` on ``(sample, target)`` under ``schedule`` (see :class:`ScheduleExecutor`)."""
    measure_live = options.pop("measure_live", False)
    return ScheduleExecutor(model, graph, schedule, **options).step(sample, target, measure_live=measure_live)


def train(
    model: nn.Module,
    graph: DFGraph,
    schedule: Schedule,
    steps: int,
    sample_shape: tuple[int, ...] | None = None,
    batch_size: int | None = None,
    lr: float = 0.01,
    seed: int = 0,
    progress: bool = True,
    loss: Any = None,
    leaf_modules: tuple = (),
) -> list[dict[str, Any]]:
    """Train ``model`` for ``steps`` SGD steps on random data, each step run under ``schedule``.

    The data are a fixed synthetic set of 8 random batches (seeded), cycled, so
    the loss goes down. ``sample_shape``/``batch_size`` default to the graph's and
    must match it when given. Returns one dict per step (loss, step time, the
    executor's tracked and predicted peak bytes); a tqdm bar shows them live.
    ``loss`` and ``leaf_modules`` are the extraction's (see :class:`ScheduleExecutor`).
    """
    if sample_shape is not None and tuple(sample_shape) != tuple(graph.metadata["input_shape"]):
        want = tuple(graph.metadata["input_shape"])
        raise ExecutionError(f"sample_shape {tuple(sample_shape)} differs from the graph's {want}: re-extract")
    if batch_size is not None and batch_size != graph.batch_size:
        raise ExecutionError(f"batch_size {batch_size} differs from the graph's {graph.batch_size}: re-extract")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ExecutionError(f"steps must be a non-negative integer, got {steps!r}")
    from tqdm.auto import tqdm

    torch.manual_seed(seed)
    executor = ScheduleExecutor(model, graph, schedule, loss=loss, leaf_modules=leaf_modules)
    gen = torch.Generator().manual_seed(seed)
    data = [random_batch(graph, gen, executor.device) for _ in range(8)]
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    rows: list[dict[str, Any]] = []
    bar = tqdm(range(steps), disable=not progress, desc=f"train {graph.name}", unit="step")
    for i in bar:
        opt.zero_grad()
        res = executor.step(*data[i % len(data)])
        opt.step()
        row = {"step": i, **res.summary()}
        rows.append(row)
        mb = res.tracked_peak / 2**20
        bar.set_postfix(loss=f"{res.loss:.4f}", step_s=f"{res.wall_time:.3f}", peak_MB=f"{mb:.1f}")
    return rows
