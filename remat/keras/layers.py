"""The forward nodes of a functional Keras model: one :class:`LayerNode` per layer call, validated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from remat.graph import GraphError
from remat.keras.env import keras


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
