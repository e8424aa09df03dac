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

import numpy as np
import torch
import torch.fx as fx
from torch import nn

from remat.graph import DFGraph
from remat.schedule import Compute, Schedule, ScheduleError, simulate
from remat.torch.execute_support import (
    ExecutionError,
    Path,
    StepOutOfMemory,
    StepResult,
    _at,
    _check_graph,
    _check_model,
    _Entry,
    _flat,
    _map,
    _nbytes,
    _no_inplace_modules,
    _NodeGraph,
    _oom,
    _Register,
    _rng_state,
    _same_rng,
    _Saved,
    _set_rng_state,
    _storage,
    autograd_step,
    random_batch,
)
from remat.torch.losses import loss_target, loss_value
from remat.torch.memory import LiveTensorMeter, cuda_peak
from remat.torch.trace import _evaluate, _fetch_attr, _out_of_place, trace

__all__ = [
    "ExecutionError",
    "ScheduleExecutor",
    "StepOutOfMemory",
    "StepResult",
    "autograd_step",
    "execute_step",
    "random_batch",
    "train",
]


class ScheduleExecutor:
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

    # ------------------------------------------------------------------ statements
    def _compute(self, k: int) -> _Register:
        if k < self.L:
            return self._forward(k)
        if k == self.L:
            return self._loss_node()
        return self._backward(self.forward_of[k], k)

    def _reg_of(self, node: int, reader: str) -> _Register:
        r = self._node_reg.get(node)
        if r is None:
            raise RuntimeError(
                f"{reader} reads node {node} {self.graph.names[node]!r}, which is not resident: "
                f"the graph lacks that edge (extraction bug)"
            )
        return self._regs[r]

    def _value(self, a: fx.Node, reader: str) -> Any:
        kind = self.tr.kind[a.name]
        if kind == "input":
            return self._x
        if kind == "constant":
            return _fetch_attr(self.gm, a.target)
        if kind == "graph":
            return self._reg_of(self.ids[a.name], reader).value
        if kind == "alias":
            return self._value(a.args[0], reader)[a.args[1]]
        return self._aux[a.name]

    def _eval_aux(self, node: fx.Node) -> Any:
        target, _, kwargs = _out_of_place(node)
        args = fx.node.map_arg(node.args, lambda a: self._value(a, node.name))
        kwargs = fx.node.map_arg(kwargs, lambda a: self._value(a, node.name))
        with torch.no_grad():
            return _evaluate(self.gm, node, args, kwargs, target)

    def _forward(self, u: int) -> _Register:
        node, name = self.fx[u], self.graph.names[u]
        needs = self.backward_of[u] >= 0
        inputs: dict[str, Any] = {}
        entries: list[tuple[tuple[int, Path], tuple[Any, tuple]]] = []
        in_ptrs: dict[int, tuple[int, Path, torch.Tensor]] = {}
        with torch.enable_grad() if needs else torch.no_grad():
            for a in node.all_input_nodes:
                value, ref = self._value(a, name), self._resolve(a)
                if ref is not None:
                    for path, t in _flat(value, ref[1]):
                        in_ptrs.setdefault(_storage(t), (ref[0], path, t))
                    if needs and self.backward_of[ref[0]] >= 0:
                        value = _map(value, lambda p, t, ref=ref: self._entry(t, (ref[0], (*ref[1], *p)), entries))
                inputs[a.name] = value
        target, _, kwargs = _out_of_place(node)
        args = fx.node.map_arg(node.args, lambda a: inputs[a.name])
        kwargs = fx.node.map_arg(kwargs, lambda a: inputs[a.name])
        saved: list[_Saved] = []

        def pack(t: torch.Tensor) -> _Saved:
            saved.append(_Saved(t))
            return saved[-1]

        out = self._run_forward(u, node, args, kwargs, target, needs, pack)
        outs = list(_flat(out))
        extras: list[torch.Tensor] = []
        if needs:
            extras = self._tokenize(u, saved, in_ptrs, outs)
            self._graphs[u] = _NodeGraph(
                outputs={p: torch.autograd.graph.get_gradient_edge(t) for p, t in outs if t.requires_grad},
                entries=entries,
                params=self.node_params[u],
                saved=saved,
            )
        value = _map(out, lambda p, t: t.detach())
        extra_bytes = sum(_nbytes(t) for t in {_storage(t): t for t in extras}.values())
        if u not in self._aux_done:
            self._aux_done.add(u)
            for a in self.aux_after.get(u, []):
                self._aux[a.name] = self._eval_aux(a)
        return _Register(u, value, extras, sum(_nbytes(t) for _, t in outs) + extra_bytes)

    def _entry(self, t: torch.Tensor, key: tuple[int, Path], entries: list) -> torch.Tensor:
        e = _Entry.apply(self._anchor, t.detach())
        entries.append((key, (torch.autograd.graph.get_gradient_edge(e), (t.shape, t.dtype, t.device))))
        return e

    def _run_forward(self, u: int, node: fx.Node, args: Any, kwargs: Any, target: Any, needs: bool, pack: Any) -> Any:
        first = u not in self._rng
        module = self.gm.get_submodule(node.target) if node.op == "call_module" else None
        buffers = [b for b in module.buffers() if b is not None] if module is not None and not first else []
        kept = [b.clone() for b in buffers]
        with contextlib.ExitStack() as stack:
            if first:
                before = _rng_state(self.device)
            elif self._rng[u] is not None:
                stack.enter_context(torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []))
                _set_rng_state(self.device, self._rng[u])
            stack.enter_context(torch.enable_grad() if needs else torch.no_grad())
            if needs:
                stack.enter_context(torch.autograd.graph.saved_tensors_hooks(pack, self._unpack))
            out = _evaluate(self.gm, node, args, kwargs, target)
        if first:
            self._rng[u] = before if not _same_rng(before, _rng_state(self.device)) else None
        with torch.no_grad():
            for b, k in zip(buffers, kept, strict=True):
                b.copy_(k)  # a recomputation must not update running statistics a second time
        return out

    def _tokenize(self, u: int, saved: list[_Saved], in_ptrs: dict, outs: list) -> list[torch.Tensor]:
        """Replace saved tensors that live in registers by tokens; return the extras the register keeps."""
        out_ptrs = {}
        for path, t in outs:
            out_ptrs.setdefault(_storage(t), (u, path, t))
        extras: list[torch.Tensor] = []
        for h in saved:
            t = h.tensor
            ptr = _storage(t)
            if t.numel() == 0 or ptr in self._const_ptrs:
                continue
            hit = in_ptrs.get(ptr) or out_ptrs.get(ptr)
            if hit is not None:
                h.node, h.path, base = hit
                h.size, h.stride, h.offset = t.size(), t.stride(), t.storage_offset() - base.storage_offset()
                h.tensor = None
            elif self.extras_in_register[u] and t.dim() >= 1 and t.shape[0] == self.graph.batch_size:
                h.node, h.extra, h.tensor = u, len(extras), None
                extras.append(t)
        return extras

    def _unpack(self, h: _Saved) -> torch.Tensor:
        if h.tensor is not None:
            return h.tensor
        reg = self._reg_of(h.node, "a backward node")
        if h.extra >= 0:
            return reg.extras[h.extra]
        base = _at(reg.value, h.path)
        return base.as_strided(h.size, h.stride, base.storage_offset() + h.offset)

    def _loss_node(self) -> _Register:
        o, path = self.out_ref
        if self.loss_grad is not None:
            return _Register(self.L, {o: {path: self.loss_grad}}, [], _nbytes(self.loss_grad))
        out = _at(self._reg_of(o, "Loss").value, path).detach().requires_grad_()
        with torch.enable_grad():
            loss = loss_value(self.loss_kind, out, self._target)
            (grad,) = torch.autograd.grad(loss, out)
        if np.isnan(self._loss):
            self._loss = float(loss.detach())
        return _Register(self.L, {o: {path: grad}}, [], _nbytes(grad))

    def _backward(self, u: int, b: int) -> _Register:
        graph = self._graphs[u]
        incoming: dict[Path, torch.Tensor] = {}
        for d in self.graph.deps[b]:
            if d < self.L:
                continue
            for path, g in self._reg_of(int(d), self.graph.names[b]).value.get(u, {}).items():
                incoming[path] = incoming[path] + g if path in incoming else g
        outs = [(graph.outputs[p], g) for p, g in incoming.items() if p in graph.outputs]
        inputs = [edge for _, (edge, _) in graph.entries] + list(graph.params)
        if outs and inputs:
            res = torch.autograd.grad(
                [e for e, _ in outs], inputs, [g for _, g in outs], retain_graph=True, allow_unused=True
            )
        else:
            res = (None,) * len(inputs)
        value: dict[int, dict[Path, torch.Tensor]] = {}
        for ((p, path), (_, (shape, dtype, device))), g in zip(graph.entries, res, strict=False):
            g = torch.zeros(shape, dtype=dtype, device=device) if g is None else g
            slot = value.setdefault(p, {})
            slot[path] = slot[path] + g if path in slot else g
        if b not in self._done_backward:
            self._done_backward.add(b)
            with torch.no_grad():
                taken = {_storage(g) for _, g in outs} | {_storage(g) for slot in value.values() for g in slot.values()}
                for param, g in zip(graph.params, res[len(graph.entries) :], strict=True):
                    if g is None:
                        continue
                    if param.grad is None:
                        # Like AccumulateGrad: take a fresh gradient over, copy one that aliases another value.
                        param.grad = g.clone() if _storage(g) in taken else g
                        taken.add(_storage(g))
                    else:
                        param.grad.add_(g)
        return _Register(b, value, [], sum(_nbytes(g) for slot in value.values() for g in slot.values()))


def execute_step(
    model: nn.Module, graph: DFGraph, schedule: Schedule, x: torch.Tensor, target: torch.Tensor, **options: Any
) -> StepResult:
    """One training step of ``model`` on ``(x, target)`` under ``schedule`` (see :class:`ScheduleExecutor`)."""
    measure_live = options.pop("measure_live", False)
    return ScheduleExecutor(model, graph, schedule, **options).step(x, target, measure_live=measure_live)


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
) -> list[dict[str, Any]]:
    """Train ``model`` for ``steps`` SGD steps on random data, each step run under ``schedule``.

    The data are a fixed synthetic set of 8 random batches (seeded), cycled, so
    the loss goes down. ``sample_shape``/``batch_size`` default to the graph's and
    must match it when given. Returns one dict per step (loss, step time, the
    executor's tracked and predicted peak bytes); a tqdm bar shows them live.
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
    executor = ScheduleExecutor(model, graph, schedule)
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
