"""Fused kernels on ``meta`` as the device that will run the step picks them, so the graph saves what it saves.

``scaled_dot_product_attention`` is one op with several implementations: on
``meta`` PyTorch runs the *math* composite (which saves the T x T attention
matrix), while a CPU runs the fused flash kernel when it applies (which saves
only q, k, v, the output and the log-sum-exp). Extraction walks the model on
``meta``, so under :class:`DeviceKernels` each attention call asks the target
device which kernel it would choose (``torch._fused_sdp_choice`` on tiny tensors
of the same dtype and strides, batch 1) and runs that kernel's own op on the
meta tensors: the saved tensors, and hence the graph's edges and memory, are
those of the real step. CPU flash is emulated; on CUDA the math composite is
kept (its fused kernels are not emulated yet, so an executor on CUDA reports
accounting mismatches for attention nodes rather than wrong gradients).

Attention called by fx nodes is caught by a ``TorchFunctionMode``; attention
called from inside an opaque module's Python code (``nn.MultiheadAttention``
calls ``torch.nn.functional``'s module-level name) is caught by pointing that
name at the emulation for the duration of the walk - the mode alone does not
see calls nested in another overridable function.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

_FLASH = 1  # torch.nn.attention.SDPBackend.FLASH_ATTENTION


def _probe_tensor(t: torch.Tensor, batch: int) -> torch.Tensor:
    """A CPU tensor with ``t``'s dtype, strides and shape, batch 1 where ``t`` has the batch."""
    shape = list(t.shape)
    if shape and shape[0] == batch:
        shape[0] = 1
    return torch.empty_strided(shape, t.stride(), dtype=t.dtype, device="cpu")


_ORIGINAL = F.scaled_dot_product_attention


def _sdpa_cpu(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None,
              dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
              enable_gqa: bool = False) -> torch.Tensor:
    batch = int(query.shape[0])
    probe = [_probe_tensor(t, batch) for t in (query, key, value)]
    mask = _probe_tensor(attn_mask, batch) if isinstance(attn_mask, torch.Tensor) else attn_mask
    choice = torch._fused_sdp_choice(*probe, mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    if choice == _FLASH and not enable_gqa:
        out, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
        )
        return out
    return _ORIGINAL(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                     enable_gqa=enable_gqa)


def _sdpa_for_cpu(*args: Any, **kwargs: Any) -> torch.Tensor:
    if args and isinstance(args[0], torch.Tensor) and args[0].device.type == "meta":
        return _sdpa_cpu(*args, **kwargs)
    return _ORIGINAL(*args, **kwargs)


class DeviceKernels(TorchFunctionMode):
    """Within this mode, attention on ``meta`` tensors runs the kernel ``target`` (a device type) would."""

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target

    def __enter__(self) -> DeviceKernels:
        if self.target == "cpu":
            F.scaled_dot_product_attention = _sdpa_for_cpu
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        F.scaled_dot_product_attention = _ORIGINAL
        super().__exit__(*exc)

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if (
            func is _ORIGINAL
            and self.target == "cpu"
            and args
            and isinstance(args[0], torch.Tensor)
            and args[0].device.type == "meta"
        ):
            return _sdpa_cpu(*args, **kwargs)
        return func(*args, **kwargs)
