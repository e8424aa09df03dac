"""Import TensorFlow and Keras safely beside PyTorch; every Keras module of remat imports them from here.

Why the order matters: with tensorflow-cpu 2.21 and torch 2.14.1 in one process,
loading triton's native library (``triton/_C/libtriton.so``, pulled in by
``import torchvision`` and by ``torch.compile``) *after* TensorFlow's native
libraries segfaults the interpreter. Loading torch, torchvision and triton first
is safe, so this module does exactly that before it imports TensorFlow. If
TensorFlow is already loaded and triton is not, nothing can make a later triton
load safe, so the import fails with the fix instead of leaving a process that
crashes when the PyTorch side is used.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

INSTALL_HINT = "pip install 'remat[keras]' (which installs tensorflow-cpu==2.21.0)"


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _import_torch_side_first() -> None:
    triton_installed = _installed("triton")
    if sys.modules.get("tensorflow") is not None and triton_installed and "triton" not in sys.modules:
        raise ImportError(
            "TensorFlow was imported before torch/torchvision/triton; in this environment a later "
            "'import torchvision' or torch.compile would then segfault. Import remat.keras "
            "(or torch and torchvision) before tensorflow, or run the TensorFlow work in its own process"
        )
    for name in ("torch", "torchvision", "triton"):
        if name not in sys.modules and _installed(name):
            importlib.import_module(name)


_import_torch_side_first()

try:
    import keras
    import tensorflow as tf
except ModuleNotFoundError as exc:
    if exc.name not in ("tensorflow", "keras"):
        raise
    raise ImportError(f"the Keras front end needs TensorFlow, which is not installed: {INSTALL_HINT}") from None

if int(keras.__version__.split(".")[0]) < 3:
    raise ImportError(f"the Keras front end needs Keras 3 (found {keras.__version__}): {INSTALL_HINT}")

__all__ = ["INSTALL_HINT", "keras", "tf"]
