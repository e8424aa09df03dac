"""PyTorch front end: extract a training :class:`~remat.graph.DFGraph` from an ``nn.Module``.

``extract(model, sample)`` traces the model for the sample the user passes
(:mod:`remat.torch.inputs`: any dtype, several inputs, keyword inputs such as an
attention mask); ``extract(model, (3, 224, 224), batch)`` describes one float
input by its shape instead. The loss is a named one or the user's
``loss_fn(output, target)`` (:mod:`remat.torch.losses`), and the model's output
may be a tensor, a tuple, a dict or an output object.

Granularity (paper §4.1, §4.10): one forward node per ``torch.fx`` call that
creates tensors (a *graph* node of :mod:`remat.torch.trace`: a leaf
``nn.Module`` such as Conv2d, LayerNorm, GELU, Dropout, or one functional op
such as ``add``, ``matmul``, ``scaled_dot_product_attention``). Views,
``getitem``/``getattr`` and container building are *aliases*: no node and no
memory, their readers read the graph nodes they alias. Then a ``Loss`` node,
then one backward node per forward node that needs a gradient.

Node order: forward nodes ``0..L-1`` in fx order, ``Loss`` at ``L``, backward
nodes after it in reverse forward order. When every forward node has a backward
node, the backward of forward node ``i`` is node ``2L - i`` (the paper's
convention). A forward node needs no backward when its output does not require
grad (it depends on no parameter: masks, position ids) or no gradient reaches
it; use ``metadata["backward_of"]`` rather than ``2L - i``.

What nodes read (edges) - every value the executor reads:

* forward node ``u`` reads its fx inputs' *sources* (the graph nodes behind
  aliases, and behind values such as ``x.device`` that need real tensors;
  shape-only values such as ``x.size(0)`` are fixed at extraction and need nothing);
* ``Loss`` reads every graph node the output is made of; it stands for the loss
  *and* its gradient with respect to them, so its memory is the bytes of those
  gradients (the scalar loss is ignored);
* backward node ``u_backward`` produces ``dL/dx`` for every graph-node tensor
  ``x`` among ``u``'s inputs that requires grad (parameter gradients are
  accumulated into buffers counted in the constant overhead; tied parameters are
  counted once); it reads the gradients flowing into ``u`` (``v_backward`` for
  every reader ``v`` of ``u``, ``Loss`` when the loss reaches ``u``) and the
  tensors autograd saves for ``u``.

Saved tensors are not taken from a table: each node runs once on ``meta``
tensors under ``torch.autograd.graph.saved_tensors_hooks`` and every saved
tensor is classified by its storage as one of ``u``'s inputs (edge from that
node), ``u``'s output (edge ``u -> u_backward``), a constant (parameter, buffer,
model input: no edge) or an *extra* of ``u``'s own (max-pool indices, dropout
masks, layer-norm statistics, attention log-sum-exp): extras that grow with the
batch are added to ``M_u``, give the edge ``u -> u_backward``, and their
positions in the save order are listed in ``metadata["fx_extra_slots"]`` so
the executor keeps exactly those with ``u``'s output; per-channel extras
(batch-norm statistics) are ignored. Fused kernels are the ones the executing
device picks (:mod:`remat.torch.kernels`).

Memory: ``M_i`` is the bytes of node ``i``'s output in its own dtype (each
storage once). ``constant_memory`` = input bytes (model inputs and loss target)
+ parameter bytes + gradient bytes of the parameters that require grad + buffer
bytes; ``input_memory`` = the batched part of the inputs and target. In-place
operations are modelled as their out-of-place versions (fx names in
``metadata["fx_out_of_place"]``). Everything is computed on the ``meta`` device
at the batch and at twice the batch, so extraction allocates nothing and
``graph.with_batch_size(B)`` equals a fresh extraction at ``B`` (for batched
inputs). The model runs in training mode (batch statistics, active dropout).

Mapping back to fx for an executor: re-trace with
:func:`remat.torch.trace.trace` from ``metadata["inputs"]`` and
``metadata["leaf_modules"]``. Lists have one entry per graph node:
``graph.names`` (fx name, ``"Loss"``, ``"<fx name>_backward"``),
``metadata["fx_nodes"]``, ``metadata["forward_of"]`` and
``metadata["backward_of"]``; ``metadata["fx_aliases"]`` and
``metadata["fx_aux"]`` map alias and value nodes to the graph nodes they read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from torch import nn

from remat.graph import DFGraph
from remat.torch.errors import ExtractionError
from remat.torch.inputs import InputSpec, bind, is_shape, shape_specs, tensor_spec
from remat.torch.losses import Loss, resolve_loss
from remat.torch.probe import Structure, probe
from remat.torch.trace import Trace, trace

__all__ = ["extract", "ExtractionError", "probe", "Structure"]

COST_MODELS = ("flops", "profile")


def _scaled(name: str, what: str, at_b: int, at_2b: int, affine: list[str]) -> tuple[int, bool]:
    """``(bytes, batch_scaled)``; a part fixed plus a part growing with the batch (``x + pos_emb``'s gradient)
    counts as batch-scaled and is listed in ``affine`` (``with_batch_size`` scales its fixed part too)."""
    if at_2b == at_b:
        return at_b, at_b == 0
    if at_2b == 2 * at_b:
        return at_b, True
    if at_b < at_2b < 2 * at_b:
        affine.append(name)
        return at_b, True
    raise ExtractionError(
        f"the {what} of node {name!r} is {at_b} bytes at batch B and {at_2b} at 2B: it is not proportional to "
        f"the batch, so the graph cannot be rescaled; make the batch the first dimension of every tensor"
    )


def prepare(
    model: nn.Module,
    sample: Any,
    batch_size: int | None,
    loss: Any,
    target: Any,
    dtype: torch.dtype | None,
    name: str | None,
    leaf_modules: Iterable[str | type],
) -> tuple[Trace, Loss, InputSpec | None, int, list[Any] | None]:
    """Trace ``model`` for ``sample`` (a sample or a per-sample shape): trace, loss, target spec, batch, values."""
    loss = resolve_loss(loss)
    if isinstance(batch_size, bool) or (batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1)):
        raise ExtractionError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not isinstance(model, nn.Module):
        raise ExtractionError(f"extract needs a torch.nn.Module, got {type(model).__name__}")
    values = None
    if is_shape(sample) or (isinstance(sample, (tuple, list)) and not sample):
        shape = tuple(sample)
        if not shape or not all(d > 0 for d in shape):
            raise ExtractionError(f"sample_shape must be positive ints per sample, e.g. (3, 224, 224); got {shape}")
        if batch_size is None:
            raise ExtractionError("a per-sample shape needs batch_size: extract(model, (3, 224, 224), batch_size)")
        dtype = dtype or torch.float32
        specs, batch = shape_specs(model, shape, dtype), batch_size
    else:
        specs, values, batch = bind(model, sample)
        if batch_size is not None and batch_size != batch:
            raise ExtractionError(
                f"batch_size={batch_size} but the sample's batch is {batch}: the sample is traced as given; "
                f"pass a sample of the batch you train with"
            )
    if target is not None and not isinstance(target, torch.Tensor):
        raise ExtractionError(f"target must be one tensor (or None), got {type(target).__name__}")
    target_spec = tensor_spec("target", target, batch) if target is not None else None
    tr = trace(model, specs, dtype=dtype, name=name, leaf_modules=leaf_modules)
    return tr, loss, target_spec, batch, values


def extract(
    model: nn.Module,
    sample: Any,
    batch_size: int | None = None,
    cost_model: str = "flops",
    loss: Any = "cross_entropy",
    *,
    target: torch.Tensor | None = None,
    dtype: torch.dtype | None = None,
    name: str | None = None,
    leaf_modules: Iterable[str | type] = (),
    fallback: str | None = None,
    profile_options: dict[str, Any] | None = None,
) -> DFGraph:
    """Extract the training graph of ``model`` for ``sample`` (see the module docstring).

    ``sample`` is what the model is called with (a tensor, tuple, dict or
    :class:`~remat.torch.inputs.Sample`), traced as given; or a per-sample shape
    ``(3, 224, 224)`` with ``batch_size`` for one float input of ``dtype``
    (default float32; with a real sample, the model's own dtype). ``loss`` is a
    name of :data:`remat.torch.losses.LOSSES` or ``loss_fn(output, target)``;
    ``target`` is an example target for a callable loss (its bytes are counted).
    ``cost_model`` is ``"flops"`` (static) or ``"profile"`` (seconds on the
    current device; ``fallback="flops"`` falls back to FLOPs when the device
    cannot profile this size, ``profile_options`` go to
    :func:`remat.torch.costs.profile`). ``leaf_modules`` (names or types) are
    kept as single opaque nodes.
    """
    from remat.torch import costs

    if cost_model not in COST_MODELS:
        raise ExtractionError(f"unknown cost_model {cost_model!r}: choose one of {', '.join(COST_MODELS)}")
    if fallback not in (None, "flops"):
        raise ExtractionError(f"fallback must be None or 'flops', got {fallback!r}")
    tr, loss, target_spec, batch, values = prepare(model, sample, batch_size, loss, target, dtype, name, leaf_modules)
    st = probe(tr, batch, loss, target_spec)
    st2 = probe(tr, 2 * batch, loss, target_spec)
    if cost_model == "flops":
        node_costs = costs.flops(tr, batch, loss, target_spec)
    else:
        options = {"inputs": values, **(profile_options or {})}
        node_costs = costs.profile(tr, batch, loss, target_spec, fallback=fallback, **options)
    return _assemble(tr, st, st2, node_costs, loss, target_spec, batch)


def _assemble(tr: Trace, st: Structure, st2: Structure, nc: Any, loss: Loss, target: InputSpec | None,
              batch_size: int) -> DFGraph:
    infos = st.nodes
    L = len(infos)
    fid = {info.name: i for i, info in enumerate(infos)}
    users: dict[str, list[str]] = {info.name: [] for info in infos}
    for info in infos:
        for a in dict.fromkeys(s for s, _ in info.grad_leaves):
            users[a].append(info.name)
    from_loss = {s for s, _ in st.loss_grads}
    needs = {info.name: False for info in infos}
    for info in reversed(infos):
        needs[info.name] = info.requires_grad and (info.name in from_loss or any(needs[v] for v in users[info.name]))
    backward_order = [info for info in reversed(infos) if needs[info.name]]
    bid = {info.name: L + 1 + k for k, info in enumerate(backward_order)}
    n = L + 1 + len(backward_order)

    names: list[str] = [info.name for info in infos] + ["Loss"] + [f"{i.name}_backward" for i in backward_order]
    memory = np.zeros(n, np.int64)
    scaled = np.ones(n, bool)
    cost = np.zeros(n)
    factor = batch_size / nc.measured_batch
    edges: list[tuple[int, int]] = []
    extra_slots: dict[str, list[int]] = {}
    affine: list[str] = []
    for info, info2 in zip(infos, st2.nodes, strict=True):
        i = fid[info.name]
        out, s = _scaled(info.name, "output", info.out_bytes, info2.out_bytes, affine)
        if [a for a, _ in info.extra_slots] != [a for a, _ in info2.extra_slots]:
            raise ExtractionError(f"node {info.name!r} saves other tensors at batch B than at 2B: cannot rescale")
        grows = [(a, b) for (a, b), (_, b2) in zip(info.extra_slots, info2.extra_slots, strict=True) if b2 == 2 * b > 0]
        if grows and s:
            extra_slots[info.name] = [a for a, _ in grows]
        memory[i], scaled[i] = out + (sum(b for _, b in grows) if s else 0), s
        cost[i] = nc.forward[info.name] * (factor if s else 1.0)
        edges.extend((fid[a], i) for a in info.inputs)
    loss_bytes, s = _scaled("Loss", "gradient", sum(st.loss_grads.values()), sum(st2.loss_grads.values()), affine)
    memory[L], scaled[L], cost[L] = loss_bytes, s, nc.loss * (factor if s else 1.0)
    edges.extend((fid[a], L) for a in st.outputs)
    for info, info2 in ((i, st2.nodes[fid[i.name]]) for i in backward_order):
        b = bid[info.name]
        memory[b], scaled[b] = _scaled(f"{info.name}_backward", "gradient", info.grad_bytes, info2.grad_bytes, affine)
        cost[b] = nc.backward[info.name] * (factor if scaled[b] else 1.0)
        edges.extend((bid[v], b) for v in users[info.name] if needs[v])
        if info.name in from_loss:
            edges.append((L, b))
        edges.extend((fid[a], b) for a in info.saved_inputs)
        if info.saved_output or info.name in extra_slots:
            edges.append((fid[info.name], b))
    forward_of = [-1] * (L + 1) + [fid[i.name] for i in backward_order]
    params = st.parameter_bytes + st.gradient_bytes + st.buffer_bytes
    batched = st.batched_input_bytes + (st.target_bytes if target is None or target.batched else 0)
    tensor_inputs = [s for s in tr.inputs if s.tensor]
    metadata = {
        "model": tr.name,
        "inputs": [s.to_dict() for s in tr.inputs],
        "target": target.to_dict() if target is not None else None,
        "input_shape": list(tensor_inputs[0].shape),
        "dtype": str(tr.dtype).replace("torch.", ""),
        "device": nc.device,
        "cost_model": nc.model,
        "cost_unit": nc.unit,
        "cost_note": nc.note,
        "loss": loss.name,
        "output_shape": list(st.output_shape) if st.output_shape is not None else None,
        "parameter_bytes": st.parameter_bytes,
        "fx_nodes": [i.name for i in infos] + [None] + [i.name for i in backward_order],
        "forward_of": forward_of,
        "backward_of": [bid.get(i.name, -1) for i in infos],
        "fx_ops": [i.op for i in infos],
        "fx_aliases": _reads(tr, fid, "alias"),
        "fx_aux": {**_reads(tr, fid, "aux"), **_reads(tr, fid, "dynamic")},
        "fx_extra_slots": extra_slots,
        "batch_affine": affine,
        "fx_out_of_place": list(tr.out_of_place),
        "leaf_modules": list(tr.leaf_modules),
        "execution_device": tr.device,
        "structure": tr.fingerprint(),
    }
    return DFGraph(
        names=names,
        cost=cost,
        memory=memory,
        edges=edges,
        loss=L,
        constant_memory=params + st.input_bytes + st.target_bytes,
        input_memory=batched,
        batch_size=batch_size,
        batch_scaled=scaled,
        cost_unit=nc.unit,
        name=tr.name,
        metadata=metadata,
    )


def _reads(tr: Trace, fid: dict[str, int], kind: str) -> dict[str, list[int]]:
    return {n: [fid[s] for s in tr.sources[n]] for n, k in tr.kind.items() if k == kind}
