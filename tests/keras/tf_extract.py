"""Keras extraction: exact match with the Checkmate reference graphs, hand-computed costs, bad input.

Runs only in its own process (see tests/test_keras.py): TensorFlow must not share a
process with the rest of the suite.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import remat.keras as rk  # imports torch/torchvision/triton before TensorFlow
from remat.graph import DFGraph
from remat.graph.reference import load_reference_graph, reference_graphs_available
from remat.keras.env import keras
from remat.keras.models import KERAS_APPLICATIONS_MISSING, REFERENCE_NAMES, build_zoo_model, keras_applications_renames

L = keras.layers
_skip_without_reference = pytest.mark.skipif(
    not reference_graphs_available(),
    reason="reference graphs absent: set REMAT_GRAPHS_DIR to the Checkmate node-link graphs (shared/data/graphs)",
)


def needs_reference(test):
    return pytest.mark.reference(_skip_without_reference(test))


APPLICATIONS = {
    "vgg16": keras.applications.VGG16,
    "vgg19": keras.applications.VGG19,
    "resnet50": keras.applications.ResNet50,
    "mobilenet": keras.applications.MobileNet,
}


def assert_same_graph(ours: DFGraph, ref: DFGraph) -> None:
    assert ours.names == ref.names
    assert ours.loss == ref.loss
    np.testing.assert_array_equal(ours.edges, ref.edges)
    np.testing.assert_array_equal(ours.memory, ref.memory)


def without_nodes(ref: DFGraph, drop: set[str]) -> tuple[list[str], set[tuple[str, str]], list[int]]:
    """The reference with ``drop`` removed, edges bypassing removed nodes (u -> dropped... -> v gives u -> v)."""
    keep = [i for i, s in enumerate(ref.names) if s not in drop]
    succ: dict[int, set[int]] = {i: set() for i in range(ref.n)}
    for s, t in ref.edges:
        succ[int(s)].add(int(t))
    edges = set()
    for u in keep:
        stack, seen = list(succ[u]), set()
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            if ref.names[v] in drop:
                stack.extend(succ[v])
            else:
                edges.add((ref.names[u], ref.names[v]))
    return [ref.names[i] for i in keep], edges, [int(ref.memory[i]) for i in keep]


@needs_reference
@pytest.mark.parametrize("name", ["vgg16", "vgg19", "resnet50"])
def test_keras_applications_match_reference_exactly(name):
    ref = load_reference_graph(name)
    model = APPLICATIONS[name](weights=None)
    ours = rk.extract(model, ref.batch_size, renames=keras_applications_renames(name, model))
    assert_same_graph(ours, ref)


@needs_reference
def test_keras_applications_mobilenet_matches_except_keras2_only_layers():
    ref = load_reference_graph("mobilenet")
    keras.applications.MobileNet(weights=None)  # a second build in one process gets auto-name suffixes
    model = keras.applications.MobileNet(weights=None)
    ours = rk.extract(model, ref.batch_size, renames=keras_applications_renames("mobilenet", model))
    missing = KERAS_APPLICATIONS_MISSING["mobilenet"]
    drop = set(missing) | {s + "_backward" for s in missing}
    names, edges, memory = without_nodes(ref, drop)
    assert ours.n == ref.n - 4
    assert list(ours.names) == names
    assert {(ours.names[s], ours.names[t]) for s, t in ours.edges} == edges
    assert ours.memory.tolist() == memory


@needs_reference
@pytest.mark.parametrize("zoo", ["mobilenet", "unet", "fcn8", "segnet"])
def test_zoo_definitions_match_reference_exactly(zoo):
    ref = load_reference_graph(REFERENCE_NAMES[zoo])
    assert_same_graph(rk.extract_zoo_model(zoo, ref.batch_size), ref)


@needs_reference
def test_fcn8_flop_costs_equal_reference_except_transposed_convolutions():
    ref = load_reference_graph("fcn8_vgg")
    ours = rk.extract_zoo_model("fcn8", ref.batch_size)
    differ = [ours.names[i] for i in np.flatnonzero(ours.cost != ref.cost)]
    convt = ["conv2d_transpose", "conv2d_transpose_1", "conv2d_transpose_2"]
    assert sorted(differ) == sorted(convt + [s + "_backward" for s in convt])
    # The reference counts a transposed convolution as Cin x |out| (no kernel factor); we count
    # its real multiply-accumulates kh x kw x Cout x |in|.
    for s in convt:
        i = ours.names.index(s)
        out = ref.memory[i] // 4
        assert ref.cost[i] == 19 * out


def tiny_model():
    x = keras.Input((8, 8, 3))
    a = L.Conv2D(4, 3, padding="same", name="conv")(x)  # 3*3*3*(B*8*8*4)
    b = L.BatchNormalization(name="bn")(a)  # 4*|in|
    c = L.ReLU(name="relu")(b)  # |in|
    d = L.DepthwiseConv2D(3, padding="same", name="dw")(c)  # 3*3*|out|
    e = L.Add(name="add")([c, d])  # |c| + |d|
    f = L.MaxPooling2D(2, name="pool")(e)  # 0
    g = L.Flatten(name="flat")(f)  # 0
    h = L.Dense(5, name="fc")(g)  # B*64*5
    return keras.Model(x, h, name="tiny")


def test_flop_costs_memory_and_edges_hand_computed():
    B = 3
    graph = rk.extract(tiny_model(), B)
    n_act = B * 8 * 8 * 4
    fwd = [27 * n_act, 4 * n_act, n_act, 9 * n_act, 2 * n_act, 0, 0, B * 64 * 5]
    assert graph.loss == 8 and graph.n == 17
    np.testing.assert_array_equal(graph.cost[:8], fwd)
    assert graph.cost[8] == 0
    np.testing.assert_array_equal(graph.cost[9:], [2 * c for c in fwd[::-1]])
    np.testing.assert_array_equal(graph.memory[:8], [4 * m for m in [n_act] * 5 + [B * 64, B * 64, B * 5]])
    assert graph.memory[8] == 4 * B
    np.testing.assert_array_equal(graph.memory[9:], graph.memory[:8][::-1])
    params = (27 * 4 + 4) + 4 * 4 + (9 * 4 + 4) + (64 * 5 + 5)  # conv, bn (4 vectors), dw, fc
    assert graph.input_memory == B * 8 * 8 * 3 * 4
    assert graph.constant_memory == graph.input_memory + 2 * 4 * params
    grad = {i: 16 - i for i in range(8)}
    expected = {(7, 8), (8, grad[7])}
    inbound = {1: [0], 2: [1], 3: [2], 4: [2, 3], 5: [4], 6: [5], 7: [6]}
    for i in range(8):
        expected.add((i, grad[i]))
        for p in inbound.get(i, []):
            expected |= {(p, i), (grad[i], grad[p]), (i, grad[p])}
    assert set(map(tuple, graph.edges.tolist())) == expected
    assert graph.names[9] == "fc_backward" and graph.names[16] == "conv_backward"


def test_batch_rescaling_equals_re_extraction():
    model = tiny_model()
    small, big = rk.extract(model, 2), rk.extract(model, 7)
    scaled = small.with_batch_size(7)
    np.testing.assert_array_equal(scaled.memory, big.memory)
    np.testing.assert_allclose(scaled.cost, big.cost)
    assert (scaled.constant_memory, scaled.input_memory) == (big.constant_memory, big.input_memory)


def test_profiled_costs_are_measured_and_cached(tmp_path, monkeypatch):
    import remat.keras.costs as _keras_costs

    monkeypatch.setenv("REMAT_CACHE_DIR", str(tmp_path))
    model = tiny_model()
    graph = rk.extract(model, 2, cost_model="profile", profile_repeats=1)
    assert graph.cost_unit == "seconds"
    assert np.all(graph.cost[:8] > 0) and np.all(graph.cost[9:] >= 0)
    files = list((tmp_path / "keras_profile").glob("*.json"))
    assert len(files) == 1
    key = json.loads(files[0].read_text())["key"]
    assert key["batch_size"] == 2 and key["resolution"] == [[8, 8, 3]] and key["device"].startswith(("cpu:", "gpu:"))

    def no_timing(*_a, **_k):
        raise AssertionError("cache miss: the profile was measured again")

    monkeypatch.setattr(_keras_costs, "_time_layer", no_timing)
    again = rk.extract(model, 2, cost_model="profile", profile_repeats=1)
    np.testing.assert_array_equal(again.cost, graph.cost)
    with pytest.raises(AssertionError, match="cache miss"):
        rk.extract(model, 3, cost_model="profile", profile_repeats=1)  # another batch is another key


def test_nested_model_is_rejected_by_name():
    inner_in = keras.Input((4,))
    inner = keras.Model(inner_in, L.Dense(3)(inner_in), name="inner_block")
    x = keras.Input((4,))
    model = keras.Model(x, L.Dense(2)(inner(x)))
    with pytest.raises(rk.KerasModelError, match="'inner_block' is a nested model"):
        rk.extract(model, 2)


def test_shared_layer_is_rejected_by_name():
    x = keras.Input((4,))
    shared = L.Dense(4, name="tied")
    model = keras.Model(x, shared(shared(x)))
    with pytest.raises(rk.KerasModelError, match="'tied' is called 2 times"):
        rk.extract(model, 2)


def test_multiple_outputs_are_rejected():
    x = keras.Input((4,))
    model = keras.Model(x, [L.Dense(2, name="head_a")(x), L.Dense(3, name="head_b")(x)])
    with pytest.raises(rk.KerasModelError, match="2 outputs \\(head_a, head_b\\)"):
        rk.extract(model, 2)


def test_unknown_dimensions_and_unknown_layers_are_rejected():
    x = keras.Input((None, None, 3))
    with pytest.raises(rk.KerasModelError, match="'c' has input shape .* unknown dimensions"):
        rk.extract(keras.Model(x, L.Conv2D(2, 3, name="c")(x)), 2)
    x = keras.Input((5, 4))
    model = keras.Model(x, L.GRU(3, name="rnn")(x))
    with pytest.raises(rk.KerasModelError, match="'rnn' \\(GRU\\) has no FLOP rule"):
        rk.extract(model, 2)


def test_subclassed_model_is_rejected():
    class Net(keras.Model):
        def call(self, x):
            return x

    with pytest.raises(rk.KerasModelError, match="not a functional Keras model"):
        rk.extract(Net(), 2)


def test_extract_zoo_model_small_resolution_and_unknown_name():
    graph = rk.extract_zoo_model("resnet50", 2, input_shape=(32, 32, 3))
    assert graph.name == "resnet50" and graph.n == 353 and graph.names[175] == "probs"
    assert graph.metadata["layers"][175] == "predictions"
    with pytest.raises(ValueError, match="unknown Keras zoo model 'alexnet'"):
        build_zoo_model("alexnet")


def test_sequential_model_is_extracted_like_a_functional_one():
    seq = keras.Sequential([keras.Input((8,)), L.Dense(4, name="d1"), L.ReLU(name="r"), L.Dense(2, name="d2")])
    graph = rk.extract(seq, 3)
    assert graph.names == ("d1", "r", "d2", "Loss", "d2_backward", "r_backward", "d1_backward")
    np.testing.assert_array_equal(graph.cost, [96, 12, 24, 0, 48, 24, 192])  # 3*8*4, 3*4, 3*4*2, 2x backward
    assert graph.constant_memory == 3 * 8 * 4 + 2 * 4 * (8 * 4 + 4 + 4 * 2 + 2)
