"""PyTorch front end: extract a training :class:`~remat.graph.DFGraph` from an ``nn.Module``.

Granularity (paper §4.1, §4.10): one forward node per ``torch.fx`` call node
(``call_module``, ``call_function``, ``call_method``) that produces a tensor, at
the granularity of the symbolic trace: a leaf ``nn.Module`` (Conv2d, ReLU,
BatchNorm2d, Linear, ...) or one functional op (``add``, ``cat``, ``flatten``).
This is finer than the paper's Keras graphs, where a layer's activation is fused
into its conv, so our node counts are higher for the same network. Then a
``Loss`` node, then one backward node per forward node that needs a gradient.

Node order: forward nodes ``0..L-1`` in fx order, ``Loss`` at ``L``, backward
nodes after it in reverse forward order. When every forward node has a backward
node, the backward of forward node ``i`` is node ``2L - i`` (the paper's
convention). A forward node needs no backward when its output does not require
grad (it depends on no parameter, e.g. preprocessing of the input) or no
gradient reaches it (dead branches); such nodes are skipped and the remaining
backward nodes keep reverse forward order, so ``metadata["backward_of"]`` must
be used instead of ``2L - i``.

What nodes read (edges):

* forward node ``u`` reads the graph nodes among its tensor arguments;
* ``Loss`` reads the model output; it stands for the loss *and* its gradient
  with respect to the output, so its memory is the bytes of that gradient (the
  4-byte scalar loss is ignored to keep memory proportional to the batch);
* backward node ``u_backward`` produces ``dL/dx`` for every argument ``x`` of
  ``u`` that is a graph node requiring grad (not the model input, not
  parameters: parameter gradients are accumulated into buffers counted in the
  constant overhead); its memory is the bytes of those gradients (0 for the first
  layer). It reads the gradients flowing into ``u``: ``v_backward`` for every
  user ``v`` of ``u`` with a backward node, or ``Loss`` when ``u`` is the model
  output; and the tensors autograd saves for ``u``.

Saved tensors are not taken from a hand-written table: each node is run once on
``meta`` tensors under ``torch.autograd.graph.saved_tensors_hooks`` and every
saved tensor is classified as one of ``u``'s arguments (edge from that node),
``u``'s output (edge ``u -> u_backward``), a parameter/buffer/model input
(constant overhead, no edge) or an *extra* (max-pool indices, dropout masks):
extras that grow with the batch are added to ``u``'s memory and also give the
edge ``u -> u_backward``; per-channel extras (batch-norm statistics) are ignored.
(An executor that recomputes a dropout node must replay its RNG state to get
the same mask.)
The behaviour this yields - ReLU/sigmoid keep their output; conv, linear,
batch-norm keep their input; max-pool its input and indices; add, cat, flatten,
view, upsampling keep nothing; mul keeps both inputs - is asserted op by op in
``tests/test_extract.py``.

Memory: ``M_i`` is the bytes of node ``i``'s output in its own dtype (float32 by
default); a tuple output counts all its tensors. ``constant_memory`` = input
bytes (model input and loss target) + parameter bytes + gradient bytes of the
parameters that require grad + buffer bytes; ``input_memory`` = the input and
target bytes. View ops (``flatten``, ``view``, ``reshape``...) are ordinary nodes
whose memory is their full output: when a view and its base are both resident
the graph over-counts, never under-counts.

In-place operations (``ReLU(inplace=True)``, ``x.add_(y)``, ``operator.iadd``)
are modelled as their out-of-place versions: a fresh output node. Their fx names
are listed in ``metadata["fx_out_of_place"]``; an executor must run them
out-of-place too (zoo models from :func:`remat.models.get_model` have none).

Everything is computed by walking the traced model on the ``meta`` device at the
batch and at twice the batch, so extraction allocates nothing and a node's
memory is exactly proportional to the batch when its output is
(``batch_scaled``); hence ``graph.with_batch_size(B)`` equals a fresh extraction
at ``B``. The model runs in training mode (batch statistics, active dropout).

Mapping back to fx for an executor. Re-create the traced module with
``torch_trace.trace(model, sample_shape, leaf_modules=metadata["leaf_modules"])``
(it applies the same in-place rewrite, so fx names and data flow match the
graph) and run a copy from ``torch_trace.device_copy(tr.gm, device, dtype)``,
which has in-place flags off. All lists have one entry per graph node unless
noted:

* ``graph.names``: the fx node name for forward nodes, ``"Loss"``, and
  ``"<fx name>_backward"``;
* ``metadata["fx_nodes"]``: fx name computed by the node (forward: itself;
  backward: the forward node it differentiates; ``None`` for the loss);
* ``metadata["forward_of"]``: for backward nodes, the forward node id; else -1;
  ``metadata["backward_of"]``: for forward nodes, their backward id or -1;
* ``metadata["fx_aliases"]``: ``{fx name: graph node id}`` for ``getitem`` on
  tuple-valued nodes (no node of their own);
* ``metadata["fx_aux"]``: ``{fx name: graph node id}`` for nodes yielding no
  tensor (shape arithmetic): evaluate once, right after the given node (-1:
  before the first) is first computed, and keep the value;
* ``metadata["fx_out_of_place"]``, ``metadata["loss"]`` (``cross_entropy`` or
  ``mse``), ``metadata["output_shape"]``, ``metadata["model"]``,
  ``metadata["input_shape"]`` (C, H, W), ``metadata["dtype"]``,
  ``metadata["device"]``, ``metadata["cost_model"]`` and ``metadata["cost_unit"]``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from remat.graph import DFGraph
from remat.torch.losses import check_loss, loss_target
from remat.torch.trace import ExtractionError, NodeCall, Trace, nbytes, tensors_of, trace, walk

__all__ = ["extract", "ExtractionError", "probe", "Structure"]

COST_MODELS = ("flops", "profile")


@dataclass
class NodeInfo:
    """What one forward node produces and what its backward reads, at one batch size."""

    name: str
    op: str
    inputs: list[str]  # producing graph nodes, distinct, in argument order
    grad_inputs: list[str]  # those whose gradient the backward produces
    saved_inputs: list[str]  # those autograd saves for the backward
    saved_output: bool
    requires_grad: bool
    out_bytes: int
    extra_bytes: int
    grad_bytes: int


@dataclass
class Structure:
    """The graph structure from one meta walk: nodes in fx order, model output, loss, constants."""

    nodes: list[NodeInfo]
    output: str
    output_shape: tuple[int, ...]
    input_bytes: int
    target_bytes: int
    parameter_bytes: int
    gradient_bytes: int
    buffer_bytes: int
    aux: dict[str, str | None] = field(default_factory=dict)


def _root(t: torch.Tensor) -> torch.Tensor:
    return t._base if t._base is not None else t


def _aliases(t: torch.Tensor, x: Any) -> bool:
    return isinstance(x, torch.Tensor) and (t is x or _root(t) is _root(x))


def _classify_saved(call: NodeCall, out: Any, saved: list[torch.Tensor]) -> tuple[list[str], bool, int]:
    """Which activation inputs, whether the output, and how many extra bytes autograd saved."""
    acts = set(call.activations)
    saved_inputs: list[str] = []
    saved_output = False
    extras: dict[int, torch.Tensor] = {}
    outs = tensors_of(out)
    for t in saved:
        if any(_aliases(t, p) for p in call.params):
            continue
        hit = next((name for name, x in call.inputs.items() if _aliases(t, x)), None)
        if hit is None:
            hit = next((name for name, x in call.inputs.items() if any(_aliases(t, y) for y in tensors_of(x))), None)
        if hit is not None:
            if hit in acts and hit not in saved_inputs:
                saved_inputs.append(hit)
            continue
        if any(_aliases(t, o) for o in outs):
            saved_output = True
            continue
        extras[id(_root(t))] = t
    return saved_inputs, saved_output, sum(nbytes(t) for t in extras.values())


def probe(tr: Trace, batch_size: int, loss: str) -> Structure:
    """Walk ``tr`` on ``meta`` at ``batch_size``: shapes, saved tensors and needed gradients per node."""
    infos: list[NodeInfo] = []

    def visit(call: NodeCall) -> Any:
        saved: list[torch.Tensor] = []

        def pack(t: torch.Tensor) -> torch.Tensor:
            saved.append(t)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = call.run()
        saved_inputs, saved_output, extra = _classify_saved(call, out, saved)
        producers = list(dict.fromkeys(tr.producer(a) for a in call.activations))
        grad_from = [a for a in call.activations if any(t.requires_grad for t in tensors_of(call.inputs[a]))]
        infos.append(
            NodeInfo(
                name=call.node.name,
                op=_op_label(tr, call),
                inputs=producers,
                grad_inputs=list(dict.fromkeys(tr.producer(a) for a in grad_from)),
                saved_inputs=list(dict.fromkeys(tr.producer(a) for a in saved_inputs)),
                saved_output=saved_output,
                requires_grad=any(t.requires_grad for t in tensors_of(out)),
                out_bytes=nbytes(out),
                extra_bytes=extra,
                grad_bytes=sum(nbytes(call.inputs[a]) for a in grad_from),
            )
        )
        return out

    output = walk(tr, batch_size, "meta", visit)
    out_name = tr.output_node.args[0].name
    producer = tr.producer(out_name)
    if producer is None:
        raise ExtractionError(f"{tr.name}.forward returns its input or a constant: there is nothing to train")
    params = dict(tr.gm.named_parameters())
    buffers = [b for _, b in tr.gm.named_buffers() if b is not None]
    itemsize = torch.empty((), dtype=tr.dtype).element_size()

    def pbytes(t: torch.Tensor) -> int:
        return t.numel() * (itemsize if t.is_floating_point() else t.element_size())

    aux = {}
    graph_names = {i.name for i in infos}
    order = [n.name for n in tr.gm.graph.nodes]
    for node in tr.gm.graph.nodes:
        if tr.kind[node.name] == "aux":
            before = [a for a in _upstream_graph_nodes(node, graph_names)]
            aux[node.name] = max(before, key=order.index) if before else None
    return Structure(
        nodes=infos,
        output=producer,
        output_shape=tuple(output.shape),
        input_bytes=batch_size * int(np.prod(tr.sample_shape)) * itemsize,
        target_bytes=nbytes(loss_target(loss, output)),
        parameter_bytes=sum(pbytes(p) for p in params.values()),
        gradient_bytes=sum(pbytes(p) for p in params.values() if p.requires_grad),
        buffer_bytes=sum(pbytes(b) for b in buffers),
        aux=aux,
    )


def _upstream_graph_nodes(node: Any, graph_names: set[str]) -> set[str]:
    seen, stack, found = set(), list(node.all_input_nodes), set()
    while stack:
        a = stack.pop()
        if a.name in seen:
            continue
        seen.add(a.name)
        if a.name in graph_names:
            found.add(a.name)
        else:
            stack.extend(a.all_input_nodes)
    return found


def _op_label(tr: Trace, call: NodeCall) -> str:
    node = call.node
    if node.op == "call_module":
        return type(tr.gm.get_submodule(node.target)).__name__
    return getattr(node.target, "__name__", str(node.target))


def _scaled(name: str, what: str, at_b: int, at_2b: int) -> tuple[int, bool]:
    if at_2b == at_b:
        return at_b, at_b == 0
    if at_2b == 2 * at_b:
        return at_b, True
    raise ExtractionError(
        f"the {what} of node {name!r} is {at_b} bytes at batch B and {at_2b} at 2B: it is not proportional to "
        f"the batch, so the graph cannot be rescaled; make the batch the first dimension of every tensor"
    )


def extract(
    model: nn.Module,
    sample_shape: Iterable[int],
    batch_size: int,
    cost_model: str = "flops",
    loss: str = "cross_entropy",
    *,
    dtype: torch.dtype = torch.float32,
    name: str | None = None,
    leaf_modules: Iterable[str | type] = (),
    fallback: str | None = None,
    profile_options: dict[str, Any] | None = None,
) -> DFGraph:
    """Extract the training graph of ``model`` for inputs of shape ``(batch_size, *sample_shape)``.

    ``cost_model`` is ``"flops"`` (:func:`remat.torch.costs.flops`, static) or
    ``"profile"`` (:func:`remat.torch.costs.profile`, seconds on the current device;
    ``fallback="flops"`` falls back to FLOPs when the device cannot profile this
    batch/resolution, and ``profile_options`` go to ``profile``). ``loss`` is
    ``"cross_entropy"`` (integer targets) or ``"mse"``. ``leaf_modules`` (names or
    types) are kept as single opaque nodes. See the module docstring for the
    node, edge and memory conventions.
    """
    from remat.torch import costs

    sample_shape = tuple(sample_shape)
    if not sample_shape or not all(isinstance(d, int) and d > 0 for d in sample_shape):
        raise ExtractionError(f"sample_shape must be positive ints per sample, e.g. (3, 224, 224); got {sample_shape}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ExtractionError(f"batch_size must be a positive integer, got {batch_size!r}")
    if cost_model not in COST_MODELS:
        raise ExtractionError(f"unknown cost_model {cost_model!r}: choose one of {', '.join(COST_MODELS)}")
    check_loss(loss)
    if fallback not in (None, "flops"):
        raise ExtractionError(f"fallback must be None or 'flops', got {fallback!r}")
    tr = trace(model, sample_shape, dtype=dtype, name=name, leaf_modules=leaf_modules)
    st = probe(tr, batch_size, loss)
    st2 = probe(tr, 2 * batch_size, loss)
    if cost_model == "flops":
        node_costs = costs.flops(tr, batch_size, loss)
    else:
        node_costs = costs.profile(tr, batch_size, loss, fallback=fallback, **(profile_options or {}))
    return _assemble(tr, st, st2, node_costs, loss, batch_size)


def _assemble(tr: Trace, st: Structure, st2: Structure, nc: Any, loss: str, batch_size: int) -> DFGraph:
    infos = st.nodes
    L = len(infos)
    fid = {info.name: i for i, info in enumerate(infos)}
    users: dict[str, list[str]] = {info.name: [] for info in infos}
    for info in infos:
        for a in info.grad_inputs:
            users[a].append(info.name)
    needs = {info.name: False for info in infos}
    for info in reversed(infos):
        needs[info.name] = info.requires_grad and (info.name == st.output or any(needs[v] for v in users[info.name]))
    backward_order = [info for info in reversed(infos) if needs[info.name]]
    bid = {info.name: L + 1 + k for k, info in enumerate(backward_order)}
    n = L + 1 + len(backward_order)

    names: list[str] = [info.name for info in infos] + ["Loss"] + [f"{i.name}_backward" for i in backward_order]
    memory = np.zeros(n, np.int64)
    scaled = np.ones(n, bool)
    cost = np.zeros(n)
    factor = batch_size / nc.measured_batch
    edges: list[tuple[int, int]] = []
    for info, info2 in zip(infos, st2.nodes, strict=True):
        i = fid[info.name]
        out, s = _scaled(info.name, "output", info.out_bytes, info2.out_bytes)
        # The part of the extras that grows with the batch (max-pool indices, dropout masks).
        extra = max(info2.extra_bytes - info.extra_bytes, 0) if s else 0
        memory[i], scaled[i] = out + extra, s
        cost[i] = nc.forward[info.name] * (factor if s else 1.0)
        edges.extend((fid[a], i) for a in info.inputs)
    out_bytes, s = _scaled("Loss", "gradient", infos[fid[st.output]].out_bytes, st2.nodes[fid[st.output]].out_bytes)
    memory[L], scaled[L], cost[L] = out_bytes, s, nc.loss * (factor if s else 1.0)
    edges.append((fid[st.output], L))
    for info, info2 in ((i, st2.nodes[fid[i.name]]) for i in backward_order):
        b = bid[info.name]
        memory[b], scaled[b] = _scaled(f"{info.name}_backward", "gradient", info.grad_bytes, info2.grad_bytes)
        cost[b] = nc.backward[info.name] * (factor if scaled[b] else 1.0)
        edges.extend((bid[v], b) for v in users[info.name] if needs[v])
        if info.name == st.output:
            edges.append((L, b))
        edges.extend((fid[a], b) for a in info.saved_inputs)
        if info.saved_output or memory[fid[info.name]] > info.out_bytes:
            edges.append((fid[info.name], b))
    forward_of = [-1] * (L + 1) + [fid[i.name] for i in backward_order]
    params = st.parameter_bytes + st.gradient_bytes + st.buffer_bytes
    inputs = st.input_bytes + st.target_bytes
    metadata = {
        "model": tr.name,
        "input_shape": list(tr.sample_shape),
        "dtype": str(tr.dtype).replace("torch.", ""),
        "device": nc.device,
        "cost_model": nc.model,
        "cost_unit": nc.unit,
        "cost_note": nc.note,
        "loss": loss,
        "output_shape": list(st.output_shape),
        "parameter_bytes": st.parameter_bytes,
        "fx_nodes": [i.name for i in infos] + [None] + [i.name for i in backward_order],
        "forward_of": forward_of,
        "backward_of": [bid.get(i.name, -1) for i in infos],
        "fx_ops": [i.op for i in infos],
        "fx_aliases": {a: fid[p] for a, p in tr.alias_of.items() if p in fid},
        "fx_aux": {a: (fid[p] if p is not None else -1) for a, p in st.aux.items()},
        "fx_out_of_place": list(tr.out_of_place),
        "leaf_modules": list(tr.leaf_modules),
        "structure": tr.fingerprint(),
    }
    return DFGraph(
        names=names,
        cost=cost,
        memory=memory,
        edges=edges,
        loss=L,
        constant_memory=params + inputs,
        input_memory=inputs,
        batch_size=batch_size,
        batch_scaled=scaled,
        cost_unit=nc.unit,
        name=tr.name,
        metadata=metadata,
    )
