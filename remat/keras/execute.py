"""Run a schedule for one training step in TensorFlow, statement by statement (paper Algorithm 1).

Values of the graph extracted by :func:`remat.keras.extract`:

* forward node ``i`` holds layer ``i``'s output ``y_i``;
* ``Loss`` holds the per-sample losses (one value per sample, as its memory says);
* gradient node ``grad(p)`` holds ``dL/dy_p``. It reads ``grad(i)`` for every
  consumer ``i`` of ``p`` and ``y_p``, and computes
  ``sum_i VJP_i(grad(i))`` by replaying layer ``i``'s call on ``y_p`` under a
  ``tf.GradientTape`` (eager TensorFlow keeps no per-op gradient state we could
  hold as a value, so the vector-Jacobian product re-runs the one layer). It also
  produces the parameter gradients of each consumer whose first input is ``p``
  (of layer ``p`` itself when ``p`` reads only model inputs).

The executor keeps exactly the values the plan's registers hold: a
``Deallocate`` drops the tensor, and a ``Compute`` whose graph dependencies are
not resident raises. After each ``Compute`` it records the bytes of all live
values, which equals ``simulate()``'s ``U[t, k]`` minus the constant overhead.

Layers with state are replayed faithfully: before every call of a layer its
non-trainable variables (batch-norm statistics, dropout seed state) are reset to
their value at the start of the step, so recomputation sees the same batch
statistics and dropout masks as the first call; at the end they hold what one
ordinary step leaves (the state after each layer's first call).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from remat.graph import DFGraph
from remat.keras.env import keras, tf
from remat.keras.layers import KerasModelError, layer_nodes
from remat.schedule import Compute, Schedule, simulate

# Layers whose vector-Jacobian product for one input does not depend on the other inputs' values.
_LINEAR_MERGES = (keras.layers.Add, keras.layers.Subtract, keras.layers.Average, keras.layers.Concatenate)


def mse_per_sample(y: Any, target: Any) -> Any:
    """Mean squared error per sample (the default loss): one value per batch element."""
    err = tf.square(tf.cast(y, tf.float32) - tf.cast(target, tf.float32))
    return tf.reduce_mean(tf.reshape(err, [tf.shape(err)[0], -1]), axis=1)


@dataclass
class KerasExecution:
    """What one scheduled training step produced."""

    loss: float
    gradients: list[np.ndarray]  # aligned with model.trainable_variables
    live_bytes: list[int] = field(default_factory=list)  # after each Compute, in plan order
    computes: int = 0
    layer_calls: int = 0


def plain_gradients(
    model: Any, x: Any, target: Any, loss_fn: Callable | None = None, training: bool = True
) -> tuple[float, list[np.ndarray]]:
    """An ordinary step: ``tf.GradientTape`` over ``model(x)``; (mean loss, gradients)."""
    loss_fn = loss_fn or mse_per_sample
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(loss_fn(model(x, training=training), target))
    grads = tape.gradient(loss, model.trainable_variables)
    return float(loss), [np.asarray(g) for g in grads]


def execute_schedule(
    graph: DFGraph,
    model: Any,
    schedule: Schedule,
    x: Any,
    target: Any,
    loss_fn: Callable | None = None,
    training: bool = True,
) -> KerasExecution:
    """Run ``schedule`` (R, S) on ``model`` for one step; see the module docstring.

    ``graph`` must come from :func:`remat.keras.extract` on this model
    (any batch size: shapes come from ``x``). The schedule is checked with
    :func:`remat.schedule.simulate` first; an invalid one raises with its violation.
    """
    loss_fn = loss_fn or mse_per_sample
    nodes = layer_nodes(model)
    L = len(nodes)
    layers = graph.metadata.get("layers")
    if graph.loss != L or layers != [nd.name for nd in nodes]:
        raise KerasModelError(
            f"graph {graph.name!r} was not extracted from model {model.name!r} (its layers differ): "
            f"extract the graph from this model with remat.keras.extract"
        )
    _check_executable(nodes)
    sim = simulate(graph, schedule)
    if not sim.valid:
        raise ValueError(f"schedule is not valid for graph {graph.name!r}: {sim.violation}")
    inputs = [tf.convert_to_tensor(v) for v in (x if isinstance(x, (list, tuple)) else [x])]
    consumers: list[list[int]] = [[] for _ in range(L)]
    for i, nd in enumerate(nodes):
        for p in nd.parents:
            consumers[p].append(i)
    state = _LayerState(nodes)
    run = _Run(nodes, consumers, inputs, target, loss_fn, training, state)
    regs: dict[int, Any] = {}
    where: dict[int, int] = {}
    out = KerasExecution(loss=float("nan"), gradients=[])
    for step in sim.plan:
        if isinstance(step, Compute):
            k = step.node
            missing = [int(d) for d in graph.deps[k] if int(d) not in where]
            if missing:
                raise RuntimeError(
                    f"plan computes {graph.names[k]!r} but its input {graph.names[missing[0]]!r} is gone"
                )
            regs[step.register] = run.compute(k, {d: regs[where[d]] for d in map(int, graph.deps[k])})
            where[k] = step.register
            out.computes += 1
            out.live_bytes.append(sum(_nbytes(v) for v in regs.values()))
        else:
            regs.pop(step.register)
            if where.get(step.node) == step.register:
                del where[step.node]
    state.finish()
    missing_grads = [v.path for v in model.trainable_variables if id(v) not in run.weight_grads]
    if missing_grads:
        raise RuntimeError(f"the schedule produced no gradient for {missing_grads[0]}")
    out.loss = run.loss
    out.gradients = [np.asarray(run.weight_grads[id(v)]) for v in model.trainable_variables]
    out.layer_calls = run.layer_calls
    return out


class _LayerState:
    """Resets each layer's non-trainable variables before every call (see the module docstring)."""

    def __init__(self, nodes: list[Any]) -> None:
        self.variables = [list(nd.layer.non_trainable_variables) for nd in nodes]
        self.before = [[v.numpy() for v in vs] for vs in self.variables]
        self.after: dict[int, list[np.ndarray]] = {}

    def prepare(self, i: int) -> None:
        for v, value in zip(self.variables[i], self.before[i]):
            v.assign(value)

    def called(self, i: int) -> None:
        if i not in self.after:
            self.after[i] = [v.numpy() for v in self.variables[i]]

    def finish(self) -> None:
        for i, values in self.after.items():
            for v, value in zip(self.variables[i], values):
                v.assign(value)


class _Run:
    def __init__(self, nodes, consumers, inputs, target, loss_fn, training, state) -> None:  # noqa: ANN001
        self.nodes, self.consumers, self.inputs = nodes, consumers, inputs
        self.target, self.loss_fn, self.training, self.state = target, loss_fn, training, state
        self.L = len(nodes)
        self.weight_grads: dict[int, Any] = {}
        self.loss = float("nan")
        self.layer_calls = 0

    def call(self, i: int, values: list[Any]) -> Any:
        self.state.prepare(i)
        y = self.nodes[i].replay(values, training=self.training)
        self.state.called(i)
        self.layer_calls += 1
        return y

    def input_values(self, i: int, held: dict[int, Any], p: int | None = None) -> list[Any]:
        """Layer i's inputs; with ``p`` given, inputs from other layers become zeros (linear merges only)."""
        values = []
        for kind, k in self.nodes[i].sources:
            if kind == "input":
                values.append(self.inputs[k])
            elif p is None or k == p:
                values.append(held[k])
            else:
                shape = (self.inputs[0].shape[0], *self.nodes[k].output_shape)
                values.append(tf.zeros(shape, self.nodes[k].dtype))
        return values

    def compute(self, k: int, held: dict[int, Any]) -> Any:
        L = self.L
        if k < L:
            return self.call(k, self.input_values(k, held))
        if k == L:
            per_sample = self.loss_fn(held[L - 1], self.target)
            self.loss = float(tf.reduce_mean(per_sample))
            return per_sample
        p = 2 * L - k
        if p == L - 1:
            y = held[p]
            with tf.GradientTape() as tape:
                tape.watch(y)
                loss = tf.reduce_mean(self.loss_fn(y, self.target))
            g = tape.gradient(loss, y)
        else:
            g = None
            for i in self.consumers[p]:
                part = self.vjp(i, p, {p: held[p]}, held[2 * L - i])
                g = part if g is None else g + part
        if not self.nodes[p].parents:
            self.vjp(p, None, {}, g)
        return g

    def vjp(self, i: int, p: int | None, held: dict[int, Any], upstream: Any) -> Any:
        """Gradient of layer i's output (cotangent ``upstream``) wrt its inputs from p; stores its weights' grads."""
        nd = self.nodes[i]
        values = self.input_values(i, held, p if p is not None else -1)
        slots = [j for j, (kind, k) in enumerate(nd.sources) if kind == "node" and k == p]
        weights = nd.layer.trainable_variables if (p is None or nd.parents[0] == p) else []
        with tf.GradientTape() as tape:
            for j in slots:
                tape.watch(values[j])
            y = self.call(i, values)
        grads = tape.gradient(y, [values[j] for j in slots] + list(weights), output_gradients=upstream)
        for w, gw in zip(weights, grads[len(slots) :]):
            self.weight_grads[id(w)] = gw
        if not slots:
            return None
        total = grads[0]
        for extra in grads[1 : len(slots)]:
            total = total + extra
        return total


def _check_executable(nodes: list[Any]) -> None:
    for nd in nodes:
        if len(nd.sources) > 1 and not isinstance(nd.layer, _LINEAR_MERGES):
            raise KerasModelError(
                f"layer {nd.name!r} ({type(nd.layer).__name__}) has {len(nd.sources)} inputs and is not a linear "
                f"merge (Add, Subtract, Average, Concatenate); the executor cannot take its gradient for one input "
                f"without the others, which the Checkmate graph does not make resident"
            )


def _nbytes(value: Any) -> int:
    return int(np.prod(value.shape, dtype=np.int64)) * value.dtype.size
