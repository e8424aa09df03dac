"""solve_min_r: valid schedules, and no valid frontier-advancing R computes less (exhaustive check)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from remat.baselines.recompute import solve_min_r
from remat.generators import linear_chain, random_dag, random_training_graph
from remat.graph import DFGraph
from remat.schedule import Schedule, simulate


def random_s(n: int, density: float, rng: np.random.Generator) -> np.ndarray:
    return np.tril(rng.random((n, n)) < density, -1)


def valid_mask(graph: DFGraph, S: np.ndarray, Rs: np.ndarray) -> np.ndarray:
    """Which of the candidate R matrices ``Rs[b]`` satisfy (1b) and (1c) with ``S`` - written independently."""
    ok = np.ones(len(Rs), bool)
    for t in range(1, graph.n):
        ok &= ~(S[t] & ~(Rs[:, t - 1] | S[t - 1])).any(1)  # (1c)
    for i, j in graph.edges:
        ok &= ~(Rs[:, :, j] & ~(Rs[:, :, i] | S[None, :, i])).any(1)  # (1b)
    return ok


def all_frontier_rs(n: int) -> np.ndarray:
    """Every R with ones on the diagonal and any subset of the strictly lower triangle (8a, 8c)."""
    rows, cols = np.tril_indices(n, -1)
    bits = np.array(list(itertools.product([False, True], repeat=len(rows))), bool)
    Rs = np.zeros((len(bits), n, n), bool)
    Rs[:, np.arange(n), np.arange(n)] = True
    Rs[:, rows, cols] = bits
    return Rs


GRAPHS = [random_dag(6, seed) for seed in range(4)] + [random_training_graph(2, seed) for seed in range(4)]


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda g: g.name)
def test_min_r_is_the_least_valid_r(graph: DFGraph) -> None:
    rng = np.random.default_rng(graph.n * 100 + graph.m)
    Rs = all_frontier_rs(graph.n)
    for density in (0.0, 0.2, 0.5, 0.8):
        S = random_s(graph.n, density, rng)
        R = solve_min_r(graph, S)
        assert simulate(graph, Schedule(R, S)).valid
        ok = valid_mask(graph, S, Rs)
        assert ok.any()
        valid = Rs[ok]
        # Every valid R contains min-R's, so none has fewer ones (or lower cost).
        assert np.all((valid | R[None]) == valid), "a valid R omits an entry that solve_min_r set"
        assert valid.sum((1, 2)).min() == R.sum()
        # ...and min-R itself is among the valid ones.
        assert (valid == R[None]).all((1, 2)).any()


def test_min_r_adds_exactly_the_forced_entries_on_a_chain() -> None:
    # linear_chain(3): 0->1->2->3(loss)->4->5->6, skips 0->6, 1->5, 2->4.
    g = linear_chain(3)
    S = np.zeros((7, 7), bool)
    S[[1, 2, 3, 4, 4], [0, 1, 2, 2, 3]] = True  # forward chain; node 4 reads 2 and the loss
    S[5, 4] = S[6, 5] = True  # gradients
    R = solve_min_r(g, S)
    expected = np.eye(7, dtype=bool)
    expected[5, [0, 1]] = True  # node 5 reads 1: recompute 0, 1 from the input
    expected[6, 0] = True  # node 6 reads 0
    assert np.array_equal(R, expected)
    sim = simulate(g, Schedule(R, S))
    assert sim.valid and sim.cost == 10


@pytest.mark.parametrize("seed", range(3))
def test_min_r_valid_on_larger_graphs(seed: int) -> None:
    g = random_training_graph(10, seed)
    rng = np.random.default_rng(seed)
    for density in (0.0, 0.1, 0.4):
        S = random_s(g.n, density, rng)
        R = solve_min_r(g, S)
        sim = simulate(g, Schedule(R, S))
        assert sim.valid, sim.violation
        assert Schedule(R, S).is_frontier_advancing


def test_min_r_rejects_wrong_shape() -> None:
    with pytest.raises(ValueError, match="must be 7 x 7"):
        solve_min_r(linear_chain(3), np.zeros((5, 5), bool))
