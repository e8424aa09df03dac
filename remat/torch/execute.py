"""Run one PyTorch training step exactly as a rematerialization schedule says.

:class:`ScheduleExecutor` interprets the execution plan of
:func:`remat.schedule.simulate` (Algorithm 1 of the paper, §4.7): ``%r = compute
v`` and ``deallocate %r`` over registers. What a register holds:

* forward node ``u``: its output (detached) and, when ``u``'s backward reads
  ``u`` (edge ``u -> u_backward``), the *extras* autograd saved for it
  (dropout mask, max-pool indices) - exactly what the extractor counts in ``M_u``;
* ``Loss``: ``dL/d(output)`` (the scalar loss is kept aside);
* backward node of ``u``: ``dL/dx`` for each input ``x`` of ``u`` that has a
  backward node (tuple-valued inputs per element).

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
``live_peak`` (optional, :class:`~remat.torch.memory.LiveTensorMeter`)
is the real tensor storage alive at once (constant part as allocated plus every
storage an op returned during the step). It differs from the prediction by:

* views (``flatten``, ``view``) share their base's storage, which the graph
  counts twice - measured lower;
* parameter gradients: the graph holds them for the whole step; the executor,
  like ``AccumulateGrad`` after ``zero_grad()`` (``set_to_none=True``), adopts the
  first gradient of each parameter when its backward node runs - measured lower
  early in the backward pass. When ``.grad`` already exists
  (``set_to_none=False``) the fresh gradient is a temporary of the parameter's
  size before ``add_`` - measured higher by up to the largest parameter
  (e.g. +38 % for VGG16 at 32x32, batch 2, whose 25088x4096 classifier weight
  dwarfs the activations; the same transient exists in plain autograd);
* transient workspace inside one statement - the summed incoming gradients of a
  node with several users, the VJP's intermediates, the loss - is in no ``M_i``.

Measured: MobileNet at 32x32, batch 2, checkpoint_last (3323 recomputations):
live 1.008 x predicted; the test net of ``tests/test_executor.py``: within 5 %.
CUDA runs also report ``torch.cuda.max_memory_allocated`` (allocator rounding to
512-byte blocks and cuDNN workspace come on top).
"""

from __future__ import annotations

import contextlib
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
    _at,
    _check_graph,
    _check_model,
    _nbytes,
    _no_inplace_modules,
    _NodeGraph,
    _oom,
    _Register,
    _storage,
    autograd_step,
    random_batch,
)
from remat.torch.losses import loss_target
from remat.torch.memory import LiveTensorMeter, cuda_peak
from remat.torch.trace import _fetch_attr, trace

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
    """

    def __init__(
        self,
        model: nn.Module,
        graph: DFGraph,
        schedule: Schedule,
        *,
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
        self.loss_kind = graph.metadata["loss"]
        self._build(model, graph, tuple(leaf_modules))
        self.steps = 0

    # ------------------------------------------------------------------ set-up
    def _build(self, model: nn.Module, graph: DFGraph, leaf_modules: tuple) -> None:
        from remat.torch.extract import probe

        md = graph.metadata
        shape = tuple(md["input_shape"])
        # The graph does not record extract()'s leaf_modules, so the caller passes the same ones again.
        tr = trace(model, shape, name=graph.name, leaf_modules=leaf_modules)
        st = probe(tr, graph.batch_size, self.loss_kind)
        L = graph.loss
        _check_model(tr, st, graph)
        self.tr, self.gm, self.L = tr, tr.gm, L
        nodes = {n.name: n for n in tr.gm.graph.nodes}
        self.fx = [nodes[graph.names[u]] for u in range(L)]
        self.ids = {graph.names[u]: u for u in range(L)}
        self.backward_of = [int(b) for b in md["backward_of"]]
        self.forward_of = [int(f) for f in md["forward_of"]]
        edges = {(int(a), int(b)) for a, b in graph.edges}
        self.extras_in_register = [self.backward_of[u] >= 0 and (u, self.backward_of[u]) in edges for u in range(L)]
        self.out_ref = self._resolve(tr.output_node.args[0])
        self.aux_after: dict[int, list[fx.Node]] = {}
        for name, after in md.get("fx_aux", {}).items():
            self.aux_after.setdefault(int(after), []).append(nodes[name])
        self.params = dict(model.named_parameters())
        param_ids = {id(p) for p in self.params.values()}
        self.node_params: list[list[nn.Parameter]] = []
        for node in self.fx:
            ps: list[nn.Parameter] = []
            if node.op == "call_module":
                ps = [p for p in tr.gm.get_submodule(node.target).parameters() if p.requires_grad]
            for a in node.all_input_nodes:
                if a.op == "get_attr":
                    v = _fetch_attr(tr.gm, a.target)
                    if isinstance(v, nn.Parameter) and v.requires_grad and id(v) in param_ids:
                        ps.append(v)
            self.node_params.append(list({id(p): p for p in ps}.values()))
        first = next(iter(model.parameters()), None)
        self.device = first.device if first is not None else torch.device("cpu")
        self.input_shape = (graph.batch_size, *shape)
        self.target_shape = tuple(loss_target(self.loss_kind, torch.empty(md["output_shape"], device="meta")).shape)
        self._anchor = torch.zeros((), device=self.device, requires_grad=True)

    def _resolve(self, a: Any) -> tuple[int, tuple[int, ...]] | None:
        """The graph node (and element path) an fx value is, or None for inputs, constants and aux values."""
        if not isinstance(a, fx.Node):
            return None
        kind = self.tr.kind.get(a.name)
        if kind == "graph":
            return self.ids[a.name], ()
        if kind == "alias":
            ref = self._resolve(a.args[0])
            return None if ref is None else (ref[0], (*ref[1], int(a.args[1])))
        return None

    # ------------------------------------------------------------------ one step
    def step(self, x: torch.Tensor, target: torch.Tensor, *, measure_live: bool = False) -> StepResult:
        """Run one training step on batch ``(x, target)``: the loss, and gradients accumulated into ``.grad``."""
        self.begin(x, target)
        meter = LiveTensorMeter(self._existing) if measure_live else contextlib.nullcontext()
        try:
            with _no_inplace_modules(self.model), meter:
                self.advance(len(self.simulation.plan))
        except BaseException:
            self.abort()
            raise
        return self.finish(self._const_live + meter.peak if measure_live else None)

    def begin(self, x: torch.Tensor, target: torch.Tensor | None) -> None:
        """Start a step on ``x``; ``target`` None means the loss gradient arrives later (see ``loss_grad``)."""
        self._check_batch(x, target)
        if target is None:
            target = torch.empty(self.target_shape, dtype=torch.int64 if self.loss_kind != "mse" else x.dtype)
        const = _nbytes(x) + _nbytes(target)
        const += sum(_nbytes(p) * (2 if p.requires_grad else 1) for p in self.params.values())
        const += sum(_nbytes(b) for b in self.model.buffers())
        grads = [p.grad for p in self.params.values() if p.grad is not None]
        self._existing = [*self.params.values(), *grads, *self.model.buffers(), x, target]
        self._const_ptrs = {_storage(t) for t in self._existing}
        self._x, self._target, self._const = x, target, const
        # Gradients not yet allocated are counted by the live meter when the step creates them.
        self._const_live = const - sum(_nbytes(p) for p in self.params.values() if p.requires_grad and p.grad is None)
        self.loss_grad: torch.Tensor | None = None
        self._regs: dict[int, _Register] = {}
        self._node_reg: dict[int, int] = {}
        self._graphs: dict[int, _NodeGraph] = {}
        self._rng: dict[int, Any] = {}
        self._done_backward: set[int] = set()
        self._aux: dict[str, Any] = {}
        self._aux_done: set[int] = set()
        self._loss = float("nan")
        self._pos, self._live, self._peak, self._stage, self._computes = 0, 0, const, -1, 0
        self._mismatches: list[str] = []
        if const != self.graph.constant_memory:
            self._mismatches.append(f"constant part: measured {const} bytes, graph says {self.graph.constant_memory}")
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        self._start = time.perf_counter()
        with _no_inplace_modules(self.model):
            for node in self.aux_after.get(-1, []):
                self._aux[node.name] = self._eval_aux(node)

    def finish(self, live_peak: int | None = None) -> StepResult:
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

    def output(self) -> torch.Tensor:
        """The model output as currently resident (call after advancing to ``loss_position``)."""
        o, path = self.out_ref
        return _at(self._reg_of(o, "the caller").value, path)

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
            if self.check_accounting:
                if reg.nbytes != M[k]:
                    self._mismatches.append(f"node {k} {g.names[k]!r}: register {reg.nbytes} bytes, graph {M[k]}")
                if const + self._live != sim.memory[t, k]:
                    self._mismatches.append(f"U[{t},{k}]: {const + self._live} live, simulate(): {sim.memory[t, k]}")

    def _check_batch(self, x: torch.Tensor, target: torch.Tensor | None) -> None:
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != self.input_shape:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ExecutionError(
                f"input batch has shape {got}, the graph was extracted for {self.input_shape}: extract the graph "
                f"(or graph.with_batch_size(B) and re-solve) for this batch"
            )
        if target is not None and (not isinstance(target, torch.Tensor) or tuple(target.shape) != self.target_shape):
            got = tuple(target.shape) if isinstance(target, torch.Tensor) else type(target).__name__
            raise ExecutionError(f"target has shape {got}, the {self.loss_kind} loss needs {self.target_shape}")
        if x.device != self.device or (target is not None and target.device != self.device):
            raise ExecutionError(f"input and target must be on the model's device {self.device}")
