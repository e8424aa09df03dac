"""The statements of an execution plan, one node at a time: forward with saved-tensor tokens, loss, backward.

:class:`NodeComputations` is the part of :class:`remat.torch.execute.ScheduleExecutor`
that computes one register's value; see :mod:`remat.torch.execute` for the whole
picture (tokens, RNG replay, buffers restored on recomputation).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.fx as fx

from remat.torch.errors import ExecutionError
from remat.torch.execute_support import (
    _Entry,
    _NodeGraph,
    _Register,
    _rng_state,
    _same_rng,
    _Saved,
    _set_rng_state,
    _storage,
)
from remat.torch.losses import loss_and_grads
from remat.torch.trace import evaluate, fetch_attr
from remat.torch.tree import Path, at, flatten, map_tensors, nbytes, tensor_bytes, tensors_of

Leaf = Callable[[int, Path, torch.Tensor], torch.Tensor]


def _raw(node: int, path: Path, t: torch.Tensor) -> torch.Tensor:
    return t


class NodeComputations:
    """Mixin of the executor: computes forward, loss and backward registers (uses the executor's state)."""

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

    def _value(self, a: fx.Node, leaf: Leaf, reader: str) -> Any:
        """The value of fx node ``a`` now: registers (their tensors through ``leaf``), aliases re-applied."""
        kind = self.tr.kind[a.name]
        if kind == "input":
            return self._inputs[a.name]
        if kind == "constant":
            return fetch_attr(self.gm, a.target)
        if kind == "graph":
            u = self.ids[a.name]
            return map_tensors(self._reg_of(u, reader).value, lambda p, t: leaf(u, p, t))
        if kind == "aux":
            return self.static[a.name]
        if kind == "alias":
            args = fx.node.map_arg(a.args, lambda b: self._value(b, leaf, reader))
            kwargs = fx.node.map_arg(a.kwargs, lambda b: self._value(b, leaf, reader))
            return evaluate(self.gm, a, args, kwargs)
        args = fx.node.map_arg(a.args, lambda b: self._value(b, _raw, reader))  # dynamic: needs real values
        kwargs = fx.node.map_arg(a.kwargs, lambda b: self._value(b, _raw, reader))
        with torch.no_grad():
            return evaluate(self.gm, a, args, kwargs)

    def _forward(self, u: int) -> _Register:
        node, name = self.fx[u], self.graph.names[u]
        needs = self.backward_of[u] >= 0
        wanted = self.grad_leaves[u] if needs else set()
        entries: dict[tuple[int, Path], tuple[torch.Tensor, tuple[Any, tuple]]] = {}

        def leaf(v: int, path: Path, t: torch.Tensor) -> torch.Tensor:
            if (v, path) not in wanted:
                return t
            if (v, path) not in entries:
                e = _Entry.apply(self._anchor, t)
                entries[v, path] = (e, (torch.autograd.graph.get_gradient_edge(e), (t.shape, t.dtype, t.device)))
            return entries[v, path][0]

        in_ptrs: dict[int, tuple[int, Path, torch.Tensor]] = {}
        for v in self.reads[u]:
            for path, t in flatten(self._reg_of(v, name).value):
                in_ptrs.setdefault(_storage(t), (v, path, t))
        with torch.enable_grad() if needs else torch.no_grad():
            args = fx.node.map_arg(node.args, lambda a: self._value(a, leaf, name))
            kwargs = fx.node.map_arg(node.kwargs, lambda a: self._value(a, leaf, name))
        saved: list[_Saved] = []

        def pack(t: torch.Tensor) -> _Saved:
            saved.append(_Saved(t))
            return saved[-1]

        out = self._run_forward(u, node, args, kwargs, needs, pack)
        outs = list(flatten(out))
        extras: list[torch.Tensor] = []
        if needs:
            extras = self._tokenize(u, saved, in_ptrs, outs)
            self._graphs[u] = _NodeGraph(
                outputs={p: torch.autograd.graph.get_gradient_edge(t) for p, t in outs if t.requires_grad},
                entries=[(key, info) for key, (_, info) in entries.items()],
                params=self.node_params[u],
                saved=saved,
            )
        value = map_tensors(out, lambda p, t: t.detach())
        out_storages = {_storage(t) for _, t in outs}
        extra_bytes = nbytes([t for t in extras if _storage(t) not in out_storages])
        return _Register(u, value, extras, nbytes(value) + extra_bytes)

    def _run_forward(self, u: int, node: fx.Node, args: Any, kwargs: Any, needs: bool, pack: Any) -> Any:
        first = u not in self._rng
        buffers = self.node_buffers[u] if not first else []
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
            out = evaluate(self.gm, node, args, kwargs)
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
        keep = self.extras_in_register[u]
        extra_ptrs = {_storage(saved[i].tensor) for i in self.extra_slots[u] if i < len(saved)} if keep else set()
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
            elif ptr in extra_ptrs:
                h.node, h.extra, h.tensor = u, len(extras), None
                extras.append(t)
        return extras

    def _unpack(self, h: _Saved) -> torch.Tensor:
        if h.tensor is not None:
            return h.tensor
        reg = self._reg_of(h.node, "a backward node")
        if h.extra >= 0:
            return reg.extras[h.extra]
        base = at(reg.value, h.path)
        return base.as_strided(h.size, h.stride, base.storage_offset() + h.offset)

    def _loss_node(self) -> _Register:
        leaves: dict[tuple[int, Path], torch.Tensor] = {}

        def leaf(v: int, path: Path, t: torch.Tensor) -> torch.Tensor:
            if self.backward_of[v] < 0 or not (t.is_floating_point() or t.is_complex()):
                return t
            return leaves.setdefault((v, path), t.detach().requires_grad_())

        with torch.enable_grad():
            output = fx.node.map_arg(self.tr.output_node.args[0], lambda a: self._value(a, leaf, "Loss"))
        keys, wrt = list(leaves), list(leaves.values())
        if self.loss_grad is not None:  # module style: the caller's loss gave dL/d(output)
            flat = [(t, g) for t, g in zip(tensors_of(output), self.loss_grad, strict=True)
                    if g is not None and t.requires_grad]
            grads = list(torch.autograd.grad([t for t, _ in flat], wrt, [g for _, g in flat], allow_unused=True)) \
                if flat and wrt else [None] * len(wrt)
        else:
            value, grads = loss_and_grads(self.loss, output, self._target, wrt)
            if np.isnan(self._loss):
                self._loss = float(value.detach())
        result: dict[int, dict[Path, torch.Tensor]] = {}
        for (v, path), g in zip(keys, grads, strict=True):
            if g is None:
                continue
            if v not in self.from_loss:
                raise ExecutionError(
                    f"the loss reaches output node {self.graph.names[v]!r}, which the loss the graph was extracted "
                    f"with ({self.graph.metadata['loss']}) does not: extract with a loss that reads the same outputs"
                )
            result.setdefault(v, {})[path] = g
        return _Register(self.L, result, [], tensor_bytes([g for slot in result.values() for g in slot.values()]))

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
        if b not in self._done_backward:  # the gradients this statement creates stop being pending (memory meter)
            self._missing_grads -= sum(p.numel() * p.element_size() for p in graph.params if p.grad is None)
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
        return _Register(b, value, [], tensor_bytes([g for slot in value.values() for g in slot.values()]))
