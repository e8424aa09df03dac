"""Keras / TensorFlow support: extraction of the paper's Keras graphs and execution of schedules.

Importing it imports torch, torchvision and triton before TensorFlow (see
:mod:`remat.keras.env` for the segfault that order avoids) and fails with an
install hint when TensorFlow is missing. ``extract`` builds the training graph
(:mod:`remat.keras.extract`), ``execute_schedule`` runs a schedule for one step
(:mod:`remat.keras.execute`).
"""

from remat.keras.execute import execute_schedule, plain_gradients
from remat.keras.extract import extract, extract_zoo_model
from remat.keras.layers import KerasModelError, LayerNode, layer_nodes

__all__ = [
    "KerasModelError",
    "LayerNode",
    "execute_schedule",
    "extract",
    "extract_zoo_model",
    "layer_nodes",
    "plain_gradients",
]
