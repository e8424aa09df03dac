"""The named losses a training graph can end in, and the targets they compare the model's output with."""

from __future__ import annotations

import torch

from remat.torch.trace import ExtractionError

# ---------------------------------------------------------------------- loss
LOSSES = ("cross_entropy", "mse")


def check_loss(loss: str) -> None:
    if loss not in LOSSES:
        raise ExtractionError(f"unknown loss {loss!r}: choose one of {', '.join(LOSSES)}")


def loss_target(loss: str, output: torch.Tensor, random: bool = False) -> torch.Tensor:
    """The target tensor the loss compares ``output`` with (class indices or a same-shaped tensor).

    Cross-entropy takes integer classes along dim 1 of the output, so the target
    has the output's shape without that dimension: ``(B,)`` for classifiers,
    ``(B, H, W)`` for segmentation.
    """
    if loss == "mse":
        return torch.randn_like(output) if random else torch.empty_like(output)
    if output.dim() < 2:
        raise ExtractionError(
            f"cross-entropy needs logits of shape (batch, classes, ...), got {tuple(output.shape)}: use loss='mse'"
        )
    shape = (output.shape[0], *output.shape[2:])
    if random:
        return torch.randint(0, output.shape[1], shape, device=output.device)
    return torch.empty(shape, dtype=torch.int64, device=output.device)


def loss_value(loss: str, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    if loss == "mse":
        return torch.nn.functional.mse_loss(output, target)
    return torch.nn.functional.cross_entropy(output, target)
