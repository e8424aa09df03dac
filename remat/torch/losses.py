"""The loss a training graph ends in: a named one, or the user's ``loss_fn(output, target) -> scalar``.

Named losses read a model that returns one tensor: ``"cross_entropy"`` (class
logits along dim 1, integer targets: classifiers and segmentation),
``"token_cross_entropy"`` (logits along the last dim, one integer target per
position: language models; ``-100`` targets are ignored) and ``"mse"``. A
callable receives the model's output as the model returns it (a tensor, tuple,
dict or output object) and the step's target (any value, None allowed), and
returns a scalar tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from remat.torch.errors import ExtractionError

LOSSES = ("cross_entropy", "token_cross_entropy", "mse")


@dataclass(frozen=True)
class Loss:
    """A loss resolved from a name or a callable; ``name`` is what the graph records."""

    name: str
    fn: Callable[[Any, Any], torch.Tensor]
    named: bool


def _named(loss: str) -> Callable[[Any, Any], torch.Tensor]:
    def fn(output: Any, target: Any) -> torch.Tensor:
        if not isinstance(output, torch.Tensor):
            raise ExtractionError(
                f"loss {loss!r} needs a model that returns one tensor, this one returns {type(output).__name__}: "
                f"pass loss=fn with fn(output, target) -> scalar (e.g. lambda out, y: "
                f"F.cross_entropy(out['logits'].flatten(0, 1), y.flatten()))"
            )
        return loss_value(loss, output, target)

    return fn


def resolve_loss(loss: str | Callable[[Any, Any], torch.Tensor] | Loss) -> Loss:
    """The :class:`Loss` for a name of :data:`LOSSES` or a callable; anything else is refused with the choices."""
    if isinstance(loss, Loss):
        return loss
    if callable(loss):
        label = getattr(loss, "__qualname__", type(loss).__name__)
        return Loss(name=f"callable:{label}", fn=loss, named=False)
    check_loss(loss)
    return Loss(name=loss, fn=_named(loss), named=True)


def check_loss(loss: Any) -> None:
    if callable(loss) or isinstance(loss, Loss):
        return
    if loss not in LOSSES:
        raise ExtractionError(
            f"unknown loss {loss!r}: choose one of {', '.join(LOSSES)} or pass a callable loss_fn(output, target)"
        )


def loss_target(loss: str, output: torch.Tensor, random: bool = False) -> torch.Tensor:
    """The target tensor a named loss compares ``output`` with (class indices or a same-shaped tensor).

    Cross-entropy takes integer classes along dim 1 of the output, so the target
    has the output's shape without that dimension: ``(B,)`` for classifiers,
    ``(B, H, W)`` for segmentation; token cross-entropy drops the last dimension.
    """
    if loss == "mse":
        return torch.randn_like(output) if random else torch.empty_like(output)
    if output.dim() < 2:
        raise ExtractionError(
            f"cross-entropy needs logits of shape (batch, classes, ...), got {tuple(output.shape)}: use loss='mse'"
        )
    if loss == "token_cross_entropy":
        shape, classes = tuple(output.shape[:-1]), output.shape[-1]
    else:
        shape, classes = (output.shape[0], *output.shape[2:]), output.shape[1]
    if random:
        return torch.randint(0, classes, shape, device=output.device)
    return torch.empty(shape, dtype=torch.int64, device=output.device)


def loss_value(loss: str, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """A named loss of ``output`` against ``target``."""
    if loss == "mse":
        return F.mse_loss(output, target)
    if loss == "token_cross_entropy":
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))
    return F.cross_entropy(output, target)


def example_target(loss: Loss, output: Any, target: Any, batch: int, random: bool = False,
                   generator: torch.Generator | None = None) -> Any:
    """A target for ``loss`` at ``batch``: derived from ``output`` for named losses, else like ``target``'s spec."""
    from remat.torch.inputs import example_values, random_values

    if loss.named:
        if not isinstance(output, torch.Tensor):
            loss.fn(output, None)  # raises the error that names the fix
        return loss_target(loss.name, output, random=random)
    if target is None:
        return None
    from remat.torch.tree import tensors_of

    device = next((t.device for t in tensors_of(output)), torch.device("cpu"))
    if random:
        return random_values([target], batch, generator or torch.Generator().manual_seed(0), device)[0]
    return example_values([target], batch, device)[0]


def loss_and_grads(loss: Loss, output: Any, target: Any, wrt: list[torch.Tensor]) -> tuple[torch.Tensor, list]:
    """The loss of ``output`` and its gradient w.r.t. each tensor of ``wrt`` (None where it does not reach)."""
    with torch.enable_grad():
        value = loss.fn(output, target)
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            raise ExtractionError(f"the loss {loss.name} must return a scalar tensor, got {type(value).__name__}")
        if not value.requires_grad or not wrt:
            return value, [None] * len(wrt)
        grads = torch.autograd.grad(value, wrt, allow_unused=True)
    return value, list(grads)
