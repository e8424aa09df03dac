"""Model zoo: the paper's §6 models (VGG16, VGG19, ResNet50, MobileNet v1, U-Net, FCN8, SegNet) and today's.

Today's models: a GPT-2-style decoder and a BERT-style encoder (written here,
:mod:`remat.models.transformers`), torchvision's ViT-B/16 and ResNet-18. Every
model is built randomly initialised (nothing is downloaded; torchvision
definitions with ``weights=None``) by ``get_model(name, **sizes)``; sizes are
keyword arguments (``n_layer``, ``d_model``... for the transformers, those of
``VisionTransformer`` for ViT), the defaults are the published ones.
``model_spec(name)`` gives the default input shape, batch size, class count and
loss; ``zoo_sample(name, model)`` a sample batch and target like the model
takes (token ids and an attention mask for BERT); ``zoo_graph(name)`` extracts
its training graph; :func:`activation_memory_table` gives the data of Fig. 3.
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
    """A zoo model's default setting (the paper's §6.3, §6.4, Fig. 3 for its models)."""

    name: str
    input_shape: tuple[int, ...]  # per sample: (C, H, W) for images, (T,) token positions for sequences
    batch_size: int
    num_classes: int  # classes, or the vocabulary of a language model
    task: str  # "classification", "segmentation", "language_model" or "masked_lm"
    reference: str  # short name of the matching graph in shared/data/graphs ("" if none)
    loss: str = "cross_entropy"  # a name of remat.torch.losses.LOSSES, or "masked_lm" (zoo_loss gives the callable)


def _torchvision(fn_name: str) -> Callable[..., nn.Module]:
    def build(num_classes: int, **kwargs: Any) -> nn.Module:
        import torchvision.models as tvm

        return getattr(tvm, fn_name)(weights=None, num_classes=num_classes, **kwargs)

    return build


def _vit(num_classes: int, **kwargs: Any) -> nn.Module:
    from torchvision.models import VisionTransformer

    sizes = {"image_size": 224, "patch_size": 16, "num_layers": 12, "num_heads": 12, "hidden_dim": 768,
             "mlp_dim": 3072, **kwargs}  # ViT-B/16
    return VisionTransformer(num_classes=num_classes, **sizes)


def _local(cls_path: str, classes_as: str = "num_classes") -> Callable[..., nn.Module]:
    def build(num_classes: int, **kwargs: Any) -> nn.Module:
        module, cls = cls_path.rsplit(".", 1)
        import importlib

        return getattr(importlib.import_module(module), cls)(**{classes_as: num_classes, **kwargs})

    return build


PAPER_MODELS = ("vgg16", "vgg19", "mobilenet", "resnet50", "unet", "fcn8", "segnet")
_CLS, _SEG = (3, 224, 224), (3, 416, 608)
SPECS: dict[str, ModelSpec] = {
    "vgg16": ModelSpec("vgg16", _CLS, 256, 1000, "classification", "vgg16"),
    "vgg19": ModelSpec("vgg19", _CLS, 256, 1000, "classification", "vgg19"),
    "mobilenet": ModelSpec("mobilenet", _CLS, 512, 1000, "classification", "mobilenet"),
    "resnet50": ModelSpec("resnet50", _CLS, 256, 1000, "classification", "resnet50"),
    "unet": ModelSpec("unet", _SEG, 32, 19, "segmentation", "vgg_unet"),
    "fcn8": ModelSpec("fcn8", _SEG, 32, 19, "segmentation", "fcn8_vgg"),
    "segnet": ModelSpec("segnet", _SEG, 32, 19, "segmentation", "segnet"),
    "gpt2": ModelSpec("gpt2", (1024,), 8, 50257, "language_model", "", "token_cross_entropy"),
    "bert": ModelSpec("bert", (512,), 8, 30522, "masked_lm", "", "masked_lm"),
    "vit_b16": ModelSpec("vit_b16", _CLS, 64, 1000, "classification", ""),
    "resnet18": ModelSpec("resnet18", _CLS, 256, 1000, "classification", ""),
}
_BUILDERS: dict[str, Callable[..., nn.Module]] = {
    "vgg16": _torchvision("vgg16"),
    "vgg19": _torchvision("vgg19"),
    "resnet50": _torchvision("resnet50"),
    "resnet18": _torchvision("resnet18"),
    "vit_b16": _vit,
    "mobilenet": _local("remat.models.mobilenet.MobileNetV1"),
    "unet": _local("remat.models.segmentation.VGGUNet"),
    "fcn8": _local("remat.models.segmentation.FCN8"),
    "segnet": _local("remat.models.segmentation.SegNet"),
    "gpt2": _local("remat.models.transformers.GPT2", "vocab_size"),
    "bert": _local("remat.models.transformers.BertEncoder", "vocab_size"),
}
ALIASES = {"vgg_unet": "unet", "u-net": "unet", "fcn8_vgg": "fcn8", "fcn": "fcn8", "mobilenet_v1": "mobilenet",
           "gpt-2": "gpt2", "vit": "vit_b16", "vit_b_16": "vit_b16", "bert_base": "bert"}


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
    """The default input shape, batch size, number of classes, task and loss for ``name``."""
    return SPECS[canonical_name(name)]


def get_model(
    name: str, num_classes: int | None = None, device: str | torch.device | None = None, **sizes: Any
) -> nn.Module:
    """A randomly initialised zoo model; ``device="meta"`` builds it without allocating parameters.

    ``num_classes`` is the vocabulary for the language models; ``sizes`` go to
    the model's constructor (e.g. ``n_layer=2, d_model=64`` for ``gpt2``).
    """
    key = canonical_name(name)
    classes = SPECS[key].num_classes if num_classes is None else int(num_classes)
    if classes < 1:
        raise ValueError(f"num_classes must be positive, got {num_classes!r}")
    if device is None:
        model = _BUILDERS[key](classes, **sizes)
    else:
        with torch.device(device):
            model = _BUILDERS[key](classes, **sizes)
    for mod in model.modules():
        if getattr(mod, "inplace", False) is True:
            mod.inplace = False
    return model


def zoo_loss(name: str) -> Any:
    """The loss a zoo model trains with: a name of ``remat.torch.losses.LOSSES`` or a callable."""
    loss = model_spec(name).loss
    if loss == "masked_lm":
        from remat.models.transformers import masked_lm_loss

        return masked_lm_loss
    return loss


def zoo_sample(
    name: str, model: nn.Module, batch_size: int | None = None, input_shape: tuple[int, ...] | None = None,
    seed: int = 0, device: str | torch.device = "cpu",
) -> tuple[Any, torch.Tensor | None]:
    """A random batch and target of the kind ``name`` trains on, for ``model`` (its vocabulary and context).

    Images: ``(B, C, H, W)`` floats; GPT-2: token ids ``(B, T)`` with next-token
    targets; BERT: ``{"input_ids", "attention_mask"}`` (the last quarter of every
    other sequence padded) with masked-LM targets (-100 where no prediction is
    asked). The target is None for named losses that the extractor derives
    itself; on ``meta`` only shapes and dtypes are made.
    """
    spec = model_spec(name)
    shape = tuple(input_shape or spec.input_shape)
    batch = batch_size or spec.batch_size
    gen = torch.Generator().manual_seed(seed)
    meta = torch.device(device).type == "meta"

    def ints(high: int, size: tuple[int, ...]) -> torch.Tensor:
        if meta:
            return torch.empty(size, dtype=torch.int64, device="meta")
        return torch.randint(0, high, size, generator=gen).to(device)

    if spec.task in ("classification", "segmentation"):
        x = torch.empty((batch, *shape), device="meta") if meta else torch.randn((batch, *shape), generator=gen)
        return x.to(device), None
    vocab, (t,) = int(getattr(model, "vocab_size", spec.num_classes)), shape
    if t > int(getattr(model, "context", t)):
        raise ValueError(f"{name}: sequence length {t} exceeds the model's context {model.context}")
    ids = ints(vocab, (batch, t))
    if spec.task == "language_model":
        return ids, ints(vocab, (batch, t))
    mask = torch.ones((batch, t), dtype=torch.bool, device=device)
    if not meta:
        mask[1::2, t - t // 4:] = False
    target = ints(vocab, (batch, t))
    if not meta:
        target[torch.rand((batch, t), generator=gen).to(device) > 0.15] = -100  # predict 15 % of the positions
    return {"input_ids": ids, "attention_mask": mask}, target


def zoo_graph(
    name: str,
    batch_size: int | None = None,
    input_shape: tuple[int, ...] | None = None,
    cost_model: str = "flops",
    model_kwargs: Mapping[str, Any] | None = None,
    **extract_options: Any,
) -> DFGraph:
    """The training graph of zoo model ``name`` (its default batch and input shape unless given).

    With ``cost_model="flops"`` the model is built on the meta device, so even
    the paper's batch sizes cost no memory. ``model_kwargs`` go to
    :func:`get_model` (sizes, ``num_classes``).
    """
    from remat.torch.extract import extract

    spec = model_spec(name)
    device = "meta" if cost_model == "flops" else "cpu"
    model = get_model(spec.name, device="meta" if cost_model == "flops" else None, **dict(model_kwargs or {}))
    sample, target = zoo_sample(spec.name, model, batch_size, input_shape, device=device)
    extract_options.setdefault("loss", zoo_loss(spec.name))
    return extract(model, sample, cost_model=cost_model, name=spec.name, target=target, **extract_options)


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
    table to some zoo models (default: the paper's seven, in zoo order).
    """
    rows = []
    for name in [canonical_name(m) for m in models] if models else list(PAPER_MODELS):
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
