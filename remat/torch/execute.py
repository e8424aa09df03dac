"""Run one PyTorch training step exactly as a rematerialization schedule says.

:class:`ScheduleExecutor` interprets the execution plan of
:func:`remat.schedule.simulate` (Algorithm 1 of the paper, §4.7): ``%r = compute
v`` and ``deallocate %r`` over registers. What a register holds:

* forward node ``u``: its output (detached) and, when ``u``'s backward reads
  ``u`` (edge ``u -> u_backward``), the *extras* autograd saved for it
  (dropout mask, max-pool indices) - exactly what the extractor counts in ``M_u``;
* ``Loss``: ``dL/d(output)`` (the scalar loss is kept aside);
* backward node of ``u``: ``dL/dx`` for each graph-node tensor ``x`` among
  ``u``'s inputs that requires grad (per element of tuple-valued nodes).

Aliases (views, ``getitem``, output objects) hold no register: reading one
re-applies it to the registers it aliases, inside the reader's own autograd
graph; shape-only values are taken from a ``meta`` probe at the graph's batch.

Backward nodes are per-node vector-Jacobian products. Each forward computation
of a node that has a backward node runs under ``enable_grad`` on fresh entry
points (so its autograd graph is that node's alone) inside
``saved_tensors_hooks``: every tensor autograd saves is replaced by a *token*
naming the register it lives in (an input node, the node's own output, or one of
its extras); parameters and small per-channel statistics are kept as they are.
The backward node then calls ``torch.autograd.grad`` on that graph with the
summed incoming gradients, and the tokens resolve to the registers resident *at
that moment* - so a node's graph never keeps a value alive after the plan frees
it, and no forward has to be re-run inside a backward node. Values recomputed
by the plan are bit-identical to their first computation (see below), so
resolving a token to a later copy is exact.

Exactness: forward nodes are first computed in the order the plan gives (id
order for frontier-advancing schedules, the same as plain autograd). The CPU
(and CUDA) RNG state is captured before a node's first computation and restored
around each recomputation when the node consumed random numbers (dropout masks
are reproduced); module buffers (batch-norm running statistics) are saved before
each recomputation and restored after, so they update exactly once per step.
Parameter gradients are accumulated into ``.grad`` on a backward node's first
computation only.

Memory: ``tracked`` is the measured bytes of the constant part (input, target,
parameters, their gradients, buffers) plus the bytes of every live register,
sampled after each compute statement and at each stage start - the quantities
of ``simulate()``'s ``U[t, k]``; the executor checks them statement by statement
(``StepResult.accounting_mismatches``), so ``tracked_peak`` equals the
predicted peak exactly for graphs from :func:`remat.torch.extract.extract`.
``live_peak`` (optional, :class:`~remat.torch.memory.LiveTensorMeter`) is the
real tensor storage alive at once: the constant part as allocated plus every
storage an op returned during the step; parameter gradients that ``zero_grad()``
set to None count from the step's start, as the graph holds them (a backward
statement's own gradients stop pending when it begins, so none is counted
twice). ``live_between_peak`` is the same meter read between statements, where
``simulate()``'s ``U`` is defined: it equals the prediction up to the gradient
registers of an ``add``'s inputs sharing one tensor (the graph counts each).
``live_peak`` adds what lives only inside one statement - the VJP's
intermediates (attention backward's T x T matrices), summed incoming gradients,
the loss - and, when ``.grad`` already exists (``set_to_none=False``), the fresh
gradient before ``add_``: the same transients plain autograd has.

Measured (``tests/test_zoo_execution.py``): between statements every zoo model is
within 0.1 % of the prediction; ``benchmarks/vs_pytorch.py`` reports both peaks.
CUDA runs also report ``torch.cuda.max_memory_allocated`` (allocator rounding to
512-byte blocks and cuDNN workspace come on top).
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

import torch
import torch.fx as fx
from torch import nn

from remat.graph import DFGraph
from remat.schedule import Compute, Schedule, ScheduleError, simulate
from remat.torch.execute_nodes import NodeComputations
from remat.torch.execute_support import (
    ExecutionError,
    StepOutOfMemory,
    StepResult,
    _check_graph,
    _check_model,
    _no_inplace_modules,
    _NodeGraph,
    _oom,
    _Register,
    _storage,
    autograd_step,
    graph_inputs,
    random_batch,
)
from remat.torch.inputs import InputSpec, as_sample, bind_call
from remat.torch.losses import resolve_loss
from remat.torch.memory import LiveTensorMeter, cuda_peak
from remat.torch.trace import fetch_attr, trace
from remat.torch.tree import nbytes, tensors_of

__all__ = [
    "ExecutionError",
    "ScheduleExecutor",
    "StepOutOfMemory",
    "StepResult",
    "autograd_step",
    "random_batch",
]


class ScheduleExecutor(NodeComputations):
    """Runs training steps of ``model`` under ``schedule`` for ``graph`` (see the module docstring).

    Everything that can be checked before computing is checked here: the graph
    comes from the PyTorch front end, the schedule has the graph's shape and is
    valid under ``simulate()``, and the model traces to the graph's nodes.
    ``loss`` is needed when the graph was extracted with a callable loss (the
    graph records only its name); ``leaf_modules`` must be those of the extraction.
    """

    def __init__(
        self,
        model: nn.Module,
        graph: DFGraph,
        schedule: Schedule,
        *,
        loss: Any = None,
        check_accounting: bool = True,
        leaf_modules: tuple = (),
    ) -> None:
        _check_graph(graph)
        if not isinstance(schedule, Schedule):
            raise ExecutionError(f"schedule must be a remat.schedule.Schedule, got {type(schedule).__name__}")
        if schedule.n != graph.n:
            raise ExecutionError(
                f"schedule has {schedule.n} columns but graph {graph.name!r} has {graph.n} nodes: "
                f"solve the schedule for this graph"
            )
        try:
            sim = simulate(graph, schedule)
        except ScheduleError as exc:
            raise ExecutionError(f"schedule does not fit graph {graph.name!r}: {exc}") from exc
        if not sim.valid:
            raise ExecutionError(f"schedule is invalid for graph {graph.name!r}: {sim.violation}; nothing was run")
        self.model, self.graph, self.schedule, self.simulation = model, graph, schedule, sim
        self.check_accounting = check_accounting
        recorded = str(graph.metadata["loss"])
        if loss is None and recorded.startswith("callable:"):
            raise ExecutionError(
                f"graph {graph.name!r} was extracted with the loss {recorded}: pass the same function as loss="
            )
        self.loss = resolve_loss(loss if loss is not None else recorded)
        self._build(model, graph, tuple(leaf_modules))
        self.steps = 0

    # ------------------------------------------------------------------ set-up
    def _build(self, model: nn.Module, graph: DFGraph, leaf_modules: tuple) -> None:
        from remat.torch.probe import probe

        md = graph.metadata
        self.specs = graph_inputs(graph)
        self.target_spec = InputSpec.from_dict(md["target"]) if md.get("target") else None
        dtype = getattr(torch, md.get("dtype", "float32"))
        # The graph does not record extract()'s leaf_modules types, so the caller passes the same ones again.
        tr = trace(model, self.specs, dtype=dtype, name=graph.name, leaf_modules=leaf_modules)
        st = probe(tr, graph.batch_size, self.loss, self.target_spec)
        L = graph.loss
        _check_model(tr, st, graph)
        self.tr, self.gm, self.L, self.static = tr, tr.gm, L, st.static
        nodes = {n.name: n for n in tr.gm.graph.nodes}
        self.fx = [nodes[graph.names[u]] for u in range(L)]
        self.ids = {graph.names[u]: u for u in range(L)}
        self.backward_of = [int(b) for b in md["backward_of"]]
        self.forward_of = [int(f) for f in md["forward_of"]]
        edges = {(int(a), int(b)) for a, b in graph.edges}
        self.extras_in_register = [self.backward_of[u] >= 0 and (u, self.backward_of[u]) in edges for u in range(L)]
        slots = md.get("fx_extra_slots", {})
        self.extra_slots = [set(slots.get(graph.names[u], [])) for u in range(L)]
        self.reads = [[self.ids[s] for s in info.inputs] for info in st.nodes]
        self.grad_leaves = [{(self.ids[s], p) for s, p in info.grad_leaves} for info in st.nodes]
        self.from_loss = {self.forward_of[int(b)] for a, b in graph.edges if int(a) == L and int(b) > L}
        self.placeholders = [n.name for n in tr.placeholders]
        self.params = dict(model.named_parameters())
        self.node_params, self.node_buffers = [], []
        for node in self.fx:
            params, buffers = self._state_of(node)
            self.node_params.append(params)
            self.node_buffers.append(buffers)
        first = next(iter(model.parameters()), None)
        self.device = first.device if first is not None else torch.device("cpu")
        self.constants = [v for n in tr.gm.graph.nodes if n.op == "get_attr"
                          for v in tensors_of(fetch_attr(tr.gm, n.target))]
        self._anchor = torch.zeros((), device=self.device, requires_grad=True)

    def _state_of(self, node: fx.Node) -> tuple[list[nn.Parameter], list[torch.Tensor]]:
        """The trainable parameters and the buffers ``node`` uses (its module's, and those it reads via aliases)."""
        params: dict[int, Any] = {}
        buffers: dict[int, torch.Tensor] = {}
        if node.op == "call_module":
            mod = self.gm.get_submodule(node.target)
            params.update((id(p), p) for p in mod.parameters() if p.requires_grad)
            buffers.update((id(b), b) for b in mod.buffers() if b is not None)
        stack, seen = list(node.all_input_nodes), set()
        while stack:
            a = stack.pop()
            if a.name in seen:
                continue
            seen.add(a.name)
            if a.op == "get_attr":
                v = fetch_attr(self.gm, a.target)
                if isinstance(v, nn.Parameter):
                    if v.requires_grad:
                        params.setdefault(id(v), v)
                elif isinstance(v, torch.Tensor):
                    buffers.setdefault(id(v), v)
            elif self.tr.kind.get(a.name) in ("alias", "dynamic"):
                stack.extend(a.all_input_nodes)
        return list(params.values()), list(buffers.values())

    # ------------------------------------------------------------------ one step
    def step(self, sample: Any, target: Any = None, *, measure_live: bool = False) -> StepResult:
        """One training step on ``sample`` (as the model takes it) and ``target``: the loss, gradients in ``.grad``."""
        self.begin(sample, target, loss_grad_later=False)
        pending = lambda: self._missing_grads  # noqa: E731
        meter = LiveTensorMeter(self._existing, pending) if measure_live else None
        self._meter = meter
        try:
            with _no_inplace_modules(self.model), meter or contextlib.nullcontext():
                self.advance(len(self.simulation.plan))
        except BaseException:
            self.abort()
            raise
        finally:
            self._meter = None
        if meter is None:
            return self.finish()
        return self.finish(self._const_live + meter.peak, self._const_live + meter.sampled_peak)

    def begin(self, sample: Any, target: Any = None, *, loss_grad_later: bool = False) -> None:
        """Start a step on ``sample``; with ``loss_grad_later`` the loss gradient arrives later (``loss_grad``)."""
        s = as_sample(sample)
        values = bind_call(self.specs, s.args, s.kwargs, self.graph.batch_size, "the batch")
        self._check_target(target, loss_grad_later)
        tensors = [v for v in values if isinstance(v, torch.Tensor)] + tensors_of(target)
        if any(t.device != self.device for t in tensors):
            raise ExecutionError(f"inputs and target must be on the model's device {self.device}")
        # In module style the caller holds the target; the graph counts it all the same.
        const = sum(s.nbytes(self.graph.batch_size) for s in self.specs)
        const += nbytes(target) if target is not None or not loss_grad_later else self._target_bytes()
        const += sum(p.numel() * p.element_size() * (2 if p.requires_grad else 1) for p in self.params.values())
        const += sum(b.numel() * b.element_size() for b in self.model.buffers())
        grads = [p.grad for p in self.params.values() if p.grad is not None]
        self._existing = [*self.params.values(), *grads, *self.model.buffers(), *tensors_of(target), *self.constants,
                          *(v for v in values if isinstance(v, torch.Tensor))]
        self._const_ptrs = {_storage(t) for t in self._existing}
        self._inputs = dict(zip(self.placeholders, values, strict=True))
        self._target, self._const = target, const
        # Gradients not yet allocated are counted by the live meter when the step creates them.
        missing = sum(p.numel() * p.element_size() for p in self.params.values() if p.requires_grad and p.grad is None)
        self._const_live, self._missing_grads = const - missing, missing
        self.loss_grad: list | None = None
        self._regs: dict[int, _Register] = {}
        self._node_reg: dict[int, int] = {}
        self._graphs: dict[int, _NodeGraph] = {}
        self._rng: dict[int, Any] = {}
        self._done_backward: set[int] = set()
        self._loss = float("nan")
        self._meter: LiveTensorMeter | None = None  # step() sets it when measuring
        self._pos, self._live, self._peak, self._stage, self._computes = 0, 0, const, -1, 0
        self._mismatches: list[str] = []
        if const != self.graph.constant_memory:
            self._mismatches.append(f"constant part: measured {const} bytes, graph says {self.graph.constant_memory}")
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        self._start = time.perf_counter()

    def _target_bytes(self) -> int:
        if self.loss.named:
            dtype = torch.int64 if self.loss.name != "mse" else getattr(torch, self.graph.metadata["dtype"])
            return math.prod(self._target_shape()) * torch.empty((), dtype=dtype).element_size()
        return self.target_spec.nbytes(self.graph.batch_size) if self.target_spec is not None else 0

    def _target_shape(self) -> tuple[int, ...]:
        from remat.torch.losses import loss_target

        return tuple(loss_target(self.loss.name, torch.empty(self.graph.metadata["output_shape"], device="meta")).shape)

    def _check_target(self, target: Any, later: bool) -> None:
        if later and target is None:
            return
        if self.loss.named:
            want = self._target_shape()
            if not isinstance(target, torch.Tensor) or tuple(target.shape) != want:
                got = tuple(target.shape) if isinstance(target, torch.Tensor) else type(target).__name__
                raise ExecutionError(f"target has shape {got}, the {self.loss.name} loss needs {want}")
        elif self.target_spec is not None and self.target_spec.tensor:
            spec = self.target_spec
            want = spec.full_shape(self.graph.batch_size)
            if not isinstance(target, torch.Tensor) or tuple(target.shape) != want:
                got = tuple(target.shape) if isinstance(target, torch.Tensor) else type(target).__name__
                raise ExecutionError(f"target has shape {got}, the graph was extracted with a target of {want}")

    def finish(self, live_peak: int | None = None, live_between_peak: int | None = None) -> StepResult:
        """End the step after the whole plan ran and report it."""
        if self._regs:
            raise RuntimeError(f"plan left registers {sorted(self._regs)} allocated at the end of the step")
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        wall = time.perf_counter() - self._start
        self.abort()
        self.steps += 1
        return StepResult(
            loss=self._loss,
            grads={k: p.grad for k, p in self.params.items() if p.grad is not None},
            predicted_peak=self.simulation.peak_memory,
            tracked_peak=self._peak,
            live_peak=live_peak,
            cuda_peak=cuda_peak(self.device),
            wall_time=wall,
            computes=self._computes,
            recomputes=self._computes - self.graph.n,
            accounting_mismatches=self._mismatches,
            live_between_peak=live_between_peak,
        )

    def abort(self) -> None:
        """Drop every register and node graph of the current step."""
        self._regs, self._node_reg, self._graphs = {}, {}, {}
        self.loss_grad = None

    @property
    def loss_position(self) -> int:
        """Index in the plan of the first computation of the loss node."""
        L = self.L
        return next(i for i, s in enumerate(self.simulation.plan) if isinstance(s, Compute) and s.node == L)

    def output(self) -> Any:
        """The model output as currently resident (call after advancing to ``loss_position``)."""
        return fx.node.map_arg(self.tr.output_node.args[0], lambda a: self._value(a, lambda v, p, t: t, "the caller"))

    def advance(self, stop: int) -> None:
        """Execute plan statements from the current position up to (not including) ``stop``."""
        g, sim = self.graph, self.simulation
        plan, M, S, const = sim.plan, g.memory, self.schedule.S, self._const
        for pos in range(self._pos, stop):
            st = plan[pos]
            self._pos = pos + 1
            if not isinstance(st, Compute):
                reg = self._regs.pop(st.register)
                self._live -= reg.nbytes
                if self._node_reg.get(st.node) == st.register:
                    del self._node_reg[st.node]
                del reg
                if self._meter is not None:
                    self._meter.sample()
                continue
            t, k = st.stage, st.node
            if t != self._stage:
                self._stage, self._peak = t, max(self._peak, const + self._live)
                want = g.constant_memory + int((S[t] * M).sum())
                if self.check_accounting and const + self._live != want:
                    self._mismatches.append(f"start of stage {t}: {const + self._live} bytes live, simulate(): {want}")
            try:
                reg = self._compute(k)
            except Exception as exc:
                if not _oom(exc):
                    raise
                raise StepOutOfMemory(
                    f"out of memory in step {self.steps} at plan position {pos + 1}/{len(plan)} (stage {t}, computing "
                    f"node {k} {g.names[k]!r}) with {const + self._live} bytes tracked live; the schedule predicts a "
                    f"peak of {sim.peak_memory:.0f} bytes: solve for a smaller budget or batch"
                ) from exc
            self._computes += 1
            self._regs[st.register] = reg
            self._node_reg[k] = st.register
            self._live += reg.nbytes
            self._peak = max(self._peak, const + self._live)
            if self._meter is not None:
                self._meter.sample()
            if self.check_accounting:
                if reg.nbytes != M[k]:
                    self._mismatches.append(f"node {k} {g.names[k]!r}: register {reg.nbytes} bytes, graph {M[k]}")
                if const + self._live != sim.memory[t, k]:
                    self._mismatches.append(f"U[{t},{k}]: {const + self._live} live, simulate(): {sim.memory[t, k]}")
