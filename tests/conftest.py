import ctypes
import gc
import os
import sys
from pathlib import Path

import pytest

# tests/brute_force.py is a test oracle, importable by the test modules.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="module")
def one_thread():
    """Run a module's torch work on one intra-op thread.

    The test machine has 2 shared cores: oversubscribed intra-op threads make tiny CPU ops ~100x slower.
    """
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(autouse=True)
def memory_returned(request):
    """Hand each test's freed memory back to the system, so a worker's heap does not grow from test to test.

    Without it a pytest worker reached 11.7 GB and was OOM-killed on the 24 GB CI machine. With
    ``REMAT_TEST_MEMLOG=<path>`` each test's resident set after it ends is appended to ``<path>.<worker>``.
    """
    yield
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc: nothing to trim
        pass
    log = os.environ.get("REMAT_TEST_MEMLOG")
    if log:
        status = Path("/proc/self/status").read_text().split("\n")
        fields = {line.split(":")[0]: line.split()[1] for line in status if line.startswith(("VmRSS", "VmHWM"))}
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(f"{log}.{worker}", "a") as f:
            f.write(f"{fields.get('VmRSS')} {fields.get('VmHWM')} {request.node.nodeid}\n")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the ``own_process`` tests (CNN zoo checks, processes of up to 6 GB) first, while the workers are small."""
    items.sort(key=lambda item: item.get_closest_marker("own_process") is None)  # stable: the rest keep their order
