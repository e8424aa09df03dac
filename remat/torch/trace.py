"""torch.fx tracing and per-node execution shared by the extractor and the cost models.

:func:`trace` turns an ``nn.Module`` into a :class:`Trace`: the ``torch.fx``
GraphModule plus a classification of every fx node as

* ``"graph"`` - a call that produces a tensor (or a tuple/list of tensors): one
  forward node of the data-flow graph;
* ``"alias"`` - ``operator.getitem`` on a tuple/list-valued node: no graph node,
  it reads its producer's graph node;
* ``"aux"`` - a call producing no tensor (``x.size(0)``, shape arithmetic): no
  graph node and no memory; an executor evaluates it once after its inputs exist
  and keeps the (tiny, non-tensor) value for the whole step;
* ``"input"``, ``"constant"``, ``"output"`` - placeholders, ``get_attr`` and the
  output (constant overhead or bookkeeping, never graph nodes).

:func:`walk` executes the traced model node by node on any device - ``meta``
for shapes and FLOPs (nothing is allocated), a real device for profiling. Each
graph node runs on *leaf* copies of its tensor inputs, so whatever autograd
records for it (saved tensors, VJP cost) belongs to that node alone. In-place
operations are run as their out-of-place versions (see :mod:`remat.torch.extract`).
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch import nn


class ExtractionError(ValueError):
    """A model the extractor cannot turn into a graph; the message names the cause and the fix."""


_INPLACE_OPERATORS = {
    operator.iadd: operator.add,
    operator.isub: operator.sub,
    operator.imul: operator.mul,
    operator.itruediv: operator.truediv,
}


@dataclass
class Trace:
    """A symbolically traced model and the role of each of its fx nodes (see the module docstring)."""

    gm: fx.GraphModule
    name: str
    sample_shape: tuple[int, ...]
    dtype: torch.dtype
    kind: dict[str, str]
    alias_of: dict[str, str] = field(default_factory=dict)
    out_of_place: list[str] = field(default_factory=list)
    leaf_modules: list[str] = field(default_factory=list)  # names given as leaves (types are not recorded)

    @property
    def graph_nodes(self) -> list[fx.Node]:
        return [n for n in self.gm.graph.nodes if self.kind[n.name] == "graph"]

    @property
    def output_node(self) -> fx.Node:
        return next(n for n in self.gm.graph.nodes if n.op == "output")

    def producer(self, name: str) -> str | None:
        """The graph node whose value the fx node ``name`` is or aliases (None for inputs/constants)."""
        name = self.alias_of.get(name, name)
        return name if self.kind.get(name) == "graph" else None

    def fingerprint(self) -> str:
        """A digest of the traced code and parameter shapes: two models with the same one run identically."""
        import hashlib

        h = hashlib.sha256(self.gm.code.encode())
        for key, t in self.gm.state_dict(keep_vars=True).items():
            h.update(f"{key}:{tuple(t.shape)}:{t.dtype};".encode())
        return h.hexdigest()[:16]


class _NamingTracer(fx.Tracer):
    """An fx tracer that remembers which module was being traced when tracing failed."""

    def __init__(self, leaf_modules: Iterable[str | type]) -> None:
        super().__init__()
        self._leaf_names = {x for x in leaf_modules if isinstance(x, str)}
        self._leaf_types = tuple(x for x in leaf_modules if isinstance(x, type))

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        if qualname in self._leaf_names or (self._leaf_types and isinstance(m, self._leaf_types)):
            return True
        return super().is_leaf_module(m, qualname)

    def call_module(self, m: nn.Module, forward: Callable, args: tuple, kwargs: dict) -> Any:
        try:
            return super().call_module(m, forward, args, kwargs)
        except Exception as exc:
            if not hasattr(exc, "_remat_module"):
                exc._remat_module = (self.path_of_module(m), type(m).__name__)  # type: ignore[attr-defined]
            raise


def trace(
    model: nn.Module,
    sample_shape: tuple[int, ...],
    dtype: torch.dtype = torch.float32,
    name: str | None = None,
    leaf_modules: Iterable[str | type] = (),
) -> Trace:
    """Symbolically trace ``model`` and classify its fx nodes (see the module docstring)."""
    if not isinstance(model, nn.Module):
        raise ExtractionError(f"extract needs a torch.nn.Module, got {type(model).__name__}")
    leaf_modules = list(leaf_modules)
    tracer = _NamingTracer(leaf_modules)
    try:
        graph = tracer.trace(model)
    except Exception as exc:
        where = getattr(exc, "_remat_module", None)
        culprit = f"module {where[0]!r} ({where[1]})" if where else f"the top-level forward of {type(model).__name__}"
        raise ExtractionError(
            f"torch.fx cannot trace {culprit}: {type(exc).__name__}: {str(exc).splitlines()[0]} "
            f"Fallback: pass leaf_modules=[{where[0]!r}] to extract() so it becomes one opaque graph node "
            f"(works when its control flow depends on shapes only), or rewrite its forward without "
            f"data-dependent Python control flow (e.g. torch.where)"
            if where
            else f"torch.fx cannot trace {culprit}: {type(exc).__name__}: {str(exc).splitlines()[0]} "
            f"Fallback: rewrite that forward without data-dependent Python control flow, or move the "
            f"untraceable part into a submodule and list it in leaf_modules"
        ) from exc
    gm = fx.GraphModule(tracer.root, graph, class_name=type(model).__name__)
    _redirect_mutated_reads(gm)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != 1:
        raise ExtractionError(
            f"{type(model).__name__}.forward takes {len(placeholders)} inputs; extract supports one input "
            f"tensor: wrap the model so forward(x) takes a single batch"
        )
    leaves = [x for x in leaf_modules if isinstance(x, str)]
    label = name or type(model).__name__
    return Trace(gm=gm, name=label, sample_shape=tuple(sample_shape), dtype=dtype, kind={}, leaf_modules=leaves)


# ---------------------------------------------------------------------- execution
@dataclass
class NodeCall:
    """One graph node ready to run: ``run()`` executes it on the leaf tensors in ``inputs``.

    ``inputs`` maps each distinct fx node feeding this call to its leaf tensor
    (activations, the model input and get_attr constants alike); ``activations``
    names those that are graph nodes or aliases of one; ``params`` are the
    parameters and buffers of the called module.
    """

    node: fx.Node
    inputs: dict[str, torch.Tensor]
    activations: list[str]
    params: list[torch.Tensor]
    run: Callable[[], Any]

    def differentiable(self) -> list[torch.Tensor]:
        """The leaves a VJP of this node differentiates with respect to."""
        leaves = [t for t in self.inputs.values() if isinstance(t, torch.Tensor) and t.requires_grad]
        return leaves + [p for p in self.params if p.requires_grad]


def tensors_of(value: Any) -> list[torch.Tensor]:
    """The tensors in a node's value: itself, or the elements of a tuple/list."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def nbytes(value: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors_of(value))


def device_copy(gm: fx.GraphModule, device: torch.device | str, dtype: torch.dtype) -> fx.GraphModule:
    """A copy of ``gm`` with parameters and buffers on ``device`` in ``dtype`` and in-place flags off.

    On ``meta`` nothing is copied; on a real device parameters already there in
    the right dtype are shared (never modified: walks take no optimizer step) and
    buffers are cloned, so batch-norm statistics of the caller's model stay put.
    """
    device = torch.device(device)
    memo: dict[int, Any] = {}
    for mod in gm.modules():
        for p in mod.parameters(recurse=False):
            if id(p) in memo:
                continue
            data = _moved(p.detach(), device, dtype, clone=False)
            memo[id(p)] = nn.Parameter(data, requires_grad=p.requires_grad)
        for b in mod.buffers(recurse=False):
            if b is not None and id(b) not in memo:
                memo[id(b)] = _moved(b, device, dtype, clone=True)
    out = copy.deepcopy(gm, memo)
    for mod in out.modules():
        if getattr(mod, "inplace", False) is True:
            mod.inplace = False
    return out


def _moved(t: torch.Tensor, device: torch.device, dtype: torch.dtype, clone: bool) -> torch.Tensor:
    want = dtype if t.is_floating_point() else t.dtype
    if device.type == "meta" or t.device.type == "meta":
        return torch.empty(t.shape, dtype=want, device=device)
    moved = t.to(device=device, dtype=want)
    return moved.clone() if clone and moved is t else moved


def _out_of_place(node: fx.Node) -> tuple[Any, str, dict]:
    """The callable/method name and kwargs to run ``node`` without mutating its inputs."""
    target, kwargs = node.target, dict(node.kwargs)
    if kwargs.get("inplace") is True:
        kwargs["inplace"] = False
    if node.op == "call_function" and target in _INPLACE_OPERATORS:
        target = _INPLACE_OPERATORS[target]
    if node.op == "call_method" and isinstance(target, str) and target.endswith("_") and not target.endswith("__"):
        if hasattr(torch.Tensor, target[:-1]):
            target = target[:-1]
    return target, node.op, kwargs


def _redirect_mutated_reads(gm: fx.GraphModule) -> None:
    """Make data flow explicit for in-place ops: reads of ``x`` after ``x.add_(y)`` read that node instead.

    fx records ``y = x.add_(z); f(x)`` with ``f`` reading ``x``; running ``add_``
    out-of-place then needs ``f`` to read the ``add_`` node. (In-place writes into a
    view of another tensor are not tracked.)
    """
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    changed = False
    for node in gm.graph.nodes:
        if node.op not in ("call_module", "call_function", "call_method") or not _is_inplace(gm, node):
            continue
        target = node.args[0] if node.args else None
        if not isinstance(target, fx.Node):
            continue
        for user in list(target.users):
            if user is not node and order[user] > order[node]:
                user.replace_input_with(target, node)
                changed = True
    if changed:
        gm.recompile()


def _is_inplace(gm: fx.GraphModule, node: fx.Node) -> bool:
    if node.op == "call_module":
        return getattr(gm.get_submodule(node.target), "inplace", False) is True
    return _out_of_place(node)[0] is not node.target or node.kwargs.get("inplace") is True


def _fetch_attr(root: nn.Module, target: str) -> Any:
    obj: Any = root
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _evaluate(gm: fx.GraphModule, node: fx.Node, args: tuple, kwargs: dict, target: Any) -> Any:
    if node.op == "call_module":
        return gm.get_submodule(node.target)(*args, **kwargs)
    if node.op == "call_function":
        return target(*args, **kwargs)
    self_obj, *rest = args
    return getattr(self_obj, target)(*rest, **kwargs)


def _leafify(value: Any) -> Any:
    """A detached leaf copy (same storage) keeping ``requires_grad``."""
    if isinstance(value, torch.Tensor):
        return value.detach().requires_grad_(value.requires_grad)
    if isinstance(value, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in value):
        return type(value)(_leafify(v) for v in value)
    return value


def walk(
    tr: Trace,
    batch_size: int,
    device: torch.device | str,
    visit: Callable[[NodeCall], Any],
    make_input: Callable[[tuple[int, ...], torch.device], torch.Tensor] | None = None,
    free: bool = False,
) -> Any:
    """Run ``tr`` at ``batch_size`` on ``device``, handing each graph node to ``visit``.

    ``visit(call)`` must return the node's value (normally ``call.run()``). The
    walk returns the model output as a leaf tensor. When ``tr.kind`` is empty the
    walk also fills it in (the classifying pass). ``free`` drops values after
    their last reader, for real devices.
    """
    device = torch.device(device)
    gm = device_copy(tr.gm, device, tr.dtype)
    gm.train()  # the graph models a training step: batch statistics, active dropout
    classify = not tr.kind
    shape = (batch_size, *tr.sample_shape)
    if make_input is None:
        make_input = lambda s, d: torch.empty(s, dtype=tr.dtype, device=d)  # noqa: E731
    last_use: dict[str, str] = {}
    for node in gm.graph.nodes:
        for a in node.all_input_nodes:
            last_use[a.name] = node.name
    env: dict[str, Any] = {}
    activations: set[str] = set()  # fx names whose values are graph-node outputs (or aliases of them)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node.name] = make_input(shape, device)
            kind = "input"
        elif node.op == "get_attr":
            env[node.name] = _fetch_attr(gm, node.target)
            kind = "constant"
        elif node.op == "output":
            kind = "output"
        else:
            kind = tr.kind.get(node.name) if not classify else None
            if kind is None or kind != "graph":
                kind, value = _evaluate_plain(gm, node, env, activations, kind)
                env[node.name] = value
            if kind == "graph":
                env[node.name] = _leafify(visit(_node_call(gm, node, env, activations)))
            if kind in ("graph", "alias"):
                activations.add(node.name)
                if kind == "alias":
                    tr.alias_of[node.name] = tr.alias_of.get(node.args[0].name, node.args[0].name)
        if classify:
            tr.kind[node.name] = kind
            if kind == "graph" and _is_inplace(tr.gm, node):
                tr.out_of_place.append(node.name)
        if free and node.op != "output":
            for a in node.all_input_nodes:
                if last_use.get(a.name) == node.name:
                    env.pop(a.name, None)
    out_arg = tr.output_node.args[0]
    if not isinstance(out_arg, fx.Node) or not isinstance(env.get(out_arg.name), torch.Tensor):
        value = env.get(out_arg.name) if isinstance(out_arg, fx.Node) else out_arg
        raise ExtractionError(
            f"{tr.name}.forward returns {type(value).__name__}, not one tensor: "
            f"wrap the model so forward(x) returns the logits tensor the loss reads"
        )
    return env[out_arg.name]


def _evaluate_plain(
    gm: fx.GraphModule, node: fx.Node, env: dict, activations: set[str], kind: str | None
) -> tuple[str, Any]:
    """Evaluate a node outside any visit: aliases and aux nodes; (``"graph"``, None) for graph nodes."""
    if kind is None:
        src = node.args[0] if node.args else None
        if (
            node.op == "call_function"
            and node.target is operator.getitem
            and isinstance(src, fx.Node)
            and isinstance(env.get(src.name), (tuple, list))
            and src.name in activations
        ):
            kind = "alias"
    if kind in ("alias", "aux"):
        target, _, kwargs = _out_of_place(node)
        args = fx.node.map_arg(node.args, lambda a: env[a.name])
        kwargs = fx.node.map_arg(kwargs, lambda a: env[a.name])
        with torch.no_grad() if kind == "aux" else torch.enable_grad():
            return kind, _evaluate(gm, node, args, kwargs, target)
    # Unknown: probe it once to see whether it yields tensors.
    target, _, kwargs = _out_of_place(node)
    args = fx.node.map_arg(node.args, lambda a: env[a.name])
    kwargs = fx.node.map_arg(kwargs, lambda a: env[a.name])
    with torch.no_grad():
        value = _evaluate(gm, node, args, kwargs, target)
    if tensors_of(value):
        return "graph", None
    return "aux", value


def _node_call(gm: fx.GraphModule, node: fx.Node, env: dict, activations: set[str]) -> NodeCall:
    target, _, kwargs = _out_of_place(node)
    inputs: dict[str, Any] = {a.name: env[a.name] for a in node.all_input_nodes}
    args = fx.node.map_arg(node.args, lambda a: inputs[a.name])
    kwargs = fx.node.map_arg(kwargs, lambda a: inputs[a.name])
    params: list[torch.Tensor] = []
    if node.op == "call_module":
        mod = gm.get_submodule(node.target)
        params = list(mod.parameters()) + [b for b in mod.buffers() if b is not None]

    def run() -> Any:
        return _evaluate(gm, node, args, kwargs, target)

    acts = [a.name for a in node.all_input_nodes if a.name in activations]
    return NodeCall(node=node, inputs=inputs, activations=acts, params=params, run=run)
