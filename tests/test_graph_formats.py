"""Graph files: MOCCASIN's published JSON in, every format out and back, and the convert command."""

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from remat.budget import no_recompute_peak
from remat.generators import random_dag, random_training_graph
from remat.graph import FORMATS, GraphError, load_graph, save_graph
from remat.graph.__main__ import main as graph_cli
from remat.graph.reference import load_reference_graph, reference_graphs_available


def moccasin_file(links: str = "keyed") -> dict:
    """A 5-node graph shaped like MOCCASIN's random layered files: no node ids (networkx numbers nodes by
    position), out_cost/duration/param_cost, links keyed "0"/"1", and an order in which node 1 is the sink."""
    nodes = [{"out_cost": 10, "param_cost": 0, "duration": 0, "name": 0},
             {"out_cost": 40, "param_cost": 0, "duration": 0, "name": 1},
             {"out_cost": 20, "param_cost": 3, "duration": 7, "name": 2},
             {"out_cost": 30, "param_cost": 0, "duration": 5, "name": 3},
             {"out_cost": 50, "param_cost": 0, "duration": 9, "name": 4}]
    pairs = [(0, 2), (0, 3), (2, 4), (3, 4), (4, 1), (2, 1)]
    link_list = {"keyed": [{"0": s, "1": t} for s, t in pairs], "pairs": [list(p) for p in pairs]}[links]
    graph = {"name": "random_layered_toy", "pos": {"0": [0, 0]}, "source_node": 0, "target_node": 1,
             "order": [0, 3, 2, 4, 1]}
    return {"directed": True, "multigraph": False, "graph": graph, "nodes": nodes, "links": link_list}


@pytest.mark.parametrize("links", ["keyed", "pairs"])
def test_moccasin_layout_renumbers_along_its_order(tmp_path, links):
    path = tmp_path / "random_layered_toy.json"
    path.write_text(json.dumps(moccasin_file(links)))
    g = load_graph(path)
    # order [0, 3, 2, 4, 1]: file node 3 becomes our node 1, file node 1 (the sink) our node 4.
    assert g.names == ("0", "3", "2", "4", "1")
    assert g.memory.tolist() == [10, 30, 20, 50, 40] and g.cost.tolist() == [0, 5, 7, 9, 0]
    assert sorted(map(tuple, g.edges.tolist())) == [(0, 1), (0, 2), (1, 3), (2, 3), (2, 4), (3, 4)]
    assert g.loss is None and g.constant_memory == 0
    assert g.metadata["original_ids"] == [0, 3, 2, 4, 1] and g.metadata["parameter_bytes"] == 3
    # MOCCASIN's budgets are fractions of this peak: in order 0,3,2,4,1 with each output resident until its last
    # reader has run, the largest step is node 4 with 0 (read by 2 and 3), 3, 2 and itself resident: 10+30+20+50.
    assert no_recompute_peak(g) == 110


def test_moccasin_without_order_is_sorted_stably_and_bad_orders_are_refused(tmp_path):
    data = moccasin_file()
    del data["graph"]["order"]
    path = tmp_path / "g.json"
    path.write_text(json.dumps(data))
    assert load_graph(path).names == ("0", "2", "3", "4", "1")
    data["graph"]["order"] = [0, 2, 4, 3, 1]
    path.write_text(json.dumps(data))
    with pytest.raises(GraphError, match="not topological.*3 -> 4"):
        load_graph(path)
    data["graph"]["order"] = [0, 2, 3, 1]
    path.write_text(json.dumps(data))
    with pytest.raises(GraphError, match="every node exactly once"):
        load_graph(path)
    data["graph"]["order"] = [0, 2, 3, 4, 1]
    data["nodes"][2].pop("duration")
    path.write_text(json.dumps(data))
    with pytest.raises(GraphError, match="node 2 has none of the fields cost_cpu, duration, cost"):
        load_graph(path)


def assert_same(h, g):
    assert h.names == g.names and h.loss == g.loss and h.name == g.name and h.cost_unit == g.cost_unit
    assert (h.constant_memory, h.input_memory, h.batch_size) == (g.constant_memory, g.input_memory, g.batch_size)
    assert np.array_equal(h.edges, g.edges) and np.array_equal(h.memory, g.memory)
    assert np.array_equal(h.cost, g.cost) and np.array_equal(h.batch_scaled, g.batch_scaled)


def generated_graphs():
    g = random_training_graph(6, 4).with_constant_memory(100, 10)
    scaled = np.ones(g.n, bool)
    scaled[3] = False
    return [replace(g, batch_scaled=scaled, batch_size=8), random_dag(7, 2)]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_format_round_trips_generated_graphs(tmp_path, fmt):
    for g in generated_graphs():
        assert_same(load_graph(save_graph(g, tmp_path / f"{g.name}.json", fmt)), g)


@pytest.mark.reference
@pytest.mark.skipif(not reference_graphs_available(), reason="reference graphs not found (set REMAT_GRAPHS_DIR)")
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_format_round_trips_a_reference_graph(tmp_path, fmt):
    g = load_reference_graph("vgg_unet")
    h = load_graph(save_graph(g, tmp_path / "out.json", fmt))
    assert_same(h, g)
    assert no_recompute_peak(h) == no_recompute_peak(g)


def test_moccasin_writer_carries_both_spellings_and_needs_whole_costs(tmp_path):
    g = random_training_graph(3, 1)
    data = json.loads(save_graph(g, tmp_path / "m.json", "moccasin").read_text())
    node, link = data["nodes"][0], data["links"][0]
    assert node["out_cost"] == node["cost_ram"] and node["duration"] == node["cost_cpu"] and node["param_cost"] == 0
    assert (link["0"], link["1"]) == (link["source"], link["target"])
    assert data["graph"]["order"] == list(range(g.n))
    fractional = replace(g, cost=g.cost + 0.5)
    with pytest.raises(GraphError, match="whole-number durations"):
        save_graph(fractional, tmp_path / "f.json", "moccasin")
    with pytest.raises(GraphError, match="unknown graph format 'dot'"):
        save_graph(g, tmp_path / "x.dot", "dot")


def test_convert_command(tmp_path, capsys):
    src = tmp_path / "random_layered_toy.json"
    src.write_text(json.dumps(moccasin_file()))
    out = tmp_path / "ours.json"
    assert graph_cli(["convert", str(src), str(out), "--to", "remat"]) == 0
    assert load_graph(out).names == ("0", "3", "2", "4", "1")
    assert graph_cli(["convert", str(out), str(tmp_path / "back.json"), "--to", "moccasin"]) == 0
    assert load_graph(tmp_path / "back.json").memory.tolist() == [10, 30, 20, 50, 40]
    assert graph_cli(["info", str(out)]) == 0
    assert "5 nodes, 6 edges, no loss" in capsys.readouterr().out
    assert graph_cli(["info", str(tmp_path / "missing.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


MOCCASIN_DIR = os.environ.get("REMAT_MOCCASIN_DATA")


@pytest.mark.skipif(not MOCCASIN_DIR, reason="set REMAT_MOCCASIN_DATA to MOCCASIN's data/ folder to read its files")
def test_moccasin_published_files_load():
    files = sorted(Path(MOCCASIN_DIR).glob("*.json"))
    assert files, f"no JSON files in {MOCCASIN_DIR}"
    for path in files:
        g = load_graph(path)
        assert g.n == len(json.loads(path.read_text())["nodes"]) and no_recompute_peak(g) > 0
