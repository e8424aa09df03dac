"""Local search over checkpoint sets: brute force on small graphs, local optimality on larger ones."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

from remat.generators import random_training_graph
from remat.schedule import simulate
from remat.strategies.baselines import checkpoint_set_schedule, greedy_budget_grid, greedy_checkpoints
from remat.strategies.checkpoint_search import (
    checkpoint_moves,
    hill_climb_checkpoints,
    iterated_hill_climb,
    least_peak_checkpoint_set,
)
from remat.strategies.maxbatch import allowed_cost


def peak_within(graph, cost_limit):
    @functools.cache
    def score(checkpoints: frozenset[int]) -> tuple[float, float]:
        sim = simulate(graph, checkpoint_set_schedule(graph, sorted(checkpoints)), plan=False)
        return (sim.peak_memory if sim.cost <= cost_limit else np.inf, sim.cost)

    return score


@pytest.mark.parametrize(("layers", "seed"), [(L, s) for L in (6, 7, 8) for s in range(4)])
def test_the_search_finds_the_least_peak_set_that_brute_force_finds(layers, seed):
    g = random_training_graph(layers, seed)
    cap = allowed_cost(g)
    every = [simulate(g, checkpoint_set_schedule(g, ck), plan=False)
             for k in range(layers + 1) for ck in itertools.combinations(range(layers), k)]
    best = min((s.peak_memory, s.cost) for s in every if s.cost <= cap)
    schedule, sim = least_peak_checkpoint_set(g, cap)
    assert (sim.peak_memory, sim.cost) == best
    again = simulate(g, schedule)
    assert again.valid and again.peak_memory == sim.peak_memory and again.cost <= cap


@pytest.mark.parametrize("seed", range(3))
def test_a_climb_ends_where_no_single_move_improves(seed):
    g = random_training_graph(24, seed)
    score = peak_within(g, allowed_cost(g))
    start = frozenset(int(c) for c in greedy_checkpoints(g, g.forward_nodes, greedy_budget_grid(g)[5]))
    found, found_score = hill_climb_checkpoints(start, g.forward_nodes, score)
    assert found_score == score(found) <= score(start)
    candidates = frozenset(int(c) for c in g.forward_nodes)
    for node in candidates:
        for move in checkpoint_moves(found, node, candidates):
            assert score(move) >= found_score


def test_moves_drop_shift_or_add_one_checkpoint():
    candidates = frozenset(range(10))
    assert checkpoint_moves(frozenset({4}), 6, candidates) == [frozenset({4, 6})]
    moves = checkpoint_moves(frozenset({0, 4}), 0, candidates, shifts=(1, 2))
    assert moves == [frozenset({4}), frozenset({1, 4}), frozenset({2, 4})]  # no shift onto 4's neighbour -1, -2


def test_kicks_escape_a_local_optimum_and_repeat_with_the_same_seed():
    g = random_training_graph(20, 0)
    score = peak_within(g, allowed_cost(g))
    single = hill_climb_checkpoints(frozenset(), g.forward_nodes, score)
    kicked = iterated_hill_climb(frozenset(), g.forward_nodes, score, patience=10)
    assert kicked[1][0] < single[1][0]  # peak 121 against the first climb's 128
    assert iterated_hill_climb(frozenset(), g.forward_nodes, score, patience=10) == kicked


def test_no_set_within_the_cost_limit_gives_none():
    g = random_training_graph(6, 0)
    assert least_peak_checkpoint_set(g, cost_limit=0.0) is None
