"""One call for practitioners: ``remat.torch.optimize(model, sample, budget)`` trains ``model`` under a schedule.

>>> m = remat.torch.optimize(model, x, budget=0.6, strategy="ilp", time_limit=60)
>>> opt = torch.optim.SGD(m.parameters(), lr=0.1)
>>> for x, y in loader:                      # style 1: the whole step in one call
...     opt.zero_grad(); loss = m.step(x, y); opt.step()
>>> for x, y in loader:                      # style 2: like the model itself
...     opt.zero_grad(); out = m(x); loss = F.cross_entropy(out, y); loss.backward(); opt.step()

Both styles run the schedule's execution plan with
:class:`remat.torch.execute.ScheduleExecutor` and are exact (the
gradients plain autograd would give, see ``tests/test_torch_api.py``). Style 2
runs the plan up to the loss node inside ``m(x)`` and the rest inside
``loss.backward()``: the graph's ``Loss`` node receives ``dL/d(output)`` from
whatever loss the caller computed, so any loss function works, but only if
``backward()`` follows before the next call. In style 2 the input gets no
gradient, and under ``torch.no_grad()`` or in ``eval()`` mode ``m(x)`` simply
runs the model (inference needs no schedule). Style 1 uses the loss the graph
was extracted with (``loss="cross_entropy"`` or ``"mse"``).

``budget`` is bytes (a number above 1) or a fraction in (0, 1] of the
no-recomputation peak (checkpoint-all under ``simulate()``); every figure
includes parameters, their gradients and the input batch, as in the paper.
Schedules are saved with ``m.save(path)`` and reloaded for the same model with
:func:`load` (Checkmate's issue #131).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from remat.budget import no_recompute_peak
from remat.graph import DFGraph
from remat.result import SolveResult
from remat.schedule import Schedule
from remat.strategies import get_strategy
from remat.torch.execute import ScheduleExecutor, StepResult
from remat.torch.execute_support import _no_inplace_modules

__all__ = ["RematError", "RematModel", "load", "optimize"]

FORMAT = "remat.torch.optimized"
ILP_DEFAULT_TIME_LIMIT = 60.0


class RematError(ValueError):
    """Bad arguments to optimize()/load(), or no schedule within the budget; the message says what to change."""


class _PlanUntilLoss(torch.autograd.Function):
    """``m(x)``: the plan's statements before the loss; ``backward``: the rest, with the caller's dL/d(output)."""

    @staticmethod
    def forward(ctx: Any, anchor: torch.Tensor, executor: ScheduleExecutor, x: torch.Tensor) -> torch.Tensor:
        executor.begin(x, None)
        with _no_inplace_modules(executor.model):
            executor.advance(executor.loss_position)
        ctx.executor = executor
        return executor.output().detach()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None, None]:
        ex: ScheduleExecutor = ctx.executor
        ex.loss_grad = grad
        try:
            with _no_inplace_modules(ex.model):
                ex.advance(len(ex.simulation.plan))
        except BaseException:
            ex.abort()
            raise
        ex.last_result = ex.finish()
        return None, None, None


class RematModel(nn.Module):
    """``model`` trained under a rematerialization schedule; use it like the model (see the module docstring)."""

    def __init__(self, model: nn.Module, graph: DFGraph, result: SolveResult, leaf_modules: tuple = ()) -> None:
        super().__init__()
        if not result.has_schedule:
            raise RematError(f"{result.strategy} found no schedule: {result.message or result.status}")
        self.module = model
        self._graph, self._result = graph, result
        self._executor = ScheduleExecutor(model, graph, result.schedule, leaf_modules=leaf_modules)
        self._executor.last_result = None
        self._leaf_modules = leaf_modules

    @property
    def graph(self) -> DFGraph:
        return self._graph

    @property
    def schedule(self) -> Schedule:
        return self._result.schedule

    @property
    def result(self) -> SolveResult:
        return self._result

    @property
    def last_step(self) -> StepResult | None:
        """What the executor measured in the last completed training step."""
        return self._executor.last_result

    def step(self, x: torch.Tensor, target: torch.Tensor, *, measure_live: bool = False) -> torch.Tensor:
        """One training step: runs the plan, accumulates gradients into ``.grad``, returns the loss."""
        res = self._executor.step(x, target, measure_live=measure_live)
        self._executor.last_result = res
        return torch.tensor(res.loss)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (torch.is_grad_enabled() and self.training):
            return self.module(x)
        return _PlanUntilLoss.apply(self._executor._anchor, self._executor, x)

    def summary(self) -> str:
        g, r = self._graph, self._result
        peak0 = no_recompute_peak(g)
        lines = [
            f"remat schedule for {g.name}: {g.loss} forward nodes, batch {g.batch_size}, "
            f"input {tuple(g.metadata['input_shape'])}",
            f"  strategy {r.strategy} ({r.status}), solved in {r.solve_time:.2f} s",
            f"  budget {_fmt(r.budget)}; predicted peak {_fmt(r.peak_memory)} "
            f"(no recomputation: {_fmt(peak0)}, constant part {_fmt(g.constant_memory)})",
            f"  cost {r.overhead(g):.3f} x one forward+backward; {int(r.schedule.R.sum()) - g.n} recomputations",
        ]
        if self.last_step is not None:
            s = self.last_step
            lines.append(f"  last step: {s.wall_time:.3f} s, tracked peak {_fmt(s.tracked_peak)}")
        return "\n".join(lines)

    def save(self, path: str | Path) -> None:
        """Write the schedule with what identifies its graph; :func:`load` checks it against a model."""
        g, r = self._graph, self._result
        data = {
            "format": FORMAT,
            "version": 1,
            "graph": {
                "name": g.name,
                "n": g.n,
                "batch_size": g.batch_size,
                "input_shape": list(g.metadata["input_shape"]),
                "loss": g.metadata["loss"],
                "structure": g.metadata.get("structure"),
            },
            "strategy": r.strategy,
            "budget": r.budget,
            "schedule": r.schedule.to_dict(),
        }
        Path(path).write_text(json.dumps(data))


def _fmt(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes:.0f} B"


def _budget_bytes(graph: DFGraph, budget: float) -> float:
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0:
        raise RematError(
            f"budget must be bytes (> 1) or a fraction in (0, 1] of the no-recomputation peak, got {budget!r}"
        )
    return float(budget) * no_recompute_peak(graph) if budget <= 1 else float(budget)


def _sample_shape(sample: Any) -> tuple[int, tuple[int, ...]]:
    x = sample[0] if isinstance(sample, (tuple, list)) else sample
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        raise RematError("sample must be an input batch tensor (batch, ...) or a tuple (batch, target)")
    return int(x.shape[0]), tuple(int(d) for d in x.shape[1:])


def optimize(
    model: nn.Module,
    sample: Any,
    budget: float,
    strategy: str = "ilp",
    *,
    loss: str = "cross_entropy",
    cost_model: str = "flops",
    leaf_modules: tuple = (),
    **strategy_options: Any,
) -> RematModel:
    """Extract ``model``'s training graph at ``sample``'s shape, solve ``strategy`` at ``budget``, wrap the model.

    ``strategy`` is any name of :func:`remat.strategies.strategy_names`, with its
    options as keywords (ILP gets ``time_limit=60`` s unless given). Raises
    :class:`RematError` when the strategy finds no schedule within the budget,
    naming the smallest budget it knows works.
    """
    from remat.torch.extract import extract

    batch, shape = _sample_shape(sample)
    graph = extract(model, shape, batch, cost_model=cost_model, loss=loss, leaf_modules=leaf_modules)
    budget_bytes = _budget_bytes(graph, budget)
    if strategy == "ilp":
        strategy_options.setdefault("time_limit", ILP_DEFAULT_TIME_LIMIT)
    result = get_strategy(strategy)(graph, budget_bytes, **strategy_options)
    if not result.has_schedule:
        hint = (
            f"; the smallest budget it knows: {result.min_feasible_budget:.0f} bytes"
            if result.min_feasible_budget
            else ""
        )
        raise RematError(
            f"{strategy} found no schedule for {graph.name} within {budget_bytes:.0f} bytes ({result.status}: "
            f"{result.message}){hint}: raise the budget, lower the batch, or give the solver more time"
        )
    return RematModel(model, graph, result, tuple(leaf_modules))


def load(path: str | Path, model: nn.Module, *, leaf_modules: tuple = ()) -> RematModel:
    """Reload a schedule saved by :meth:`RematModel.save` for ``model`` (no solving)."""
    from remat.result import result_from_schedule
    from remat.torch.extract import extract

    data = json.loads(Path(path).read_text())
    if data.get("format") != FORMAT:
        raise RematError(f"{path} is not a schedule saved by remat.torch (format {data.get('format')!r})")
    info = data["graph"]
    graph = extract(model, tuple(info["input_shape"]), info["batch_size"], loss=info["loss"], leaf_modules=leaf_modules)
    if graph.n != info["n"] or (info["structure"] and graph.metadata.get("structure") != info["structure"]):
        raise RematError(
            f"{path} was solved for model {info['name']!r} ({info['n']} graph nodes, structure {info['structure']}); "
            f"this model gives {graph.n} nodes, structure {graph.metadata.get('structure')}: optimize() it instead"
        )
    schedule = Schedule(np.array(data["schedule"]["R"], bool), np.array(data["schedule"]["S"], bool))
    result = result_from_schedule(data["strategy"], graph, schedule, float(data["budget"]))
    return RematModel(model, graph, result, tuple(leaf_modules))
