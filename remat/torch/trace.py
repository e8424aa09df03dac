"""torch.fx tracing shared by the extractor, the cost models and the executor.

:func:`trace` turns an ``nn.Module`` and the description of its inputs (one
:class:`~remat.torch.inputs.InputSpec` per ``forward`` parameter) into a
:class:`Trace`: the ``torch.fx`` GraphModule, with parameters that are not
tensors fixed (``concrete_args``) and in-place writes made explicit. The first
walk of :mod:`remat.torch.walk` then records the role of every fx node:

* ``"graph"`` - a call that creates tensors (one or a container of them): one
  forward node of the data-flow graph;
* ``"alias"`` - a call whose tensors all share storage with its inputs' (views:
  ``view``, ``transpose``, ``permute``, ``x[:, 0]``, ``chunk``, ``nn.Flatten``,
  ``nn.Identity``; ``getitem``/``getattr`` on a tuple, dict or output object;
  building such a container, e.g. a model-output dataclass): no graph node and
  no memory; whoever reads it reads the graph nodes it aliases (its *sources*)
  and re-applies the call, which costs nothing;
* ``"aux"`` - a call producing no tensor that depends on shapes only
  (``x.size(0)``, ``x.shape[-1] ** -0.5``, ``x.dtype``): evaluated on ``meta``
  at the graph's batch and kept;
* ``"dynamic"`` - a call producing no tensor that needs the real values
  (``x.device``): evaluated when read, so its sources must be resident then;
* ``"input"``, ``"constant"``, ``"output"`` - placeholders, ``get_attr`` and the output.

``Trace.sources[name]`` lists the graph nodes an fx node needs resident to be
evaluated: itself for graph nodes, the union over its inputs for aliases and
dynamic values, nothing for the rest. In-place operations run as their
out-of-place versions (``add_`` as ``add``, ``x[i] = v`` as a copy with ``i``
replaced), and later reads of the mutated tensor read the new node; an in-place
write into a view or into a parameter or buffer is refused (it would change
another tensor behind the graph's back).
"""

from __future__ import annotations

import copy
import hashlib
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch import nn

from remat.torch.errors import ExtractionError
from remat.torch.inputs import InputSpec, concrete_args

__all__ = ["ExtractionError", "Trace", "trace"]

_INPLACE_OPERATORS = {
    operator.iadd: operator.add,
    operator.isub: operator.sub,
    operator.imul: operator.mul,
    operator.itruediv: operator.truediv,
}


def set_item(x: torch.Tensor, index: Any, value: Any) -> torch.Tensor:
    """``x[index] = value`` out of place: a copy of ``x`` with that part replaced."""
    out = x.clone()
    out[index] = value
    return out


@dataclass
class Trace:
    """A symbolically traced model and the role of each of its fx nodes (see the module docstring)."""

    gm: fx.GraphModule
    name: str
    dtype: torch.dtype  # of the parameters and buffers
    inputs: list[InputSpec]
    device: str  # the device type that will run the step ("cpu", "cuda"): fused kernels are chosen for it
    kind: dict[str, str] = field(default_factory=dict)
    sources: dict[str, tuple[str, ...]] = field(default_factory=dict)
    out_of_place: list[str] = field(default_factory=list)
    leaf_modules: list[str] = field(default_factory=list)  # names given as leaves (types are not recorded)

    @property
    def graph_nodes(self) -> list[fx.Node]:
        return [n for n in self.gm.graph.nodes if self.kind[n.name] == "graph"]

    @property
    def output_node(self) -> fx.Node:
        return next(n for n in self.gm.graph.nodes if n.op == "output")

    @property
    def placeholders(self) -> list[fx.Node]:
        return [n for n in self.gm.graph.nodes if n.op == "placeholder"]

    def fingerprint(self) -> str:
        """A digest of the traced code and parameter shapes: two models with the same one run identically."""
        h = hashlib.sha256(self.gm.code.encode())
        for key, t in self.gm.state_dict(keep_vars=True).items():
            h.update(f"{key}:{tuple(t.shape)}:{t.dtype};".encode())
        return h.hexdigest()[:16]


class _WritableProxy(fx.Proxy):
    """A proxy that records ``x[i] = v`` (plain fx proxies refuse item assignment) as an ``operator.setitem`` node."""

    def __setitem__(self, key: Any, value: Any) -> None:
        self.tracer.create_proxy("call_function", operator.setitem, (self, key, value), {})


class _NamingTracer(fx.Tracer):
    """An fx tracer that remembers which module was being traced when tracing failed, and records item writes."""

    def proxy(self, node: fx.Node) -> fx.Proxy:
        return _WritableProxy(node, self)

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


def model_dtype(model: nn.Module) -> torch.dtype:
    """The dtype of the model's first floating parameter or buffer (float32 when it has none)."""
    for t in [*model.parameters(), *model.buffers()]:
        if t is not None and t.is_floating_point():
            return t.dtype
    return torch.float32


def execution_device(model: nn.Module) -> str:
    """The device type that will run ``model``: its parameters' (for a meta model: CUDA if present, else CPU)."""
    for t in [*model.parameters(), *model.buffers()]:
        if t is not None and t.device.type != "meta":
            return t.device.type
    return "cuda" if torch.cuda.is_available() else "cpu"


def trace(
    model: nn.Module,
    inputs: list[InputSpec],
    dtype: torch.dtype | None = None,
    name: str | None = None,
    leaf_modules: Iterable[str | type] = (),
) -> Trace:
    """Symbolically trace ``model`` for ``inputs`` (see the module docstring); roles are filled in by a walk."""
    if not isinstance(model, nn.Module):
        raise ExtractionError(f"extract needs a torch.nn.Module, got {type(model).__name__}")
    leaf_modules = list(leaf_modules)
    tracer = _NamingTracer(leaf_modules)
    try:
        graph = tracer.trace(model, concrete_args=concrete_args(inputs) or None)
    except Exception as exc:
        raise _trace_error(model, exc) from exc
    gm = fx.GraphModule(tracer.root, graph, class_name=type(model).__name__)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise ExtractionError(
            f"{type(model).__name__}.forward traced to {len(placeholders)} inputs but has {len(inputs)} parameters: "
            f"wrap the model so forward names each input"
        )
    _rewrite_inplace(gm)
    leaves = [x for x in leaf_modules if isinstance(x, str)]
    return Trace(gm=gm, name=name or type(model).__name__, dtype=dtype or model_dtype(model), inputs=list(inputs),
                 device=execution_device(model), leaf_modules=leaves)


def _trace_error(model: nn.Module, exc: Exception) -> ExtractionError:
    where = getattr(exc, "_remat_module", None)
    what = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if where:
        return ExtractionError(
            f"torch.fx cannot trace module {where[0]!r} ({where[1]}): {what} Fallback: pass "
            f"leaf_modules=[{where[0]!r}] so it becomes one opaque graph node (works when its control flow "
            f"depends on shapes only), or rewrite its forward without data-dependent Python control flow "
            f"(e.g. torch.where)"
        )
    return ExtractionError(
        f"torch.fx cannot trace the top-level forward of {type(model).__name__}: {what} Fallback: rewrite that "
        f"forward without data-dependent Python control flow, or move the untraceable part into a submodule and "
        f"list it in leaf_modules"
    )


def module_path(node: fx.Node) -> str | None:
    """The module an fx node was traced in (its own path for ``call_module``), or None at the top level."""
    if node.op == "call_module":
        return str(node.target)
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        path = list(stack.values())[-1][0]
        return str(path) or None
    return None


def describe(node: fx.Node) -> str:
    """``op 'target' (fx node name, in module 'path')`` for error messages."""
    target = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", str(node.target))
    where = module_path(node)
    return f"{node.op} {target!r} (fx node {node.name!r}{f', in module {where!r}' if where else ''})"


# ---------------------------------------------------------------------- in-place writes
def _out_of_place(node: fx.Node) -> tuple[Any, str, dict]:
    """The callable/method name and kwargs to run ``node`` without mutating its inputs."""
    target, kwargs = node.target, dict(node.kwargs)
    if kwargs.get("inplace") is True:
        kwargs["inplace"] = False
    if node.op == "call_function" and target in _INPLACE_OPERATORS:
        target = _INPLACE_OPERATORS[target]
    if node.op == "call_function" and target is operator.setitem:
        target = set_item
    if node.op == "call_method" and isinstance(target, str) and target.endswith("_") and not target.endswith("__"):
        if hasattr(torch.Tensor, target[:-1]):
            target = target[:-1]
    return target, node.op, kwargs


def is_inplace(gm: fx.GraphModule, node: fx.Node) -> bool:
    if node.op == "call_module":
        return getattr(gm.get_submodule(node.target), "inplace", False) is True
    if node.op not in ("call_function", "call_method"):
        return False
    return _out_of_place(node)[0] is not node.target or node.kwargs.get("inplace") is True


def _rewrite_inplace(gm: fx.GraphModule) -> None:
    """Make data flow explicit for in-place ops: reads of ``x`` after ``x.add_(y)`` read that node instead.

    fx records ``y = x.add_(z); f(x)`` with ``f`` reading ``x``, and ``x[i] = v``
    as a ``setitem`` node whose value nobody reads; running them out of place
    then needs the later readers of ``x`` to read the new node.
    """
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    changed = False
    for node in list(gm.graph.nodes):
        if not is_inplace(gm, node):
            continue
        target = node.args[0] if node.args else None
        if not isinstance(target, fx.Node):
            continue
        if target.op == "get_attr":
            raise ExtractionError(
                f"{describe(node)} writes in place into the parameter or buffer {target.target!r}: make the module "
                f"that does it a leaf (leaf_modules=[{module_path(node) or '...'!r}]) or write it out of place"
            )
        for user in list(target.users):
            if user is not node and order[user] > order[node]:
                user.replace_input_with(target, node)
                changed = True
    if changed:
        gm.recompile()


def fetch_attr(root: nn.Module, target: str) -> Any:
    obj: Any = root
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def evaluate(gm: fx.GraphModule, node: fx.Node, args: tuple, kwargs: dict) -> Any:
    """Run ``node`` out of place on concrete ``args``/``kwargs`` (already mapped from its input nodes)."""
    target, _, kwargs = _out_of_place_with(node, kwargs)
    if node.op == "call_module":
        return gm.get_submodule(node.target)(*args, **kwargs)
    if node.op == "call_function":
        return target(*args, **kwargs)
    self_obj, *rest = args
    return getattr(self_obj, target)(*rest, **kwargs)


def _out_of_place_with(node: fx.Node, kwargs: dict) -> tuple[Any, str, dict]:
    target, op, _ = _out_of_place(node)
    kwargs = dict(kwargs)
    if kwargs.get("inplace") is True:
        kwargs["inplace"] = False
    return target, op, kwargs


def device_copy(gm: fx.GraphModule, device: torch.device | str, dtype: torch.dtype) -> fx.GraphModule:
    """A copy of ``gm`` with parameters and buffers on ``device`` in ``dtype`` and in-place flags off.

    On ``meta`` nothing is copied; on a real device parameters already there in
    the right dtype are shared (never modified: walks take no optimizer step) and
    buffers are cloned, so batch-norm statistics of the caller's model stay put.
    Tied parameters stay tied.
    """
    device = torch.device(device)
    memo: dict[int, Any] = {}
    for mod in gm.modules():
        for p in mod.parameters(recurse=False):
            if id(p) not in memo:
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
