"""Small settings of every zoo model for the execution tests: fast on 2 cores, every architecture feature kept."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from remat.models import get_model, model_names, zoo_loss, zoo_sample

TINY_TRANSFORMER = {"n_layer": 2, "d_model": 32, "n_head": 4, "vocab_size": 64}
CASES: dict[str, dict[str, Any]] = {
    "vgg16": {"shape": (3, 32, 32), "kwargs": {"num_classes": 10}},
    "vgg19": {"shape": (3, 32, 32), "kwargs": {"num_classes": 10}},
    "mobilenet": {"shape": (3, 32, 32), "kwargs": {"num_classes": 10}},
    "resnet50": {"shape": (3, 32, 32), "kwargs": {"num_classes": 10}},
    "unet": {"shape": (3, 32, 32), "kwargs": {"num_classes": 5}},
    "fcn8": {"shape": (3, 32, 32), "kwargs": {"num_classes": 5}},
    "segnet": {"shape": (3, 32, 32), "kwargs": {"num_classes": 5}},
    "gpt2": {"shape": (16,), "kwargs": {**TINY_TRANSFORMER, "context": 16}},
    "bert": {"shape": (16,), "kwargs": {**TINY_TRANSFORMER, "max_len": 16, "d_ff": 64}},
    "vit_b16": {"shape": (3, 32, 32), "kwargs": {"num_classes": 10, "image_size": 32, "patch_size": 8,
                                                 "num_layers": 2, "num_heads": 4, "hidden_dim": 32, "mlp_dim": 64}},
    "resnet18": {"shape": (3, 32, 32), "kwargs": {"num_classes": 10}},
}
assert set(CASES) == set(model_names())
BATCH = 2


def build(name: str, seed: int = 0, dtype: torch.dtype = torch.float32) -> nn.Module:
    torch.manual_seed(seed)
    return get_model(name, **CASES[name]["kwargs"]).to(dtype)


def batch(name: str, model: nn.Module, seed: int = 1, dtype: torch.dtype = torch.float32) -> tuple[Any, Any]:
    sample, target = zoo_sample(name, model, BATCH, CASES[name]["shape"], seed=seed)
    if isinstance(sample, torch.Tensor) and sample.is_floating_point():
        sample = sample.to(dtype)
    if target is None:  # named losses: classes drawn like the executor's random batches
        training = model.training
        model.eval()  # (training mode would move batch-norm statistics)
        with torch.no_grad():
            out = model(sample) if not isinstance(sample, dict) else model(**sample)
        model.train(training)
        classes = out.shape[1]
        shape = (out.shape[0], *out.shape[2:])
        target = torch.randint(0, classes, shape, generator=torch.Generator().manual_seed(seed))
    return sample, target


def loss(name: str) -> Any:
    return zoo_loss(name)
