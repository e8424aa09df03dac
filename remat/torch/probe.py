"""One meta walk of a traced model: per node, what it outputs, what it reads and what autograd saves for it.

:func:`probe` is the measurement behind :mod:`remat.torch.extract` (which probes
at the batch and at twice the batch) and the executor's own consistency check.
Saved tensors are classified by their storage (see the extractor's docstring).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from remat.torch.errors import ExtractionError
from remat.torch.inputs import InputSpec
from remat.torch.losses import example_target, loss_and_grads, resolve_loss
from remat.torch.trace import Trace
from remat.torch.tree import Path, nbytes, storage_key, tensor_bytes, tensors_of
from remat.torch.walk import NodeCall, walk

__all__ = ["NodeInfo", "Structure", "probe"]


@dataclass
class NodeInfo:
    """What one forward node produces and what its backward reads, at one batch size."""

    name: str
    op: str
    inputs: list[str]  # graph nodes it reads, distinct, in argument order
    grad_leaves: list[tuple[str, Path]]  # graph-node tensors it reads that require grad: its backward's outputs
    saved_inputs: list[str]  # graph nodes autograd saves for the backward
    saved_output: bool
    requires_grad: bool
    out_bytes: int
    extra_slots: list[tuple[int, int]]  # (position in the save order, bytes) of its own saved tensors
    grad_bytes: int


@dataclass
class Structure:
    """The graph structure from one meta walk: nodes in fx order, the output's sources, the loss, constants."""

    nodes: list[NodeInfo]
    outputs: list[str]  # graph nodes the model output is made of
    loss_grads: dict[tuple[str, Path], int]  # bytes of the loss gradient per graph-node tensor it reaches
    output_shape: tuple[int, ...] | None
    input_bytes: int
    batched_input_bytes: int
    target_bytes: int
    parameter_bytes: int
    gradient_bytes: int
    buffer_bytes: int
    static: dict[str, Any] = field(default_factory=dict)


def _classify_saved(call: NodeCall, out: Any, saved: list[torch.Tensor]) -> tuple[list[str], bool, list]:
    """Which input nodes, whether the output, and which extra slots autograd saved for ``call``."""
    leaf_keys: dict[int, str] = {}
    for source, _, t in call.leaves:
        leaf_keys.setdefault(storage_key(t), source)
    constant = {storage_key(t) for v in call.inputs.values() for t in tensors_of(v)} - set(leaf_keys)
    constant |= {storage_key(p) for p in call.params}
    outs = {storage_key(t) for t in tensors_of(out)}
    saved_inputs: list[str] = []
    saved_output = False
    extras: dict[int, tuple[int, int]] = {}
    for slot, t in enumerate(saved):
        key = storage_key(t)
        if key in leaf_keys:
            if leaf_keys[key] not in saved_inputs:
                saved_inputs.append(leaf_keys[key])
        elif key in outs:
            saved_output = True
        elif key not in constant and key not in extras:
            extras[key] = (slot, t.untyped_storage().nbytes())
    return saved_inputs, saved_output, list(extras.values())


def _op_label(tr: Trace, node: Any) -> str:
    if node.op == "call_module":
        return type(tr.gm.get_submodule(node.target)).__name__
    return getattr(node.target, "__name__", str(node.target))


def probe(tr: Trace, batch_size: int, loss: Any, target: InputSpec | None = None) -> Structure:
    """Walk ``tr`` on ``meta`` at ``batch_size``: shapes, saved tensors and needed gradients per node."""
    loss = resolve_loss(loss)
    infos: list[NodeInfo] = []

    def visit(call: NodeCall) -> Any:
        saved: list[torch.Tensor] = []

        def pack(t: torch.Tensor) -> torch.Tensor:
            saved.append(t)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = call.run()
        saved_inputs, saved_output, extras = _classify_saved(call, out, saved)
        grad = [(s, p, t) for s, p, t in call.leaves if t.requires_grad]
        node = call.node
        infos.append(
            NodeInfo(
                name=node.name,
                op=_op_label(tr, node),
                inputs=list(dict.fromkeys(s for a in node.all_input_nodes for s in tr.sources[a.name])),
                grad_leaves=[(s, p) for s, p, _ in grad],
                saved_inputs=saved_inputs,
                saved_output=saved_output,
                requires_grad=any(t.requires_grad for t in tensors_of(out)),
                out_bytes=nbytes(out),
                extra_slots=extras,
                grad_bytes=tensor_bytes([t for _, _, t in grad]),
            )
        )
        return out

    res = walk(tr, batch_size, "meta", visit)
    outputs = list(tr.sources[tr.output_node.name])
    if not outputs:
        raise ExtractionError(f"{tr.name}.forward returns only inputs or constants: there is nothing to train")
    refs = res.refs(res.output)
    wrt = [res.leaves[r] for r in refs if res.leaves[r].requires_grad]
    wrt_refs = [r for r in refs if res.leaves[r].requires_grad]
    target_value = example_target(loss, res.output, target, batch_size)
    _, grads = loss_and_grads(loss, res.output, target_value, wrt)
    params = dict(tr.gm.named_parameters())
    buffers = [b for _, b in tr.gm.named_buffers() if b is not None]
    itemsize = torch.empty((), dtype=tr.dtype).element_size()

    def pbytes(t: torch.Tensor) -> int:
        return t.numel() * (itemsize if t.is_floating_point() else t.element_size())

    tensor_inputs = [s for s in tr.inputs if s.tensor]
    return Structure(
        nodes=infos,
        outputs=outputs,
        loss_grads={r: tensor_bytes([g]) for r, g in zip(wrt_refs, grads, strict=True) if g is not None},
        output_shape=tuple(res.output.shape) if isinstance(res.output, torch.Tensor) else None,
        input_bytes=sum(s.nbytes(batch_size) for s in tensor_inputs),
        batched_input_bytes=sum(s.nbytes(batch_size) for s in tensor_inputs if s.batched),
        target_bytes=nbytes(target_value),
        parameter_bytes=sum(pbytes(p) for p in params.values()),
        gradient_bytes=sum(pbytes(p) for p in params.values() if p.requires_grad),
        buffer_bytes=sum(pbytes(b) for b in buffers),
        static=res.static,
    )
