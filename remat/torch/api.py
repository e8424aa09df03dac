"""One call for practitioners: ``remat.torch.optimize(model, sample, budget)`` trains ``model`` under a schedule.

>>> m = remat.torch.optimize(model, x, budget=0.6, strategy="ilp", time_limit=60)
>>> opt = torch.optim.SGD(m.parameters(), lr=0.1)
>>> for x, y in loader:                      # style 1: the whole step in one call
...     opt.zero_grad(); loss = m.step(x, y); opt.step()
>>> for x, y in loader:                      # style 2: like the model itself
...     opt.zero_grad(); out = m(x); loss = F.cross_entropy(out, y); loss.backward(); opt.step()

``sample`` is what the model is called with, traced as given
(:mod:`remat.torch.inputs`): a tensor, a tuple of positional inputs, a dict of
keyword inputs (``{"input_ids": ids, "attention_mask": mask}``) or
``remat.torch.Sample(*args, **kwargs)``; later batches take the same form
(``m.step(batch, y)``, ``m(**batch)``). ``loss`` is a named loss or
``loss_fn(output, target) -> scalar`` on the model's output as it returns it
(tensor, tuple, dict, output object); give ``target=`` an example target when a
callable loss reads one.

Both styles run the schedule's execution plan with
:class:`remat.torch.execute.ScheduleExecutor` and are exact (the gradients plain
autograd would give, see ``tests/test_torch_api.py``). Style 2 runs the plan up
to the loss node inside ``m(...)`` and the rest inside ``loss.backward()``: the
graph's ``Loss`` node receives ``dL/d(output)`` from whatever loss the caller
computed (it must read the outputs the extraction loss reads), and
``backward()`` must follow before the next call. In style 2 the inputs get no
gradient, and under ``torch.no_grad()`` or in ``eval()`` mode ``m(...)`` simply
runs the model (inference needs no schedule). Style 1 uses the loss the graph
was extracted with.

``budget`` takes every form of :mod:`remat.budget` (bytes, ``"12GB"``, a
fraction in (0, 1] of the no-recomputation peak, ``"span:f"``); every figure
includes parameters, their gradients and the input batch, as in the paper. A
budget no schedule of the strategy meets is refused with the least budget that
works. Schedules are saved with ``m.save(path)`` and reloaded for the same model
with :func:`load` (Checkmate's issue #131).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from remat.budget import (
    BudgetError,
    budget_bytes,
    format_bytes,
    least_feasible_budget,
    memory_lower_bound,
    no_recompute_peak,
)
from remat.graph import DFGraph
from remat.result import SolveResult
from remat.schedule import Schedule
from remat.strategies import get_strategy
from remat.torch.execute import ScheduleExecutor, StepResult
from remat.torch.execute_support import _no_inplace_modules, graph_inputs
from remat.torch.inputs import InputSpec, Sample
from remat.torch.tree import map_tensors, tensors_of

__all__ = ["RematError", "RematModel", "load", "optimize"]

FORMAT = "remat.torch.optimized"
ILP_DEFAULT_TIME_LIMIT = 60.0
# Strategies that solve LPs/MILPs: too slow to bisect over budgets, so the refusal bisects eviction_greedy instead
# (the certified ilp starts from its schedule, so ilp meets every budget it meets).
_SOLVER_STRATEGIES = ("ilp", "ilp_plain", "approx_lp_deterministic", "approx_lp_randomized")


class RematError(ValueError):
    """Bad arguments to optimize()/load(), or no schedule within the budget; the message says what to change."""


class _PlanUntilLoss(torch.autograd.Function):
    """``m(...)``: the plan's statements before the loss; ``backward``: the rest, with the caller's dL/d(output)."""

    @staticmethod
    def forward(ctx: Any, anchor: torch.Tensor, executor: ScheduleExecutor) -> tuple[torch.Tensor, ...]:
        with _no_inplace_modules(executor.model):
            executor.advance(executor.loss_position)
        ctx.executor = executor
        ctx.set_materialize_grads(False)
        flat = [t.detach() for t in tensors_of(executor.output())]
        ctx.mark_non_differentiable(*[t for t in flat if not (t.is_floating_point() or t.is_complex())])
        return tuple(flat)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[None, None]:
        ex: ScheduleExecutor = ctx.executor
        ex.loss_grad = list(grads)
        try:
            with _no_inplace_modules(ex.model):
                ex.advance(len(ex.simulation.plan))
        except BaseException:
            ex.abort()
            raise
        ex.last_result = ex.finish()
        return None, None


class RematModel(nn.Module):
    """``model`` trained under a rematerialization schedule; use it like the model (see the module docstring)."""

    def __init__(self, model: nn.Module, graph: DFGraph, result: SolveResult, leaf_modules: tuple = (),
                 loss: Any = None) -> None:
        super().__init__()
        if not result.has_schedule:
            raise RematError(f"{result.strategy} found no schedule: {result.message or result.status}")
        self.module = model
        self._graph, self._result = graph, result
        self._executor = ScheduleExecutor(model, graph, result.schedule, leaf_modules=leaf_modules, loss=loss)
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

    def step(self, sample: Any, target: Any = None, *, measure_live: bool = False) -> torch.Tensor:
        """One training step: runs the plan, accumulates gradients into ``.grad``, returns the loss."""
        res = self._executor.step(sample, target, measure_live=measure_live)
        self._executor.last_result = res
        return torch.tensor(res.loss)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not (torch.is_grad_enabled() and self.training):
            return self.module(*args, **kwargs)
        ex = self._executor
        ex.begin(Sample(*args, **kwargs), None, loss_grad_later=True)
        flat = iter(_PlanUntilLoss.apply(ex._anchor, ex))
        return map_tensors(ex.output(), lambda p, t: next(flat))

    def summary(self) -> str:
        g, r = self._graph, self._result
        peak0 = no_recompute_peak(g)
        inputs = ", ".join(f"{s.name} {tuple(s.full_shape(g.batch_size))} {s.dtype}"
                           for s in graph_inputs(g) if s.tensor and s.given)
        lines = [
            f"remat schedule for {g.name}: {g.loss} forward nodes ({g.n} in all), batch {g.batch_size}, "
            f"inputs {inputs}, loss {g.metadata['loss']}",
            f"  strategy {r.strategy} ({r.status}), solved in {r.solve_time:.2f} s",
            f"  budget {format_bytes(r.budget)}; predicted peak {format_bytes(r.peak_memory)} "
            f"(no recomputation: {format_bytes(peak0)}, constant part {format_bytes(g.constant_memory)})",
            f"  cost {r.overhead(g):.3f} x one forward+backward; {int(r.schedule.R.sum()) - g.n} recomputations",
        ]
        if self.last_step is not None:
            s = self.last_step
            lines.append(f"  last step: {s.wall_time:.3f} s, tracked peak {format_bytes(s.tracked_peak)}")
        return "\n".join(lines)

    def save(self, path: str | Path) -> None:
        """Write the schedule with what identifies its graph; :func:`load` checks it against a model."""
        g, r = self._graph, self._result
        data = {
            "format": FORMAT,
            "version": 2,
            "graph": {
                "name": g.name,
                "n": g.n,
                "batch_size": g.batch_size,
                "inputs": g.metadata.get("inputs"),
                "input_shape": list(g.metadata["input_shape"]),
                "target": g.metadata.get("target"),
                "loss": g.metadata["loss"],
                "structure": g.metadata.get("structure"),
            },
            "strategy": r.strategy,
            "budget": r.budget,
            "schedule": r.schedule.to_dict(),
        }
        Path(path).write_text(json.dumps(data))


def _budget_bytes(graph: DFGraph, budget: Any) -> float:
    try:
        return budget_bytes(budget, graph)  # a budget below what the graph needs is refused with the least that works
    except BudgetError as exc:
        raise RematError(str(exc)) from None


def least_working_budget(graph: DFGraph, strategy: str, **options: Any) -> tuple[float | None, str]:
    """The least budget (within 0.5 %) at which ``strategy`` finds a schedule, and how that was established.

    Baselines are bisected directly. For the LP/MILP strategies the bisection runs
    on ``eviction_greedy`` (the certified ``ilp`` starts from its schedule, so it
    meets the same budgets); for the others the found budget is confirmed by one
    run of the strategy itself.
    """
    fast = strategy not in _SOLVER_STRATEGIES
    probe = get_strategy(strategy if fast else "eviction_greedy")
    found = least_feasible_budget(graph, lambda b: probe(graph, b, **(options if fast else {})).has_schedule)
    if found is None or fast or strategy == "ilp":
        return found, strategy if fast else "eviction_greedy, whose schedule ilp starts from"
    if get_strategy(strategy)(graph, found, **options).has_schedule:
        return found, f"eviction_greedy, confirmed by {strategy}"
    return None, f"{strategy} found nothing at eviction_greedy's least budget {format_bytes(found)}"


def optimize(
    model: nn.Module,
    sample: Any,
    budget: Any,
    strategy: str = "ilp",
    *,
    target: torch.Tensor | None = None,
    loss: Any = "cross_entropy",
    cost_model: str = "flops",
    leaf_modules: tuple = (),
    **strategy_options: Any,
) -> RematModel:
    """Extract ``model``'s training graph for ``sample``, solve ``strategy`` at ``budget``, wrap the model.

    ``strategy`` is any name of :func:`remat.strategies.strategy_names`, with its
    options as keywords (ILP gets ``time_limit=60`` s unless given). Raises
    :class:`RematError` when the strategy finds no schedule within the budget,
    naming the least budget that works and the least budget any schedule could need.
    """
    from remat.torch.extract import ExtractionError, extract

    if isinstance(sample, (tuple, list)) and sample and all(isinstance(v, int) for v in sample):
        raise RematError("sample must be the model's input batch (tensors), not a shape")
    try:
        graph = extract(model, sample, cost_model=cost_model, loss=loss, target=target, leaf_modules=leaf_modules)
    except ExtractionError as exc:
        if "a sample is the model's input" in str(exc) or "holds no tensor" in str(exc):
            raise RematError(f"sample must be an input batch: {exc}") from None
        raise
    budget_bytes = _budget_bytes(graph, budget)
    if strategy == "ilp":
        strategy_options.setdefault("time_limit", ILP_DEFAULT_TIME_LIMIT)
    result = get_strategy(strategy)(graph, budget_bytes, **strategy_options)
    if not result.has_schedule:
        lower, k = memory_lower_bound(graph)
        least, how = least_working_budget(graph, strategy, **strategy_options)
        works = (f"the least budget that works: {least:.0f} bytes ({format_bytes(least)}, found by {how})"
                 if least is not None else f"no budget up to the no-recomputation peak found ({how})")
        raise RematError(
            f"{strategy} found no schedule for {graph.name} within {budget_bytes:.0f} bytes "
            f"({format_bytes(budget_bytes)}; {result.status}: {result.message}); {works}; no schedule at all "
            f"exists below {lower:.0f} bytes (computing node {graph.names[k]!r}): raise the budget, lower the "
            f"batch, or give the solver more time"
        )
    return RematModel(model, graph, result, tuple(leaf_modules), loss=loss)


def load(path: str | Path, model: nn.Module, *, sample: Any = None, target: Any = None, loss: Any = None,
         leaf_modules: tuple = ()) -> RematModel:
    """Reload a schedule saved by :meth:`RematModel.save` for ``model`` (no solving).

    The graph is re-extracted from the saved input description; give ``sample``
    (and ``target``) when the model was optimized with a sample whose values
    matter, and ``loss`` when it was a callable.
    """
    from remat.result import result_from_schedule
    from remat.torch.extract import extract
    from remat.torch.inputs import example_values

    data = json.loads(Path(path).read_text())
    if data.get("format") != FORMAT:
        raise RematError(f"{path} is not a schedule saved by remat.torch (format {data.get('format')!r})")
    info = data["graph"]
    recorded = str(info["loss"])
    if loss is None:
        if recorded.startswith("callable:"):
            raise RematError(f"{path} was solved with the loss {recorded}: pass the same function as loss=")
        loss = recorded
    if sample is None and info.get("inputs"):
        specs = [InputSpec.from_dict(d) for d in info["inputs"]]
        values = example_values(specs, info["batch_size"], "cpu")
        sample = Sample(**{s.name: v for s, v in zip(specs, values, strict=True) if s.given})
    if target is None and info.get("target"):
        target = example_values([InputSpec.from_dict(info["target"])], info["batch_size"], "cpu")[0]
    if sample is None:
        graph = extract(model, tuple(info["input_shape"]), info["batch_size"], loss=loss, leaf_modules=leaf_modules)
    else:
        graph = extract(model, sample, loss=loss, target=target, leaf_modules=leaf_modules)
    if graph.n != info["n"] or (info["structure"] and graph.metadata.get("structure") != info["structure"]):
        raise RematError(
            f"{path} was solved for model {info['name']!r} ({info['n']} graph nodes, structure {info['structure']}); "
            f"this model gives {graph.n} nodes, structure {graph.metadata.get('structure')}: optimize() it instead"
        )
    schedule = Schedule(np.array(data["schedule"]["R"], bool), np.array(data["schedule"]["S"], bool))
    result = result_from_schedule(data["strategy"], graph, schedule, float(data["budget"]))
    return RematModel(model, graph, result, tuple(leaf_modules), loss=loss)
