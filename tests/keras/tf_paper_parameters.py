"""remat.paper's parameter bytes of the reference models equal the Keras models' (trainable + non-trainable) x 4.

Runs only in its own process (see tests/test_keras.py): it builds the seven zoo models in TensorFlow.
"""

from __future__ import annotations

import pytest

import remat.keras as rk  # noqa: F401 - imports torch/torchvision/triton before TensorFlow
from remat.keras.extract import extract_zoo_model
from remat.keras.models import REFERENCE_NAMES
from remat.paper import REFERENCE_PARAMETER_BYTES


@pytest.mark.parametrize("zoo", sorted(REFERENCE_NAMES))
def test_reference_parameter_bytes(zoo):
    graph = extract_zoo_model(zoo, 1)
    assert graph.metadata["parameter_bytes"] == REFERENCE_PARAMETER_BYTES[REFERENCE_NAMES[zoo]]
