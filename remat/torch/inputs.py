"""What a model is called with: the sample a user passes, one :class:`InputSpec` per forward parameter.

A *sample* is what ``model(...)`` takes for one batch: a tensor (one positional
input), a tuple or list (positional inputs), a dict (keyword inputs, e.g.
``{"input_ids": ids, "attention_mask": mask}``) or :class:`Sample` for both
(``Sample(ids, attention_mask=mask)``). It is traced as given: each tensor keeps
its dtype and shape (token ids stay ``long``); the batch is the first dimension
of the first tensor, and a tensor is *batched* when its first dimension equals
it (so it doubles when the graph is probed at twice the batch). Non-tensor
values (``return_dict=False``) and the defaults of parameters not given are
fixed: the traced model is specialised to them, and the executor checks that
later calls pass the same.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from remat.torch.errors import ExecutionError, ExtractionError

_JSON_SCALARS = (type(None), bool, int, float, str)


class Sample:
    """Positional and keyword inputs of one call of a model: ``Sample(ids, attention_mask=mask)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs

    def __repr__(self) -> str:
        return f"Sample({len(self.args)} positional, keywords {sorted(self.kwargs)})"


@dataclass(frozen=True)
class InputSpec:
    """One parameter of ``forward``: a tensor input (per-sample shape and dtype) or a fixed value."""

    name: str
    tensor: bool
    shape: tuple[int, ...] = ()  # without the batch dimension when batched
    dtype: str = "float32"
    batched: bool = True
    high: int | None = None  # integer tensors: one more than the sample's largest value
    value: Any = None  # non-tensors: the value forward is specialised to
    given: bool = True  # False: the parameter's default was used

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> InputSpec:
        return InputSpec(**{**d, "shape": tuple(d.get("shape", ()))})

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def full_shape(self, batch: int) -> tuple[int, ...]:
        return (batch, *self.shape) if self.batched else tuple(self.shape)

    def nbytes(self, batch: int) -> int:
        if not self.tensor:
            return 0
        n = 1
        for d in self.full_shape(batch):
            n *= d
        return n * torch.empty((), dtype=self.torch_dtype).element_size()


def as_sample(obj: Any) -> Sample:
    """The :class:`Sample` a tensor, tuple/list, dict or Sample stands for."""
    if isinstance(obj, Sample):
        return obj
    if isinstance(obj, torch.Tensor):
        return Sample(obj)
    if isinstance(obj, Mapping):
        return Sample(**obj)
    if isinstance(obj, (tuple, list)):
        return Sample(*obj)
    raise ExtractionError(
        f"a sample is the model's input for one batch: a tensor, a tuple of inputs, a dict of keyword inputs "
        f"or remat.torch.Sample(*args, **kwargs); got {type(obj).__name__}"
    )


def is_shape(obj: Any) -> bool:
    """Whether ``obj`` is a per-sample shape such as ``(3, 224, 224)`` (the older way to describe an input)."""
    return isinstance(obj, (tuple, list)) and len(obj) > 0 and all(
        isinstance(d, int) and not isinstance(d, bool) for d in obj
    )


def _parameters(model: nn.Module) -> list[inspect.Parameter]:
    params = list(inspect.signature(model.forward).parameters.values())
    varargs = [p.name for p in params if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if varargs:
        raise ExtractionError(
            f"{type(model).__name__}.forward takes *{varargs[0]}: torch.fx traces named parameters only; wrap the "
            f"model in a module whose forward names each input"
        )
    return params


def _fixed(name: str, value: Any, given: bool) -> InputSpec:
    if not isinstance(value, _JSON_SCALARS):
        raise ExtractionError(
            f"input {name!r} is a {type(value).__name__}: inputs must be tensors or plain values (None, bool, int, "
            f"float, str) the traced model is specialised to; wrap the model so forward takes tensors"
        )
    return InputSpec(name=name, tensor=False, value=value, given=given, batched=False)


def bind(model: nn.Module, sample: Any) -> tuple[list[InputSpec], list[Any], int]:
    """Match ``sample`` to ``model.forward``'s parameters: specs and values in parameter order, and the batch."""
    sample = as_sample(sample)
    params = _parameters(model)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(sample.args) > len(positional):
        raise ExtractionError(
            f"the sample has {len(sample.args)} positional inputs but {type(model).__name__}.forward takes "
            f"{len(positional)}"
        )
    given = dict(zip([p.name for p in positional], sample.args, strict=False))
    for key, value in sample.kwargs.items():
        if key in given or key not in {p.name for p in params}:
            why = "is given twice" if key in given else f"is not a parameter of {type(model).__name__}.forward"
            raise ExtractionError(f"sample input {key!r} {why}; parameters: {[p.name for p in params]}")
        given[key] = value
    tensors = [v for v in given.values() if isinstance(v, torch.Tensor) and v.dim() >= 1]
    if not tensors:
        raise ExtractionError("the sample holds no tensor with a batch dimension: give the input batch")
    batch = int(tensors[0].shape[0])
    specs, values = [], []
    for p in params:
        if p.name in given:
            value = given[p.name]
            if isinstance(value, torch.Tensor):
                specs.append(tensor_spec(p.name, value, batch))
            else:
                specs.append(_fixed(p.name, value, True))
            values.append(value)
        elif p.default is not inspect.Parameter.empty:
            specs.append(_fixed(p.name, p.default, False))
            values.append(p.default)
        else:
            raise ExtractionError(f"{type(model).__name__}.forward needs {p.name!r}: put it in the sample")
    return specs, values, batch


def tensor_spec(name: str, t: torch.Tensor, batch: int) -> InputSpec:
    batched = t.dim() >= 1 and int(t.shape[0]) == batch
    high = None
    if not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool and t.device.type != "meta":
        high = int(t.max()) + 1 if t.numel() else 1
    shape = tuple(int(d) for d in (t.shape[1:] if batched else t.shape))
    return InputSpec(name=name, tensor=True, shape=shape, dtype=str(t.dtype).replace("torch.", ""), batched=batched,
                     high=high)


def shape_specs(model: nn.Module, sample_shape: tuple[int, ...], dtype: torch.dtype) -> list[InputSpec]:
    """Specs for the older form ``(sample_shape, batch)``: one float input, every other parameter at its default."""
    params = _parameters(model)
    if not params:
        raise ExtractionError(f"{type(model).__name__}.forward takes no input")
    specs = [InputSpec(name=params[0].name, tensor=True, shape=tuple(sample_shape), dtype=str(dtype).split(".")[-1])]
    for p in params[1:]:
        if p.default is inspect.Parameter.empty:
            raise ExtractionError(
                f"{type(model).__name__}.forward also needs {p.name!r}: pass a sample of real inputs instead of a shape"
            )
        specs.append(_fixed(p.name, p.default, False))
    return specs


def concrete_args(specs: list[InputSpec]) -> dict[str, Any]:
    """The fixed (non-tensor) parameters, as torch.fx's ``concrete_args``."""
    return {s.name: s.value for s in specs if not s.tensor}


def example_values(specs: list[InputSpec], batch: int, device: torch.device | str = "meta") -> list[Any]:
    """One value per parameter: an empty tensor of each input's shape at ``batch``, the fixed values as they are."""
    return [
        torch.empty(s.full_shape(batch), dtype=s.torch_dtype, device=device) if s.tensor else s.value for s in specs
    ]


def random_values(specs: list[InputSpec], batch: int, generator: torch.Generator, device: Any = "cpu") -> list[Any]:
    """Random inputs like the sample: normal floats, integers below ``high`` (0/1 ones as all-ones masks)."""
    out: list[Any] = []
    for s in specs:
        if not s.tensor:
            out.append(s.value)
            continue
        shape, dtype = s.full_shape(batch), s.torch_dtype
        if dtype.is_floating_point:
            t = torch.randn(shape, generator=generator, dtype=dtype)
        elif dtype == torch.bool or (s.high is not None and s.high <= 2):
            t = torch.ones(shape, dtype=dtype)
        else:
            t = torch.randint(0, s.high or 2, shape, generator=generator, dtype=dtype)
        out.append(t.to(device))
    return out


def bind_call(specs: list[InputSpec], args: tuple, kwargs: dict, batch: int, who: str) -> list[Any]:
    """The values of a later call ``model(*args, **kwargs)`` in parameter order, checked against the specs."""
    names = [s.name for s in specs]
    if len(args) > len(names):
        raise ExecutionError(f"{who}: {len(args)} positional inputs, the model takes {len(names)}")
    given = dict(zip(names, args, strict=False))
    for key, value in kwargs.items():
        if key not in names or key in given:
            raise ExecutionError(f"{who}: unexpected or repeated input {key!r}; the graph's inputs: {names}")
        given[key] = value
    values = []
    for s in specs:
        if s.tensor:
            v = given.get(s.name)
            if not isinstance(v, torch.Tensor) or tuple(v.shape) != s.full_shape(batch) or v.dtype != s.torch_dtype:
                got = f"{tuple(v.shape)} {v.dtype}" if isinstance(v, torch.Tensor) else type(v).__name__
                raise ExecutionError(
                    f"{who}: input {s.name!r} is {got}, the graph was extracted for {s.full_shape(batch)} "
                    f"{s.dtype}: extract the graph (or graph.with_batch_size(B) and re-solve) for this batch"
                )
            values.append(v)
        else:
            v = given.get(s.name, s.value)
            if v != s.value or type(v) is not type(s.value):
                raise ExecutionError(f"{who}: input {s.name!r} is {v!r}; the traced model is fixed to {s.value!r}")
            values.append(v)
    return values
