"""Keras front end: a functional Keras 3 model -> the training graph Checkmate extracted (paper §6.1).

Importing this module imports torch, torchvision and triton before TensorFlow
(see :mod:`remat.keras.env` for the segfault that order avoids) and
fails with an install hint when TensorFlow is missing.

The graph follows the Checkmate Keras extractor node for node:

* one forward node per Keras layer after the input layer(s), in ``model.layers``
  order; then ``Loss``; then the gradient node of layer ``i`` at id ``2L - i``
  (named ``<layer>_backward``), so there are ``2L + 1`` nodes;
* for every inbound connection ``p -> i`` between layers: edges ``p -> i``,
  ``grad(i) -> grad(p)``, ``i -> grad(p)``; for every layer ``i -> grad(i)``; and
  ``last -> Loss -> grad(last)``;
* memory: output elements x bytes per element (4 for float32) x batch; a gradient
  node takes its forward node's memory; ``Loss`` holds one value per sample;
* constant overhead: the inputs plus twice the parameter bytes (parameters and
  their gradients), parameters counted as trainable + non-trainable weights.

Costs come from :mod:`remat.keras.costs`: multiply-accumulates from
the layers' shapes (``cost_model="flops"``) or per-layer times measured with
TensorFlow on this machine (``cost_model="profile"``, cached on disk).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from remat.graph import DFGraph, GraphError
from remat.keras.env import keras, tf
from remat.keras.layers import _functional, layer_nodes

LOSS_NAME = "Loss"
BACKWARD_SUFFIX = "_backward"


def extract(
    model: Any,
    batch_size: int,
    cost_model: str = "flops",
    *,
    name: str | None = None,
    renames: dict[str, str] | None = None,
    profile_repeats: int = 3,
) -> DFGraph:
    """The Checkmate training graph of a functional Keras model at ``batch_size`` (see the module docstring).

    ``cost_model`` is ``"flops"`` (multiply-accumulates from shapes) or
    ``"profile"`` (seconds measured with TensorFlow here, cached under
    ``$REMAT_CACHE_DIR``). ``renames`` maps Keras layer names to node names (the
    mapping to the reference graphs' Keras 2 names); the Keras names stay in
    ``graph.metadata["layers"]`` for the executor.
    """
    from remat.keras.costs import flop_costs, profiled_costs

    if int(batch_size) != batch_size or batch_size < 1:
        raise GraphError(f"batch size must be a positive integer, got {batch_size!r}")
    batch_size = int(batch_size)
    nodes = layer_nodes(model)
    L = len(nodes)
    renames = renames or {}
    fwd_names = [renames.get(nd.name, nd.name) for nd in nodes]
    names = fwd_names + [LOSS_NAME] + [fwd_names[L - 1 - k] + BACKWARD_SUFFIX for k in range(L)]

    def grad(i: int) -> int:
        return 2 * L - i

    edges: list[tuple[int, int]] = []
    for i, nd in enumerate(nodes):
        for p in nd.parents:
            edges += [(p, i), (grad(i), grad(p)), (i, grad(p))]
        edges.append((i, grad(i)))
    edges += [(L - 1, L), (L, grad(L - 1))]

    itemsize = [np.dtype(nd.dtype).itemsize for nd in nodes]
    fwd_memory = [int(np.prod(nd.output_shape, dtype=np.int64)) * batch_size * b for nd, b in zip(nodes, itemsize)]
    memory = fwd_memory + [batch_size * itemsize[-1]] + fwd_memory[::-1]

    if cost_model == "flops":
        fwd_cost, loss_cost, bwd_cost = flop_costs(nodes, batch_size)
        unit = "flops"
    elif cost_model == "profile":
        fwd_cost, loss_cost, bwd_cost = profiled_costs(model, nodes, batch_size, repeats=profile_repeats)
        unit = "seconds"
    else:
        raise GraphError(f"unknown cost model {cost_model!r}: use 'flops' or 'profile'")
    cost = list(fwd_cost) + [loss_cost] + list(bwd_cost)[::-1]

    model = _functional(model)
    input_bytes = sum(
        int(np.prod(t.shape[1:], dtype=np.int64)) * batch_size * np.dtype(str(t.dtype)).itemsize for t in model.inputs
    )
    param_bytes = sum(int(np.prod(w.shape, dtype=np.int64)) * np.dtype(str(w.dtype)).itemsize for w in model.weights)
    return DFGraph(
        names=names,
        cost=cost,
        memory=memory,
        edges=edges,
        loss=L,
        constant_memory=input_bytes + 2 * param_bytes,
        input_memory=input_bytes,
        batch_size=batch_size,
        cost_unit=unit,
        name=name or model.name,
        metadata={
            "source": "remat.keras.extract",
            "layers": [nd.name for nd in nodes],
            "input_shapes": [list(t.shape[1:]) for t in model.inputs],
            "parameter_bytes": param_bytes,
            "cost_model": cost_model,
            "cost_note": "multiply-accumulates; backward = 2 x forward" if cost_model == "flops" else "seconds",
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
        },
    )


def extract_zoo_model(
    name: str, batch_size: int, input_shape: tuple[int, int, int] | None = None, cost_model: str = "flops"
) -> DFGraph:
    """Extract a zoo model by our zoo name (vgg16, vgg19, mobilenet, resnet50, unet, fcn8, segnet).

    ``input_shape`` is ``(height, width, channels)``; the default is the
    paper's resolution (224x224 for the classifiers, 416x608 for segmentation).
    Node names follow the reference graphs (see :data:`keras_models.REFERENCE_RENAMES`).
    """
    from remat.keras.models import REFERENCE_RENAMES, build_zoo_model

    model = build_zoo_model(name, input_shape)
    return extract(model, batch_size, cost_model, name=name, renames=REFERENCE_RENAMES.get(name))
