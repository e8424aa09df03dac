"""Keras front end: a functional Keras 3 model -> the training graph Checkmate extracted (paper §6.1).

Importing this module imports torch, torchvision and triton before TensorFlow
(see :mod:`remat.frontends._keras_env` for the segfault that order avoids) and
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

Costs come from :mod:`remat.frontends._keras_costs`: multiply-accumulates from
the layers' shapes (``cost_model="flops"``) or per-layer times measured with
TensorFlow on this machine (``cost_model="profile"``, cached on disk).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from remat.frontends._keras_env import keras, tf
from remat.graph import DFGraph, GraphError

LOSS_NAME = "Loss"
BACKWARD_SUFFIX = "_backward"


class KerasModelError(GraphError):
    """A Keras model the extractor cannot turn into a faithful graph; the message names the layer."""


@dataclass(frozen=True)
class LayerNode:
    """One forward node: a Keras layer, what it reads, and its static shapes (batch axis dropped)."""

    layer: Any
    call: Any  # the keras Node of the layer's one call in the model: its arguments replay the call
    sources: tuple[tuple[str, int], ...]  # per input tensor: ("node", forward id) or ("input", model input index)
    input_shapes: tuple[tuple[int, ...], ...]
    output_shape: tuple[int, ...]
    dtype: str

    @property
    def name(self) -> str:
        return self.layer.name

    @property
    def parents(self) -> tuple[int, ...]:
        """Forward-node ids this layer reads, each once, in call order."""
        return tuple(dict.fromkeys(k for kind, k in self.sources if kind == "node"))

    def replay(self, values: list[Any], training: bool | None = None) -> Any:
        """Call the layer as the model does, with ``values[k]`` for its k-th input tensor."""
        args, kwargs = self.call.arguments.fill_in({id(t): v for t, v in zip(self.call.input_tensors, values)})
        if training is not None and "training" in getattr(self.layer, "_call_context_args", ()):
            kwargs = {**kwargs, "training": training}
        return self.layer(*args, **kwargs)


def layer_nodes(model: Any) -> list[LayerNode]:
    """The forward nodes of a functional Keras model, validated: one output, no nesting or sharing."""
    model = _functional(model)
    if len(model.outputs) != 1:
        names = ", ".join(t._keras_history.operation.name for t in model.outputs)
        raise KerasModelError(
            f"model {model.name!r} has {len(model.outputs)} outputs ({names}); the extractor supports one output "
            f"feeding one loss: wrap the outputs into one layer or extract one head at a time"
        )
    in_model = set(model._nodes)
    input_ids = {id(t): k for k, t in enumerate(model.inputs)}
    index: dict[int, int] = {}
    out: list[LayerNode] = []
    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        if isinstance(layer, keras.Model):
            raise KerasModelError(
                f"layer {layer.name!r} is a nested model ({type(layer).__name__}), which the extractor does not "
                f"handle: flatten it, e.g. build the outer model from the inner model's layers"
            )
        calls = [nd for k, nd in enumerate(layer._inbound_nodes) if _node_key(layer, k) in in_model]
        if len(calls) != 1:
            raise KerasModelError(
                f"layer {layer.name!r} is called {len(calls)} times in model {model.name!r} (a shared layer); "
                f"the extractor needs one node per layer call: use a separate layer object per call"
            )
        node = calls[0]
        if len(node.output_tensors) != 1:
            raise KerasModelError(
                f"layer {layer.name!r} has {len(node.output_tensors)} outputs; the extractor supports layers with "
                f"one output tensor"
            )
        sources: list[tuple[str, int]] = []
        for t in node.input_tensors:
            if id(t) in input_ids:
                sources.append(("input", input_ids[id(t)]))
                continue
            producer = t._keras_history.operation
            if isinstance(producer, keras.layers.InputLayer):
                raise KerasModelError(f"layer {layer.name!r} reads an input that is not one of the model's inputs")
            if id(producer) not in index:
                raise KerasModelError(
                    f"layer {layer.name!r} reads {producer.name!r}, which comes later in model.layers; "
                    f"the extractor needs model.layers in a topological order"
                )
            sources.append(("node", index[id(producer)]))
        output = node.output_tensors[0]
        index[id(layer)] = len(out)
        out.append(
            LayerNode(
                layer=layer,
                call=node,
                sources=tuple(sources),
                input_shapes=tuple(_static_shape(layer, t, "input") for t in node.input_tensors),
                output_shape=_static_shape(layer, output, "output"),
                dtype=str(output.dtype),
            )
        )
    if not out:
        raise KerasModelError(f"model {model.name!r} has no layers besides its inputs")
    last_output = model.outputs[0]._keras_history.operation
    if out[-1].layer is not last_output:
        raise KerasModelError(
            f"the model's output layer {last_output.name!r} is not the last of model.layers; the extractor needs the "
            f"output layer last (the loss reads it)"
        )
    return out


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
    from remat.frontends._keras_costs import flop_costs, profiled_costs

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
            "source": "remat.frontends.keras",
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
    from remat.frontends.keras_models import REFERENCE_RENAMES, build_zoo_model

    model = build_zoo_model(name, input_shape)
    return extract(model, batch_size, cost_model, name=name, renames=REFERENCE_RENAMES.get(name))


def execute_schedule(graph: DFGraph, model: Any, schedule: Any, x: Any, target: Any, **kwargs: Any) -> Any:
    """Run ``schedule`` for one training step in TensorFlow; see :func:`_keras_exec.execute_schedule`."""
    from remat.frontends._keras_exec import execute_schedule as run

    return run(graph, model, schedule, x, target, **kwargs)


def plain_gradients(model: Any, x: Any, target: Any, loss_fn: Callable | None = None, training: bool = True) -> Any:
    """One ordinary ``tf.GradientTape`` step: (loss, gradients of ``model.trainable_variables``)."""
    from remat.frontends._keras_exec import plain_gradients as run

    return run(model, x, target, loss_fn=loss_fn, training=training)


# ---------------------------------------------------------------------- helpers
def _functional(model: Any) -> Any:
    if isinstance(model, keras.Sequential):
        if getattr(model, "_functional", None) is None:
            raise KerasModelError(
                f"Sequential model {model.name!r} has no input shape yet: start it with keras.Input(shape=...)"
            )
        return model._functional
    if not isinstance(model, keras.Model) or not hasattr(model, "_nodes"):
        raise KerasModelError(
            f"{type(model).__name__} is not a functional Keras model: build it as keras.Model(inputs, outputs) "
            f"or a Sequential starting with keras.Input (subclassed models have no static layer graph)"
        )
    return model


def _node_key(layer: Any, k: int) -> str:
    from keras.src.ops.function import make_node_key

    return make_node_key(layer, k)


def _static_shape(layer: Any, tensor: Any, what: str) -> tuple[int, ...]:
    shape = tuple(tensor.shape[1:])
    if any(d is None for d in shape):
        raise KerasModelError(
            f"layer {layer.name!r} has {what} shape {tuple(tensor.shape)} with unknown dimensions; give the model a "
            f"fixed input shape (e.g. input_shape=(224, 224, 3))"
        )
    return tuple(int(d) for d in shape)


__all__ = [
    "KerasModelError",
    "LayerNode",
    "execute_schedule",
    "extract",
    "extract_zoo_model",
    "layer_nodes",
    "plain_gradients",
]
