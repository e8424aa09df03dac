"""Pieces of the PyTorch schedule executor: results, saved-tensor tokens, checks, the reference step, random batches.

See :mod:`remat.torch.execute` for how they fit together.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from remat.graph import DFGraph, GraphError
from remat.torch.errors import ExecutionError, StepOutOfMemory
from remat.torch.inputs import InputSpec, Sample, as_sample, random_values
from remat.torch.losses import loss_target, resolve_loss
from remat.torch.tree import Path

__all__ = ["ExecutionError", "StepOutOfMemory", "StepResult", "autograd_step", "random_batch"]


@dataclass
class StepResult:
    """One executed training step."""

    loss: float
    grads: dict[str, torch.Tensor]
    predicted_peak: float
    tracked_peak: int
    live_peak: int | None
    cuda_peak: int | None
    wall_time: float
    computes: int
    recomputes: int
    accounting_mismatches: list[str] = field(default_factory=list)
    live_between_peak: int | None = None  # live tensor storage between statements (where simulate() measures)

    def summary(self) -> dict[str, Any]:
        return {
            "loss": self.loss,
            "predicted_peak": self.predicted_peak,
            "tracked_peak": self.tracked_peak,
            "live_peak": self.live_peak,
            "live_between_peak": self.live_between_peak,
            "cuda_peak": self.cuda_peak,
            "wall_time": self.wall_time,
            "recomputes": self.recomputes,
        }


class _Entry(torch.autograd.Function):
    """The start of one node's autograd graph: a view of a register that holds no reference to it."""

    @staticmethod
    def forward(ctx: Any, anchor: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None]:
        return None, None


class _Saved:
    """What a saved-tensor pack hook returns: the tensor itself, or a token naming its register."""

    __slots__ = ("tensor", "node", "path", "size", "stride", "offset", "extra")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor: torch.Tensor | None = tensor
        self.node = -1
        self.path: Path = ()
        self.extra = -1


@dataclass
class _Register:
    node: int
    value: Any  # forward: output; loss/backward: {producer: {path: grad}}
    extras: list[torch.Tensor]
    nbytes: int


@dataclass
class _NodeGraph:
    """The autograd graph of one forward computation of one node."""

    outputs: dict[Path, Any]  # path -> GradientEdge
    entries: list[tuple[tuple[int, Path], tuple[Any, tuple]]]  # (producer, path) -> (edge, (shape, dtype, device))
    params: list[nn.Parameter]
    saved: list[_Saved]


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


@contextlib.contextmanager
def _no_inplace_modules(model: nn.Module) -> Iterator[None]:
    # The graph models every op out of place; modules with inplace=True are switched for the step.
    flipped = [m for m in model.modules() if getattr(m, "inplace", False) is True]
    for m in flipped:
        m.inplace = False
    try:
        yield
    finally:
        for m in flipped:
            m.inplace = True


def _oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and ("out of memory" in str(exc) or "can't allocate memory" in str(exc))
    )


def _rng_state(device: torch.device) -> tuple:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def _set_rng_state(device: torch.device, state: tuple) -> None:
    torch.set_rng_state(state[0])
    if device.type == "cuda":
        torch.cuda.set_rng_state(state[1], device)


def _same_rng(a: tuple, b: tuple) -> bool:
    return torch.equal(a[0], b[0]) and (a[1] is None or torch.equal(a[1], b[1]))


_NEEDED_METADATA = ("fx_nodes", "backward_of", "forward_of", "loss", "input_shape")


def _check_graph(graph: DFGraph) -> None:
    if not isinstance(graph, DFGraph):
        raise ExecutionError(f"graph must be a remat DFGraph, got {type(graph).__name__}")
    try:
        graph.require_training_structure("the PyTorch executor")
    except GraphError as exc:
        raise ExecutionError(str(exc)) from exc
    missing = [k for k in _NEEDED_METADATA if k not in graph.metadata]
    if missing:
        raise ExecutionError(
            f"graph {graph.name!r} lacks the PyTorch metadata {missing}: extract it with "
            f"remat.torch.extract.extract(model, ...) to execute it"
        )


def _check_model(tr: Any, st: Any, graph: DFGraph) -> None:
    """Name the first forward node where the traced model and the graph differ."""
    L = graph.loss
    ours = [info.name for info in st.nodes]
    theirs = list(graph.names[:L])
    ops = graph.metadata.get("fx_ops", [None] * L)
    for u in range(max(len(ours), L)):
        a = theirs[u] if u < L else None
        b = ours[u] if u < len(ours) else None
        if a != b:
            raise ExecutionError(
                f"model and graph differ at forward node {u}: the graph has {a!r} ({ops[u] if u < L else '-'}), "
                f"the model traces to {b!r} ({st.nodes[u].op if b else '-'}); extract the graph from this model"
            )
    for u, info in enumerate(st.nodes):
        extra = sum(b for _, b in info.extra_slots)
        if not info.out_bytes <= graph.memory[u] <= info.out_bytes + extra:
            raise ExecutionError(
                f"model and graph differ at forward node {u} {info.name!r} ({info.op}): it outputs "
                f"{info.out_bytes} bytes at batch {graph.batch_size}, the graph says {int(graph.memory[u])}; "
                f"extract the graph from this model (same layer sizes and input shape)"
            )
    fp = graph.metadata.get("structure")
    if fp is not None and fp != tr.fingerprint():
        raise ExecutionError(
            f"model and graph {graph.name!r} differ in parameter shapes or code although every node's output "
            f"matches: extract the graph from this model"
        )


def graph_inputs(graph: DFGraph) -> list[InputSpec]:
    """The input specs a graph was extracted for (graphs from before specs were recorded: one float input)."""
    md = graph.metadata
    if md.get("inputs"):
        return [InputSpec.from_dict(d) for d in md["inputs"]]
    return [InputSpec(name="x", tensor=True, shape=tuple(md["input_shape"]), dtype=md.get("dtype", "float32"))]


def autograd_step(model: nn.Module, sample: Any, target: Any, loss: Any) -> float:
    """The reference: plain forward, loss and ``backward()`` (gradients accumulated into ``.grad``)."""
    s = as_sample(sample)
    value = resolve_loss(loss).fn(model(*s.args, **s.kwargs), target)
    value.backward()
    return float(value.detach())


def random_batch(graph: DFGraph, generator: torch.Generator, device: torch.device | str = "cpu") -> tuple:
    """A random input batch and target like those ``graph`` was extracted for.

    The batch is one tensor when the model takes one, else a
    :class:`~remat.torch.inputs.Sample` of keyword inputs; the target is ``None``
    for a callable loss extracted without one.
    """
    md = graph.metadata
    specs = graph_inputs(graph)
    values = random_values(specs, graph.batch_size, generator, device)
    given = {s.name: v for s, v in zip(specs, values, strict=True) if s.given}
    tensors = [s for s in specs if s.given and s.tensor]
    sample: Any = given[tensors[0].name] if len(given) == 1 and specs[0].given else Sample(**given)
    loss = resolve_loss(md["loss"]) if not str(md["loss"]).startswith("callable:") else None
    if loss is not None:
        out = md["output_shape"]
        shape = tuple(loss_target(loss.name, torch.empty(out, device="meta")).shape)
        if loss.name == "mse":
            return sample, torch.randn(shape, generator=generator).to(device)
        high = out[-1] if loss.name == "token_cross_entropy" else out[1]
        return sample, torch.randint(0, high, shape, generator=generator).to(device)
    spec = md.get("target")
    if spec is None:
        return sample, None
    return sample, random_values([InputSpec.from_dict(spec)], graph.batch_size, generator, device)[0]
