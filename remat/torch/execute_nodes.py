"""The statements of an execution plan, one node at a time: forward with saved-tensor tokens, loss, backward.

:class:`NodeComputations` is the part of :class:`remat.torch.execute.ScheduleExecutor`
that computes one register's value; see :mod:`remat.torch.execute` for the whole
picture (tokens, RNG replay, buffers restored on recomputation).
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import torch
import torch.fx as fx

from remat.torch.execute_support import (
    Path,
    _at,
    _Entry,
    _flat,
    _map,
    _nbytes,
    _NodeGraph,
    _Register,
    _rng_state,
    _same_rng,
    _Saved,
    _set_rng_state,
    _storage,
)
from remat.torch.losses import loss_value
from remat.torch.trace import _evaluate, _fetch_attr, _out_of_place


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

