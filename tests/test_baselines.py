"""Chen's heuristics and the App. B generalisations: hand-computed chains, brute-force APs, budgets."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from remat.baselines.checkpoint_sets import (
    articulation_candidates,
    checkpoint_set_schedule,
    greedy_checkpoints,
    sqrtn_checkpoints,
)
from remat.budget import no_recompute_peak
from remat.generators import linear_chain, random_dag, random_training_graph
from remat.graph import DFGraph, GraphError
from remat.graph.reference import load_reference_graph, reference_graphs_available
from remat.result import Status
from remat.schedule import simulate
from remat.strategies import get_strategy

BASELINES = [
    "chen_sqrtn",
    "chen_greedy",
    "griewank_logn",
    "ap_sqrtn",
    "ap_greedy",
    "linearized_sqrtn",
    "linearized_greedy",
]
REFERENCE = ["vgg16", "vgg19", "mobilenet", "resnet50", "fcn8_vgg", "segnet", "vgg_unet"]
CHAIN_ONLY = {"chen_sqrtn", "chen_greedy", "griewank_logn"}


def chen_reference_r(L: int, checkpoints: list[int]) -> np.ndarray:
    """Chen et al.'s recomputation on linear_chain(L), written out directly.

    Backward node 2L-i reads forward node i. Every segment of non-checkpoint nodes
    below the last checkpoint is recomputed once, from the checkpoint (or input)
    below it, in the stage of the backward node of its top node; the nodes above
    the last checkpoint are never dropped.
    """
    n = 2 * L + 1
    R = np.eye(n, dtype=bool)
    bounds = [-1, *sorted(checkpoints)]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        segment = list(range(lo + 1, hi))
        if segment:
            R[2 * L - segment[-1], segment] = True
    return R


@pytest.mark.parametrize("L", range(4, 31))
def test_sqrtn_cuts_a_chain_into_sqrt_segments(L: int) -> None:
    cks = sqrtn_checkpoints(np.arange(L))
    k = math.isqrt(L)
    assert cks[0] == k - 1 and np.all(np.diff(cks) == k)
    assert len(cks) == L // k  # ceil(L / k) segments: L // k full ones and a shorter last one if k does not divide L
    assert L - 1 - cks[-1] < k


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_chen_sqrtn_published_memory_on_unit_chain(k: int) -> None:
    # L = k^2 layers: k checkpoints, peak 2k = 2 sqrt(L), one extra forward pass of the L - k dropped layers.
    g = linear_chain(k * k)
    res = get_strategy("chen_sqrtn")(g, 2 * k)
    assert res.status == Status.FEASIBLE
    assert res.peak_memory == 2 * k
    assert res.cost == g.total_cost + k * k - k
    assert get_strategy("chen_sqrtn")(g, 2 * k - 1).status == Status.INFEASIBLE


def test_chen_sqrtn_hand_schedule_l9() -> None:
    g = linear_chain(9)  # checkpoints 2, 5, 8; segments {0,1}, {3,4}, {6,7}
    res = get_strategy("chen_sqrtn")(g, 100)
    assert res.stats["checkpoints"] == [2, 5, 8]
    off = {(int(t), int(i)) for t, i in zip(*np.nonzero(res.schedule.R & ~np.eye(g.n, dtype=bool)))}
    assert off == {(11, 6), (11, 7), (14, 3), (14, 4), (17, 0), (17, 1)}


@pytest.mark.parametrize("L", range(4, 17))
def test_checkpoint_sets_reproduce_chens_recomputation(L: int) -> None:
    g = linear_chain(L)
    sets = [sqrtn_checkpoints(np.arange(L))] + [greedy_checkpoints(g, np.arange(L), b) for b in (0.5, 1.5, 2.5, 4.5)]
    for cks in sets:
        schedule = checkpoint_set_schedule(g, cks)
        assert np.array_equal(schedule.R, chen_reference_r(L, list(cks)))
        assert simulate(g, schedule).valid


def test_greedy_checkpoints_by_hand() -> None:
    g = linear_chain(10)
    assert greedy_checkpoints(g, np.arange(10), 2.5).tolist() == [2, 5, 8]
    assert greedy_checkpoints(g, np.arange(10), 0).tolist() == list(range(10))
    assert greedy_checkpoints(g, np.arange(10), 10).tolist() == []
    assert greedy_checkpoints(g, np.array([0, 4, 9]), 1.5).tolist() == [4, 9]
    mem = np.ones(g.n, dtype=np.int64)
    mem[[0, 3]] = 5
    heavy = dataclasses.replace(g, memory=mem)
    assert greedy_checkpoints(heavy, np.arange(10), 5).tolist() == [1, 3, 9]


@pytest.mark.parametrize("L", range(4, 17))
def test_generalisations_equal_chen_on_chains(L: int) -> None:
    g = linear_chain(L)
    assert articulation_candidates(g).tolist() == list(range(L))
    peak = no_recompute_peak(g)
    for family in ("sqrtn", "greedy"):
        for frac in (1.0, 0.7, 0.5):
            budget = frac * peak
            original = get_strategy(f"chen_{family}")(g, budget)
            for prefix in ("ap", "linearized"):
                other = get_strategy(f"{prefix}_{family}")(g, budget)
                assert other.status == original.status
                assert other.stats["checkpoints"] == original.stats["checkpoints"]
                if original.has_schedule:
                    assert np.array_equal(other.schedule.R, original.schedule.R)
                    assert np.array_equal(other.schedule.S, original.schedule.S)
                else:
                    assert other.min_feasible_budget == original.min_feasible_budget


def brute_force_cut_vertices(graph: DFGraph) -> list[int]:
    """Forward nodes whose removal disconnects the source-augmented undirected forward graph (BFS)."""
    L = graph.loss
    fwd = [(int(a), int(b)) for a, b in graph.edges if b < L]
    adj: dict[int, set[int]] = {v: set() for v in range(-1, L + 1)}
    for a, b in fwd:
        adj[a].add(b)
        adj[b].add(a)
    for v in range(L):
        if not any(b == v for _, b in fwd):
            adj[-1].add(v)
            adj[v].add(-1)
        if not any(a == v for a, _ in fwd):
            adj[L].add(v)
            adj[v].add(L)
    cuts = []
    for v in range(L):
        seen, todo = {-1}, [-1]
        while todo:
            for w in adj[todo.pop()] - seen - {v}:
                seen.add(w)
                todo.append(w)
        if len(seen) < L + 1:  # all L + 2 vertices but the removed one
            cuts.append(v)
    return cuts


@pytest.mark.parametrize("seed", range(8))
def test_articulation_points_match_brute_force(seed: int) -> None:
    g = random_training_graph(9, seed, skip_probability=0.2)
    assert articulation_candidates(g).tolist() == brute_force_cut_vertices(g)


GRAPHS = [linear_chain(7)] + [random_training_graph(8, seed) for seed in range(3)]


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda g: g.name)
@pytest.mark.parametrize("name", BASELINES)
def test_baseline_valid_in_budget_or_infeasible(graph: DFGraph, name: str) -> None:
    strategy = get_strategy(name)
    is_chain = graph.name.startswith("linear")
    if name in CHAIN_ONLY and not is_chain:
        with pytest.raises(GraphError, match="linear forward graph"):
            strategy(graph, 1e9)
        return
    peak = no_recompute_peak(graph)
    for frac in (1.0, 0.8, 0.6, 0.3):
        budget = frac * peak
        res = strategy(graph, budget)
        if res.has_schedule:
            assert res.status == Status.FEASIBLE
            sim = simulate(graph, res.schedule)
            assert sim.valid and sim.peak_memory <= budget
            assert res.cost == sim.cost >= graph.total_cost
        else:
            assert res.status == Status.INFEASIBLE
            assert res.min_feasible_budget > budget
            again = strategy(graph, res.min_feasible_budget)
            assert again.status == Status.FEASIBLE and again.peak_memory <= res.min_feasible_budget


@pytest.mark.parametrize("name", ["chen_greedy", "ap_greedy", "linearized_greedy"])
def test_greedy_with_room_recomputes_nothing(name: str) -> None:
    # The b sweep includes "no checkpoint": one segment, never dropped - checkpoint-all.
    g = linear_chain(9)
    res = get_strategy(name)(g, no_recompute_peak(g))
    assert res.cost == g.total_cost


def test_plain_dag_is_refused() -> None:
    with pytest.raises(GraphError, match="plain DAG"):
        get_strategy("ap_sqrtn")(random_dag(6, 0), 100)


@pytest.mark.reference
def test_chen_equals_generalisations_on_vgg16() -> None:
    if not reference_graphs_available():
        pytest.skip("reference graphs not found (set REMAT_GRAPHS_DIR or place ../shared/data/graphs)")
    g = load_reference_graph("vgg16")
    budget = 0.9 * no_recompute_peak(g)
    results = [get_strategy(f"{p}_sqrtn")(g, budget) for p in ("chen", "ap", "linearized")]
    assert all(r.has_schedule for r in results)
    assert all(np.array_equal(r.schedule.R, results[0].schedule.R) for r in results)
    assert results[0].overhead(g) > 1.0


@pytest.mark.reference
@pytest.mark.parametrize("short", REFERENCE)
def test_baselines_on_reference_graphs(short: str) -> None:
    if not reference_graphs_available():
        pytest.skip("reference graphs not found (set REMAT_GRAPHS_DIR or place ../shared/data/graphs)")
    g = load_reference_graph(short)
    budget = 0.8 * no_recompute_peak(g)
    for name in BASELINES:
        try:
            res = get_strategy(name)(g, budget, grid_size=40)
        except GraphError:
            assert name in CHAIN_ONLY
            continue
        if res.has_schedule:
            assert simulate(g, res.schedule, plan=False).peak_memory <= budget
            assert res.overhead(g) >= 1.0
        else:
            assert res.status == Status.INFEASIBLE and res.min_feasible_budget > budget
