"""Tensors inside the values models pass around: tuples, lists, named tuples, dicts, model-output objects.

A *path* names one tensor inside a value: ``()`` for the value itself, ``(0,)``
for the first element of a tuple, ``("logits",)`` for a dict entry or a
dataclass field (Hugging Face's ``ModelOutput`` is both a dict and a dataclass;
it is walked as a dict). Everything else (ints, shapes, None) holds no tensor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

Path = tuple[Any, ...]


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def _children(value: Any) -> list[tuple[Any, Any]] | None:
    if isinstance(value, Mapping):
        return list(value.items())
    if isinstance(value, (tuple, list)):
        return list(enumerate(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    return None


def flatten(value: Any, path: Path = ()) -> Iterator[tuple[Path, torch.Tensor]]:
    """Every tensor in ``value`` with its path, depth first in order."""
    if isinstance(value, torch.Tensor):
        yield path, value
        return
    children = _children(value)
    for key, child in children or ():
        yield from flatten(child, (*path, key))


def tensors_of(value: Any) -> list[torch.Tensor]:
    """The tensors in ``value`` (itself, or those inside its containers)."""
    return [t for _, t in flatten(value)]


def has_tensor(value: Any) -> bool:
    return next(flatten(value), None) is not None


def at(value: Any, path: Path) -> Any:
    """The part of ``value`` that ``path`` names."""
    for key in path:
        value = value[key] if isinstance(value, (Mapping, tuple, list)) else getattr(value, key)
    return value


def map_tensors(value: Any, fn: Callable[[Path, torch.Tensor], Any], path: Path = ()) -> Any:
    """``value`` rebuilt with every tensor ``t`` at path ``p`` replaced by ``fn(p, t)``."""
    if isinstance(value, torch.Tensor):
        return fn(path, value)
    if not has_tensor(value):
        return value
    if isinstance(value, Mapping):
        items = {k: map_tensors(v, fn, (*path, k)) for k, v in value.items()}
        try:
            return type(value)(**items) if type(value) is not dict else items
        except TypeError:
            return type(value)(items)
    if _is_namedtuple(value):
        return type(value)(*(map_tensors(v, fn, (*path, k)) for k, v in enumerate(value)))
    if isinstance(value, (tuple, list)):
        return type(value)(map_tensors(v, fn, (*path, k)) for k, v in enumerate(value))
    if dataclasses.is_dataclass(value):
        changes = {f.name: map_tensors(getattr(value, f.name), fn, (*path, f.name)) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **changes)
    return value


def nbytes(value: Any) -> int:
    """Bytes of the storages the tensors in ``value`` keep alive, each storage counted once.

    A tensor that views part of a larger storage (``q`` of a fused q/k/v
    projection) keeps all of it alive, so the storage's size is what counts.
    """
    seen: dict[int, int] = {}
    for t in tensors_of(value):
        seen[storage_key(t)] = t.untyped_storage().nbytes()
    return sum(seen.values())


def tensor_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of ``tensors``, each counted (gradient registers: two inputs of an add may share one gradient)."""
    return sum(t.numel() * t.element_size() for t in tensors)


def storage_key(t: torch.Tensor) -> int:
    """Identifies ``t``'s storage, also on the meta device (views and ``detach()`` share it)."""
    return t.untyped_storage()._cdata
