"""The synthetic graphs: exact sizes, reproducible seeds, and the structure each generator promises."""

import numpy as np
import pytest

from remat.generators import MOCCASIN_RL_WIDTHS, random_layered_dag


@pytest.mark.parametrize("nodes", [3, 40, 250])
def test_random_layered_dags_have_their_size_and_layered_structure(nodes):
    g = random_layered_dag(nodes, seed=1)
    layer = np.array(g.metadata["layer"])
    assert g.n == nodes and g.loss is None
    assert (layer[g.edges[:, 1]] > layer[g.edges[:, 0]]).all()  # edges go down the layers
    has_input = np.zeros(nodes, bool)
    has_input[g.edges[:, 1]] = True
    has_reader = np.zeros(nodes, bool)
    has_reader[g.edges[:, 0]] = True
    source, sink = np.flatnonzero(layer == 0), np.flatnonzero(layer == layer.max())
    assert source.size == 1 and sink.size == 1
    assert has_input.sum() == nodes - 1 and not has_input[source[0]]
    assert has_reader.sum() == nodes - 1 and not has_reader[sink[0]]
    # every node reads one of the layer just above
    prev = {int(v) for u, v in g.edges if layer[v] - layer[u] == 1}
    assert prev == set(range(nodes)) - {int(source[0])}


def test_the_seed_fixes_the_graph_and_moccasins_sizes_take_its_widths():
    a, b, c = random_layered_dag(100, 7), random_layered_dag(100, 7), random_layered_dag(100, 8)
    assert np.array_equal(a.edges, b.edges) and np.array_equal(a.memory, b.memory)
    assert not np.array_equal(a.edges, c.edges)
    assert a.metadata["width"] == MOCCASIN_RL_WIDTHS[100]
    assert random_layered_dag(123, 0).metadata["width"] == 0.31


def test_bad_parameters_are_one_line_errors():
    with pytest.raises(ValueError, match="at least 3 nodes"):
        random_layered_dag(2, 0)
    with pytest.raises(ValueError, match="width_variation"):
        random_layered_dag(50, 0, width_variation=1.5)
