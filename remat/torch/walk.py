"""Run a traced model node by node: on ``meta`` for shapes, saved tensors and FLOPs, on a device for profiling.

:func:`walk` evaluates every fx node of a :class:`~remat.torch.trace.Trace` and
hands each *graph* node to a ``visit`` callback as a :class:`NodeCall`. Graph
nodes run on *leaf* copies of the graph nodes they read (aliases in between are
re-applied to those leaves), so whatever autograd records for a node - saved
tensors, VJP cost - belongs to that node alone. The first walk of a trace
classifies its nodes (the roles of :mod:`remat.torch.trace`); later walks reuse
the roles. On ``meta`` fused kernels are those the target device would pick
(:mod:`remat.torch.kernels`).
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from remat.torch.errors import ExtractionError
from remat.torch.inputs import example_values
from remat.torch.kernels import DeviceKernels
from remat.torch.trace import Trace, describe, device_copy, evaluate, fetch_attr, is_inplace
from remat.torch.tree import Path, flatten, has_tensor, map_tensors, storage_key, tensors_of

_STATIC_TYPES = (type(None), bool, int, float, complex, str, torch.Size, torch.dtype, torch.memory_format,
                 torch.layout, slice, type(Ellipsis))
_DEVICE_ATTRIBUTES = {"device", "is_cuda", "is_cpu", "is_meta", "is_mps", "is_xpu", "is_sparse"}
_DEVICE_METHODS = {"get_device", "is_pinned", "data_ptr", "untyped_storage", "storage"}


@dataclass
class NodeCall:
    """One graph node ready to run: ``run()`` executes it on the values in ``inputs``.

    ``inputs`` maps each fx node feeding this call to its value; ``leaves``
    lists the tensors of graph nodes those values are made of, as
    ``(source, path, leaf tensor)``; ``params`` are the parameters and buffers of
    the called module.
    """

    node: fx.Node
    inputs: dict[str, Any]
    leaves: list[tuple[str, Path, torch.Tensor]]
    params: list[torch.Tensor]
    run: Callable[[], Any]

    def differentiable(self) -> list[torch.Tensor]:
        """The tensors a VJP of this node differentiates with respect to (inputs and parameters)."""
        seen: dict[int, torch.Tensor] = {}
        for v in self.inputs.values():
            for t in tensors_of(v):
                if t.requires_grad:
                    seen.setdefault(id(t), t)
        return list(seen.values()) + [p for p in self.params if p.requires_grad and id(p) not in seen]


@dataclass
class WalkResult:
    """What a walk leaves behind: the model output, where its tensors come from, the shape-only values."""

    output: Any
    leaf_of: dict[int, list[tuple[str, Path]]]  # storage key -> [(graph node, path)] of graph-node outputs
    leaves: dict[tuple[str, Path], torch.Tensor] = field(default_factory=dict)  # the leaf tensors themselves
    static: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)

    def refs(self, value: Any) -> list[tuple[str, Path]]:
        """The graph-node leaves whose storage the tensors of ``value`` share, in order."""
        found = {ref: None for t in tensors_of(value) for ref in self.leaf_of.get(storage_key(t), ())}
        return list(found)


def _is_static(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_is_static(v) for v in value)
    return isinstance(value, _STATIC_TYPES)


def _asks_device(node: fx.Node) -> bool:
    if node.op == "call_function" and node.target is getattr and len(node.args) > 1:
        return node.args[1] in _DEVICE_ATTRIBUTES
    return node.op == "call_method" and node.target in _DEVICE_METHODS


def _has_parameters(gm: fx.GraphModule, node: fx.Node) -> bool:
    return node.op == "call_module" and any(True for _ in gm.get_submodule(node.target).parameters())


def walk(
    tr: Trace,
    batch_size: int,
    device: torch.device | str,
    visit: Callable[[NodeCall], Any],
    inputs: list[Any] | None = None,
    free: bool = False,
) -> WalkResult:
    """Run ``tr`` at ``batch_size`` on ``device``, handing each graph node to ``visit``.

    ``visit(call)`` must return the node's value (normally ``call.run()``).
    ``inputs`` are the values of forward's parameters (default: empty tensors of
    the specs' shapes at ``batch_size``). When ``tr.kind`` is empty the walk also
    classifies the nodes. ``free`` drops values after their last reader, for
    real devices.
    """
    device = torch.device(device)
    gm = device_copy(tr.gm, device, tr.dtype)
    gm.train()  # the graph models a training step: batch statistics, active dropout
    classify = not tr.kind
    values = inputs if inputs is not None else example_values(tr.inputs, batch_size, device)
    last_use: dict[str, str] = {}
    for node in gm.graph.nodes:
        for a in node.all_input_nodes:
            last_use[a.name] = node.name
    env: dict[str, Any] = {}
    res = WalkResult(output=None, leaf_of={}, env=env)
    leaves = res.leaves
    placeholders = iter(values)
    kernels = DeviceKernels(tr.device) if device.type == "meta" else contextlib.nullcontext()
    with kernels:
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                env[node.name], kind = next(placeholders), "input"
            elif node.op == "get_attr":
                env[node.name], kind = fetch_attr(gm, node.target), "constant"
            elif node.op == "output":
                kind = "output"
            else:
                kind = tr.kind.get(node.name) if not classify else _classify(tr, gm, node, env)
                if kind == "graph":
                    call = _node_call(gm, node, env, res.leaf_of, leaves)
                    value = map_tensors(visit(call), lambda p, t: t.detach().requires_grad_(t.requires_grad))
                    for path, t in flatten(value):
                        res.leaf_of.setdefault(storage_key(t), []).append((node.name, path))
                        leaves[node.name, path] = t
                    env[node.name] = value
                else:
                    env[node.name] = _run(gm, node, env, grad=kind == "alias")
                    if kind == "aux":
                        res.static[node.name] = env[node.name]
            if classify:
                tr.kind[node.name] = kind
                tr.sources[node.name] = _sources(tr, node, kind)
                if kind == "graph" and is_inplace(tr.gm, node):
                    tr.out_of_place.append(node.name)
            if free and node.op != "output":
                for a in node.all_input_nodes:
                    if last_use.get(a.name) == node.name and a.name not in res.static:
                        env.pop(a.name, None)
    res.output = fx.node.map_arg(tr.output_node.args[0], lambda n: env[n.name])
    return res


def _sources(tr: Trace, node: fx.Node, kind: str) -> tuple[str, ...]:
    if kind == "graph":
        return (node.name,)
    if kind in ("alias", "dynamic", "output"):
        return tuple(dict.fromkeys(s for a in node.all_input_nodes for s in tr.sources[a.name]))
    return ()


def _run(gm: fx.GraphModule, node: fx.Node, env: dict, grad: bool) -> Any:
    args = fx.node.map_arg(node.args, lambda a: env[a.name])
    kwargs = fx.node.map_arg(node.kwargs, lambda a: env[a.name])
    with torch.enable_grad() if grad else torch.no_grad():
        return evaluate(gm, node, args, kwargs)


def _classify(tr: Trace, gm: fx.GraphModule, node: fx.Node, env: dict) -> str:
    """The role of ``node`` (see :mod:`remat.torch.trace`), from one evaluation on the walk's device."""
    try:
        value = _run(gm, node, env, grad=False)
    except ExtractionError:
        raise
    except Exception as exc:
        raise ExtractionError(
            f"cannot run {describe(node)} on shapes alone (the meta device, where extraction measures every "
            f"node): {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}. Rewrite it without "
            f"reading tensor values (.item(), .tolist(), data-dependent shapes: e.g. torch.where, a fixed "
            f"maximum); leaf_modules do not help here, they run on meta too"
        ) from exc
    if not has_tensor(value):
        dynamic = _asks_device(node) or not _is_static(value)
        dynamic = dynamic or any(tr.kind.get(a.name) == "dynamic" for a in node.all_input_nodes)
        return "dynamic" if dynamic else "aux"
    inputs = {storage_key(t) for a in node.all_input_nodes for t in tensors_of(env[a.name])}
    if all(storage_key(t) in inputs for t in tensors_of(value)) and not _has_parameters(gm, node):
        return "alias"
    if is_inplace(tr.gm, node) and node.args and isinstance(node.args[0], fx.Node):
        if tr.kind.get(node.args[0].name) == "alias":
            raise ExtractionError(
                f"{describe(node)} writes in place into {node.args[0].name!r}, a view of another tensor: the "
                f"graph runs in-place ops out of place, which would leave that tensor unchanged; write it out of "
                f"place (e.g. x = x + y) or make its module a leaf"
            )
    return "graph"


def _node_call(gm: fx.GraphModule, node: fx.Node, env: dict, leaf_of: dict, leaves: dict) -> NodeCall:
    inputs: dict[str, Any] = {a.name: env[a.name] for a in node.all_input_nodes}
    args = fx.node.map_arg(node.args, lambda a: inputs[a.name])
    kwargs = fx.node.map_arg(node.kwargs, lambda a: inputs[a.name])
    params: list[torch.Tensor] = []
    if node.op == "call_module":
        mod = gm.get_submodule(node.target)
        params = list(mod.parameters()) + [b for b in mod.buffers() if b is not None]
    found: dict[tuple[str, Path], torch.Tensor] = {}
    for v in inputs.values():
        for t in tensors_of(v):
            for ref in leaf_of.get(storage_key(t), ()):
                found.setdefault(ref, leaves[ref])

    def run() -> Any:
        return evaluate(gm, node, args, kwargs)

    return NodeCall(node=node, inputs=inputs, leaves=[(s, p, t) for (s, p), t in found.items()], params=params,
                    run=run)


def getitem_path(node: fx.Node) -> Any | None:
    """The key of ``operator.getitem(x, key)`` with a constant int or str key, else None."""
    if node.op == "call_function" and node.target is operator.getitem and isinstance(node.args[1], (int, str)):
        return node.args[1]
    return None
