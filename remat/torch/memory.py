"""Measuring the memory of a PyTorch training step on CPU (and CUDA where it exists).

Two measurements besides the executor's own register accounting:

* :class:`LiveTensorMeter` - a ``TorchDispatchMode`` that sees every tensor an
  ATen op returns (forward and backward, including temporaries such as summed
  gradients) and follows each new storage until Python's last reference to it
  dies, so it reports the peak bytes of tensor storage created inside the
  block and alive at once. Kernel-internal scratch (oneDNN/cuDNN workspace) is
  not an ATen output and is not seen.
* :func:`rss_peak` - the operating system's resident-set high-water mark
  (``VmHWM``, reset through ``/proc/self/clear_refs``). It sees everything,
  allocator slack included, and works for ``torch.compile`` too; it is only
  faithful when glibc returns large blocks to the OS at once, i.e. when the
  process was started with ``MALLOC_MMAP_THRESHOLD_`` set (see
  :data:`MMAP_ENV`), so benchmarks run each contender in such a subprocess.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# Allocations above 64 KiB get their own mmap, so freeing them lowers the RSS at once.
MMAP_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}


class LiveTensorMeter(TorchDispatchMode):
    """Peak bytes of tensor storage created inside the block and alive at the same time.

    Storages of the tensors in ``existing`` (parameters, gradients, the input
    batch: whatever is allocated before the block) are never counted, not even
    when an op returns a view of them (``weight.t()``); views share their base's
    storage and are counted once. ``pending()``, when given, is added to the
    count at every allocation: the bytes of what is not allocated yet but
    should be counted from the start (parameter gradients that ``zero_grad()``
    set to None, which the graph holds for the whole step).
    """

    def __init__(self, existing: Iterable[torch.Tensor] = (), pending: Callable[[], int] | None = None) -> None:
        super().__init__()
        self.current = 0
        self.peak = 0
        self.sampled_peak = 0  # the largest count seen by sample(): between the statements of a plan
        self._pending = pending
        self._live: dict[int, int] = {}
        self._existing = {id(t.untyped_storage()): t.untyped_storage() for t in existing}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                self._track(t)
        return out

    def _track(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key = id(storage)
        if key in self._live or key in self._existing:
            return
        size = storage.nbytes()
        self._live[key] = size
        self.current += size
        self.peak = max(self.peak, self.current + (self._pending() if self._pending else 0))
        weakref.finalize(storage, self._release, key)

    def sample(self) -> None:
        """Record the count now (the executor calls it between statements, where ``simulate()`` measures)."""
        self.sampled_peak = max(self.sampled_peak, self.current + (self._pending() if self._pending else 0))

    def _release(self, key: int) -> None:
        self.current -= self._live.pop(key, 0)


def rss_bytes() -> int:
    """The process's resident set size now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_rss_peak() -> bool:
    """Reset the kernel's RSS high-water mark to the current RSS; False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def rss_peak_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) * 1024
    raise OSError("VmHWM not found in /proc/self/status")


def rss_peak(fn: Callable[[], Any]) -> tuple[Any, int | None]:
    """Run ``fn`` and return its result with the RSS growth at its peak (None where /proc is missing)."""
    if not reset_rss_peak():
        return fn(), None
    before = rss_bytes()
    result = fn()
    return result, max(rss_peak_bytes() - before, 0)


def cuda_peak(device: torch.device) -> int | None:
    """``torch.cuda.max_memory_allocated`` on ``device`` when it is a CUDA device, else None."""
    if device.type != "cuda":
        return None
    return int(torch.cuda.max_memory_allocated(device))
