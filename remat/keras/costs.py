"""Per-layer costs for the Keras front end: static multiply-accumulates or times profiled with TensorFlow.

FLOP model (paper §6.1, as the Checkmate Keras extractor counts): convolution
``kh*kw*Cin*|out|``, dense ``|in|*Cout`` (``B*Cin*Cout`` for flat inputs),
batch normalisation ``4*|in|``, activations ``|in|``, element-wise merges
``sum |in|``; pooling, reshaping, padding, cropping, upsampling, dropout and
concatenation cost 0; the loss costs 0; a gradient node costs twice its
forward node. ``|x|`` counts elements including the batch. Layer kinds the
Checkmate rule does not name are counted as their real multiply-accumulates:
transposed convolution ``kh*kw*Cout*|in|``, depthwise ``kh*kw*|out|``,
separable = depthwise + pointwise.

Profiled model: median seconds of each layer's forward call and of its
vector-Jacobian product (``tf.GradientTape``) on the current device, cached in
``$REMAT_CACHE_DIR/keras_profile`` (default ``~/.cache/remat``) under a key of
model architecture, batch, input resolution, dtype, device and TensorFlow
version.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from remat.keras.env import keras, tf

L = keras.layers
_ZERO_COST = (
    L.MaxPooling1D, L.MaxPooling2D, L.MaxPooling3D, L.AveragePooling1D, L.AveragePooling2D, L.AveragePooling3D,
    L.GlobalAveragePooling1D, L.GlobalAveragePooling2D, L.GlobalAveragePooling3D,
    L.GlobalMaxPooling1D, L.GlobalMaxPooling2D, L.GlobalMaxPooling3D,
    L.Reshape, L.Flatten, L.Permute, L.RepeatVector, L.Concatenate, L.Dropout, L.SpatialDropout2D, L.Identity,
    L.ZeroPadding1D, L.ZeroPadding2D, L.ZeroPadding3D, L.Cropping1D, L.Cropping2D, L.Cropping3D,
    L.UpSampling1D, L.UpSampling2D, L.UpSampling3D,
)  # fmt: skip
_ELEMENTWISE = (L.Activation, L.ReLU, L.LeakyReLU, L.Softmax, L.ELU, L.PReLU)
_MERGE = (L.Add, L.Subtract, L.Average, L.Multiply, L.Maximum, L.Minimum)
_NORMALISATION = (L.BatchNormalization, L.LayerNormalization)


def layer_macs(node: Any, batch_size: int) -> float:
    """Forward multiply-accumulates of one layer (see the module docstring)."""
    layer = node.layer
    n_in = [batch_size * int(np.prod(s, dtype=np.int64)) for s in node.input_shapes]
    n_out = batch_size * int(np.prod(node.output_shape, dtype=np.int64))
    if isinstance(layer, _ZERO_COST):
        return 0.0
    # Order matters: the depthwise/separable/transposed classes are not Conv subclasses in Keras 3,
    # but check them first anyway so a future re-parenting cannot change the count silently.
    if isinstance(layer, (L.DepthwiseConv1D, L.DepthwiseConv2D)):
        return float(np.prod(layer.kernel_size) * n_out)
    if isinstance(layer, (L.SeparableConv1D, L.SeparableConv2D)):
        depthwise = np.prod(layer.kernel_size) * n_in[0] * layer.depth_multiplier
        return float(depthwise + node.input_shapes[0][-1] * layer.depth_multiplier * n_out)
    if isinstance(layer, (L.Conv1DTranspose, L.Conv2DTranspose, L.Conv3DTranspose)):
        return float(np.prod(layer.kernel_size) * layer.filters * n_in[0])
    if isinstance(layer, (L.Conv1D, L.Conv2D, L.Conv3D)):
        c_in = node.input_shapes[0][-1] // getattr(layer, "groups", 1)
        return float(np.prod(layer.kernel_size) * c_in * n_out)
    if isinstance(layer, L.Dense):
        return float(n_in[0] * layer.units)
    if isinstance(layer, _NORMALISATION):
        return float(4 * n_in[0])
    if isinstance(layer, _ELEMENTWISE):
        return float(n_in[0])
    if isinstance(layer, _MERGE):
        return float(sum(n_in))
    from remat.keras.layers import KerasModelError

    raise KerasModelError(
        f"layer {layer.name!r} ({type(layer).__name__}) has no FLOP rule in the Keras front end; "
        f"use cost_model='profile' to measure it"
    )


def flop_costs(nodes: Sequence[Any], batch_size: int) -> tuple[list[float], float, list[float]]:
    """(forward costs, loss cost, backward costs per layer) under the FLOP model; backward = 2 x forward."""
    forward = [layer_macs(nd, batch_size) for nd in nodes]
    return forward, 0.0, [2.0 * c for c in forward]


# ---------------------------------------------------------------------- profiling
def cache_dir() -> Path:
    return Path(os.environ.get("REMAT_CACHE_DIR") or Path.home() / ".cache" / "remat") / "keras_profile"


def device_name() -> str:
    """The device TensorFlow computes on here, as recorded with profiled costs."""
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return f"gpu:{details.get('device_name', gpus[0].name)}"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu:{cpu}"


def profile_key(model: Any, nodes: Sequence[Any], batch_size: int, repeats: int) -> dict[str, Any]:
    """What a profile depends on; its hash names the cache file."""
    arch = [
        [type(nd.layer).__name__, json.dumps(nd.layer.get_config(), sort_keys=True, default=str), nd.input_shapes]
        for nd in nodes
    ]
    return {
        "model": model.name,
        "architecture": hashlib.sha256(json.dumps(arch, default=str).encode()).hexdigest(),
        "batch_size": int(batch_size),
        "resolution": [list(t.shape[1:]) for t in model.inputs],
        "dtype": sorted({nd.dtype for nd in nodes}),
        "device": device_name(),
        "tensorflow": tf.__version__,
        "repeats": int(repeats),
    }


def profiled_costs(
    model: Any, nodes: Sequence[Any], batch_size: int, repeats: int = 3
) -> tuple[list[float], float, list[float]]:
    """(forward, loss, backward) seconds per layer, measured here or read from the cache."""
    key = profile_key(model, nodes, batch_size, repeats)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    path = cache_dir() / f"{model.name}_b{batch_size}_{digest}.json"
    if path.is_file():
        data = json.loads(path.read_text())
        if data.get("key") == key and len(data["forward"]) == len(nodes):
            return data["forward"], data["loss"], data["backward"]
    forward, backward = [], []
    for nd in nodes:
        f, b = _time_layer(nd, batch_size, repeats)
        forward.append(f)
        backward.append(b)
    loss = _time_loss(nodes[-1], batch_size, repeats)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"key": key, "forward": forward, "loss": loss, "backward": backward}, indent=1))
    tmp.replace(path)
    return forward, loss, backward


def _random(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> Any:
    return tf.constant(rng.standard_normal(shape).astype(dtype))


def _median_seconds(fn: Any, repeats: int) -> float:
    fn()  # warm-up: builds kernels and lazily created state outside the timing
    times = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        out = fn()
        _block(out)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _block(out: Any) -> None:
    # Eager TF may return before an accelerator finishes; reading one element waits for it.
    for t in tf.nest.flatten(out):
        if t is not None and hasattr(t, "numpy"):
            np.asarray(tf.reshape(t, [-1])[:1])


def _time_layer(nd: Any, batch_size: int, repeats: int) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    inputs = [_random((batch_size, *s), nd.dtype, rng) for s in nd.input_shapes]
    seconds_fwd = _median_seconds(lambda: nd.replay(inputs, training=True), repeats)
    upstream = _random((batch_size, *nd.output_shape), nd.dtype, rng)
    weights = nd.layer.trainable_variables

    def backward() -> Any:
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            out = nd.replay(inputs, training=True)
        return tape.gradient(out, [*inputs, *weights], output_gradients=upstream)

    # The tape's forward is part of backward() but not of the vector-Jacobian product.
    seconds_bwd = max(_median_seconds(backward, repeats) - seconds_fwd, 0.0)
    return seconds_fwd, seconds_bwd


def _time_loss(last: Any, batch_size: int, repeats: int) -> float:
    rng = np.random.default_rng(1)
    y = _random((batch_size, *last.output_shape), last.dtype, rng)
    t = _random((batch_size, *last.output_shape), last.dtype, rng)
    return _median_seconds(lambda: tf.reduce_mean(tf.square(y - t)), repeats)
