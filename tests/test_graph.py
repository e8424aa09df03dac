import json

import numpy as np
import pytest

from remat.generators import linear_chain, random_dag, random_training_graph
from remat.graph import DFGraph, GraphError, load_graph, topologically_sorted
from remat.graph.reference import REFERENCE_GRAPHS, load_reference_graph, reference_graphs_available


def tiny(**kw):
    args = dict(names=["a", "b", "c"], cost=[1, 2, 3], memory=[4, 5, 6], edges=[(0, 1), (1, 2)])
    args.update(kw)
    return DFGraph(**args)


def test_deps_and_users():
    g = tiny(edges=[(0, 1), (0, 2), (1, 2)])
    assert [d.tolist() for d in g.deps] == [[], [0], [0, 1]]
    assert [u.tolist() for u in g.users] == [[1, 2], [2], []]


@pytest.mark.parametrize(
    "kw, needle",
    [
        (dict(edges=[(0, 1), (1, 2), (2, 0)]), "not a DAG: cycle"),
        (dict(edges=[(0, 0)]), "not a DAG"),
        (dict(edges=[(0, 2), (2, 1)]), "not in topological order"),
        (dict(edges=[(0, 3)]), "dangling edge 0 -> 3"),
        (dict(cost=[1, -2, 3]), "cost -2.0"),
        (dict(memory=[1, float("nan"), 3]), "memory nan"),
        (dict(cost=[1, float("inf"), 3]), "finite"),
        (dict(memory=[1, 2]), "2 entries for 3 nodes"),
        (dict(loss=7), "loss node 7"),
    ],
)
def test_validation_errors_are_one_line(kw, needle):
    with pytest.raises(GraphError) as err:
        tiny(**kw)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_topological_relabel():
    g = topologically_sorted(["c", "a", "b"], [3, 1, 2], [6, 4, 5], [(1, 2), (2, 0)])
    assert g.names == ("a", "b", "c")
    assert g.edges.tolist() == [[0, 1], [1, 2]]
    assert g.memory.tolist() == [4, 5, 6]


def test_plain_dag_refused_by_training_strategies():
    g = random_dag(5, seed=0)
    assert not g.has_training_structure
    with pytest.raises(GraphError, match="plain DAG"):
        g.require_training_structure("chen_sqrtn")


def test_linear_chain_matches_paper():
    g = linear_chain(8)
    assert g.n == 17 and g.loss == 8
    edges = {tuple(e) for e in g.edges.tolist()}
    assert edges == {(i, i + 1) for i in range(16)} | {(i, 16 - i) for i in range(8)}
    assert np.all(g.cost == 1) and np.all(g.memory == 1)


@pytest.mark.parametrize("seed", range(5))
def test_random_training_graph_backprop_edges(seed):
    g = random_training_graph(5, seed)
    L = g.loss
    fwd = {tuple(e) for e in g.edges.tolist() if e[1] < L}
    edges = {tuple(e) for e in g.edges.tolist()}
    for p, c in fwd:  # the gradient of p needs the gradient of each of its users
        assert (2 * L - c, 2 * L - p) in edges
    for u in range(L):  # each backward node reads something saved by its forward node
        assert any(s <= u and t == 2 * L - u for s, t in edges)
    assert (L - 1, L) in edges and (L, L + 1) in edges


def test_json_round_trip(tmp_path):
    g = random_training_graph(4, 3).with_constant_memory(100, 10)
    path = tmp_path / "g.json"
    g.save(path)
    h = load_graph(path)
    assert h.names == g.names and h.loss == g.loss and h.constant_memory == 100 and h.input_memory == 10
    assert np.array_equal(h.edges, g.edges) and np.array_equal(h.memory, g.memory) and np.allclose(h.cost, g.cost)


def test_load_errors(tmp_path):
    with pytest.raises(GraphError, match="does not exist"):
        load_graph(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(GraphError, match="not valid JSON"):
        load_graph(bad)


def test_node_link_import(tmp_path):
    data = {
        "directed": True, "multigraph": False, "graph": {},
        "nodes": [
            {"id": 0, "name": "conv", "backward": False, "cost_cpu": 5, "cost_ram": 8},
            {"id": 1, "name": "Loss", "backward": True, "cost_cpu": 1, "cost_ram": 4},
            {"id": 2, "name": "conv_backward", "backward": True, "cost_cpu": 9, "cost_ram": 8},
        ],
        "links": [{"source": 0, "target": 1}, {"source": 1, "target": 2}, {"source": 0, "target": 2}],
    }
    path = tmp_path / "toy_b16_8x8.json"
    path.write_text(json.dumps(data))
    g = load_graph(path)
    assert g.loss == 1 and g.batch_size == 16 and g.memory.tolist() == [8, 4, 8]
    assert g.forward_nodes.tolist() == [0] and g.backward_nodes.tolist() == [2]


def test_with_batch_size_scales_activations_not_parameters():
    g = random_training_graph(3, 0)
    g = DFGraph(g.names, g.cost, g.memory * 4, g.edges, g.loss, constant_memory=1000 + 40, input_memory=40,
                batch_size=4)
    h = g.with_batch_size(8)
    assert np.array_equal(h.memory, g.memory * 2) and np.allclose(h.cost, g.cost * 2)
    assert h.input_memory == 80 and h.constant_memory == 1080 and h.parameter_memory == 1000


@pytest.mark.reference
@pytest.mark.skipif(not reference_graphs_available(), reason="reference graphs not found (set REMAT_GRAPHS_DIR)")
@pytest.mark.parametrize("name", REFERENCE_GRAPHS)
def test_reference_graphs_load(name):
    g = load_reference_graph(name)
    expected = {"vgg16": (45, 87), "vgg19": (51, 99), "mobilenet": (185, 367), "resnet50": (353, 751),
                "fcn8_vgg": (73, 149), "segnet": (77, 151), "vgg_unet": (71, 148)}[name]
    assert (g.n, g.m) == expected
    assert g.names[g.loss] == "Loss"
    assert all(s.endswith("_backward") for s in g.names[g.loss + 1:])
