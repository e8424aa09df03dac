"""The Keras front end's tests, run so that TensorFlow never loads in the main test process.

Why: with tensorflow-cpu 2.21 beside torch 2.14.1, loading triton (``import
torchvision``, ``torch.compile``) after TensorFlow segfaults the interpreter, and
the rest of the suite imports torchvision freely. So the TensorFlow tests live in
``tests/keras/tf_*.py`` - names pytest's default ``test_*.py`` pattern never
collects - and this module runs them in a child pytest process. CI can also run
them directly: ``pytest tests/keras/tf_*.py`` (add ``-m "not slow"`` for the quick
set). ``REMAT_KERAS_SLOW=1`` makes the child run the slow ones too.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TF_TESTS = sorted(str(p) for p in (ROOT / "tests" / "keras").glob("tf_*.py"))
needs_tensorflow = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None,
    reason="TensorFlow not installed: pip install 'remat[keras]' (tensorflow-cpu==2.21.0)",
)
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")


def python(code: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env
    )


@needs_tensorflow
def test_tensorflow_suite_in_its_own_process():
    assert TF_TESTS, "tests/keras/tf_*.py are missing"
    select = [] if os.environ.get("REMAT_KERAS_SLOW") == "1" else ["-m", "not slow"]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *select, *TF_TESTS]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=ROOT, env=env)
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode != 0:
        pytest.fail(f"TensorFlow tests failed ({summary}):\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}")
    print(summary)


@needs_tensorflow
@needs_triton
def test_importing_the_front_end_first_makes_torchvision_safe():
    proc = python(
        "import sys, remat.keras\n"
        "import torchvision, triton, torch\n"
        "assert 'tensorflow' in sys.modules\n"
        "print('ok')"
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


@needs_tensorflow
@needs_triton
def test_tensorflow_first_is_refused_with_the_fix():
    proc = python("import tensorflow\nimport remat.keras")
    assert proc.returncode == 1
    assert "TensorFlow was imported before torch/torchvision/triton" in proc.stderr
    assert "Import remat.keras (or torch and torchvision) before tensorflow" in proc.stderr


@needs_tensorflow
@needs_triton
def test_the_hazard_the_guard_prevents_is_real():
    # Pinned versions: if this stops crashing, the guard in remat/keras/env.py may be relaxed.
    proc = python("import tensorflow\nimport triton")
    assert proc.returncode == -11, f"expected a segfault, got rc={proc.returncode}"


def test_missing_tensorflow_gives_the_install_hint():
    # A None entry in sys.modules makes the import fail as if the package were absent.
    proc = python("import sys\nsys.modules['keras'] = sys.modules['tensorflow'] = None\nimport remat.keras")
    assert proc.returncode == 1
    assert "the Keras front end needs TensorFlow, which is not installed" in proc.stderr
    assert "pip install 'remat[keras]'" in proc.stderr
