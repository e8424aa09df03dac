"""Model zoo of the paper's §6: VGG16, VGG19, ResNet50, MobileNet v1, U-Net, FCN8, SegNet.

``get_model(name)`` builds a randomly initialised model (nothing is downloaded;
torchvision definitions with ``weights=None``); ``model_spec(name)`` gives the
paper's input shape, batch size and class count; ``zoo_graph(name)`` extracts its
training graph; :func:`activation_memory_table` gives the data of Fig. 3.
In-place activations of the torchvision models are switched off, because the
extractor and any executor of its graphs treat every op as out-of-place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from remat.graph import DFGraph


@dataclass(frozen=True)
class ModelSpec:
    """The paper's setting for a zoo model (§6.3, §6.4, Fig. 3)."""

    name: str
    input_shape: tuple[int, int, int]  # (C, H, W)
    batch_size: int
    num_classes: int
    task: str  # "classification" or "segmentation"
    reference: str  # short name of the matching graph in shared/data/graphs


def _torchvision(fn_name: str) -> Callable[[int], nn.Module]:
    def build(num_classes: int) -> nn.Module:
        import torchvision.models as tvm

        return getattr(tvm, fn_name)(weights=None, num_classes=num_classes)

    return build


def _local(cls_path: str) -> Callable[[int], nn.Module]:
    def build(num_classes: int) -> nn.Module:
        module, cls = cls_path.rsplit(".", 1)
        import importlib

        return getattr(importlib.import_module(module), cls)(num_classes=num_classes)

    return build


_CLS, _SEG = (3, 224, 224), (3, 416, 608)
SPECS: dict[str, ModelSpec] = {
    "vgg16": ModelSpec("vgg16", _CLS, 256, 1000, "classification", "vgg16"),
    "vgg19": ModelSpec("vgg19", _CLS, 256, 1000, "classification", "vgg19"),
    "mobilenet": ModelSpec("mobilenet", _CLS, 512, 1000, "classification", "mobilenet"),
    "resnet50": ModelSpec("resnet50", _CLS, 256, 1000, "classification", "resnet50"),
    "unet": ModelSpec("unet", _SEG, 32, 19, "segmentation", "vgg_unet"),
    "fcn8": ModelSpec("fcn8", _SEG, 32, 19, "segmentation", "fcn8_vgg"),
    "segnet": ModelSpec("segnet", _SEG, 32, 19, "segmentation", "segnet"),
}
_BUILDERS: dict[str, Callable[[int], nn.Module]] = {
    "vgg16": _torchvision("vgg16"),
    "vgg19": _torchvision("vgg19"),
    "resnet50": _torchvision("resnet50"),
    "mobilenet": _local("remat.models.mobilenet.MobileNetV1"),
    "unet": _local("remat.models.segmentation.VGGUNet"),
    "fcn8": _local("remat.models.segmentation.FCN8"),
    "segnet": _local("remat.models.segmentation.SegNet"),
}
ALIASES = {"vgg_unet": "unet", "u-net": "unet", "fcn8_vgg": "fcn8", "fcn": "fcn8", "mobilenet_v1": "mobilenet"}


class UnknownModelError(ValueError):
    """A model name the zoo does not know; the message lists the known ones."""


def model_names() -> list[str]:
    return list(SPECS)


def canonical_name(name: str) -> str:
    key = str(name).lower()
    key = ALIASES.get(key, key)
    if key not in SPECS:
        raise UnknownModelError(
            f"unknown model {name!r}; known models: {', '.join(SPECS)} (aliases: {', '.join(ALIASES)})"
        )
    return key


def model_spec(name: str) -> ModelSpec:
    """The paper's input shape (C, H, W), batch size and number of classes for ``name``."""
    return SPECS[canonical_name(name)]


def get_model(name: str, num_classes: int | None = None, device: str | torch.device | None = None) -> nn.Module:
    """A randomly initialised zoo model; ``device="meta"`` builds it without allocating parameters."""
    key = canonical_name(name)
    classes = SPECS[key].num_classes if num_classes is None else int(num_classes)
    if classes < 1:
        raise ValueError(f"num_classes must be positive, got {num_classes!r}")
    if device is None:
        model = _BUILDERS[key](classes)
    else:
        with torch.device(device):
            model = _BUILDERS[key](classes)
    for mod in model.modules():
        if getattr(mod, "inplace", False) is True:
            mod.inplace = False
    return model


def zoo_graph(
    name: str,
    batch_size: int | None = None,
    input_shape: tuple[int, ...] | None = None,
    cost_model: str = "flops",
    **extract_options: Any,
) -> DFGraph:
    """The training graph of zoo model ``name`` (paper batch and resolution unless given).

    With ``cost_model="flops"`` the model is built on the meta device, so even
    the paper's batch sizes cost no memory.
    """
    from remat.torch.extract import extract

    spec = model_spec(name)
    model = get_model(spec.name, device="meta" if cost_model == "flops" else None)
    return extract(
        model,
        input_shape or spec.input_shape,
        batch_size or spec.batch_size,
        cost_model=cost_model,
        name=spec.name,
        **extract_options,
    )


def activation_memory_table(
    batch_sizes: Mapping[str, int] | int | None = None, models: list[str] | None = None
) -> list[dict[str, Any]]:
    """Fig. 3's data: activation vs parameter memory per zoo model at the paper's batch sizes.

    ``batch_sizes`` overrides the batch per model (a mapping) or for all (an int).
    Per row: ``activation_bytes`` is every forward node's output (what a framework
    that keeps all layer outputs holds), ``saved_activation_bytes`` the outputs some
    backward node reads (what checkpoint-all keeps through the loss),
    ``parameter_bytes`` the weights (their gradients take as much again), and
    ``input_bytes`` the input batch and loss target. Shapes only: each graph is
    extracted on the meta device at batch 1 and rescaled. ``models`` restricts the
    table to some zoo models (default: all, in zoo order).
    """
    rows = []
    for name in [canonical_name(m) for m in models] if models else list(SPECS):
        spec = SPECS[name]
        if isinstance(batch_sizes, Mapping):
            batch = int(batch_sizes.get(name, spec.batch_size))
        else:
            batch = int(batch_sizes or spec.batch_size)
        g = zoo_graph(name, batch_size=1).with_batch_size(batch)
        fwd = g.forward_nodes
        read_later = {int(i) for i, j in g.edges if i < g.loss and j > g.loss}
        rows.append(
            {
                "model": name,
                "batch_size": batch,
                "input_shape": "x".join(map(str, spec.input_shape)),
                "activation_bytes": int(g.memory[fwd].sum()),
                "saved_activation_bytes": int(sum(g.memory[i] for i in read_later)),
                "parameter_bytes": int(g.metadata["parameter_bytes"]),
                "input_bytes": int(g.input_memory),
            }
        )
    return rows
