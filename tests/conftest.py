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
