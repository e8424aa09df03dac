"""Closure eviction: valid schedules within the budget on any DAG, optimal where the cheap drop hides a costly input."""

import numpy as np
import pytest
from brute_force import BruteForce

from remat.budget import memory_lower_bound, no_recompute_peak
from remat.generators import linear_chain, random_dag, random_training_graph
from remat.milp.closure_eviction import drop_intervals, solve_closure_eviction
from remat.result import Status
from remat.schedule import simulate
from remat.strategies import get_strategy

SMALL = [random_training_graph(4, s) for s in range(5)] + [random_dag(8, s) for s in range(3)]


@pytest.mark.parametrize("graph", SMALL, ids=lambda g: g.name)
def test_every_answer_is_a_valid_in_budget_schedule_no_cheaper_than_the_optimum(graph):
    bf = BruteForce(graph)
    lo, hi = bf.min_budget(), no_recompute_peak(graph)
    found = 0
    for budget in np.unique(np.round(np.linspace(lo, hi, 4))):
        result = solve_closure_eviction(graph, budget)
        if result.status == Status.INFEASIBLE:
            continue
        found += 1
        sim = simulate(graph, result.schedule, plan=False)
        assert sim.valid and sim.within(budget)
        assert result.cost >= bf.solve(budget)[0] - 1e-9
    assert found >= 1  # at least the no-recomputation budget


@pytest.mark.parametrize(("forward", "seed", "budget", "optimum"), [(4, 6, 35, 105), (4, 16, 26, 83), (5, 9, 45, 116)])
def test_it_finds_the_optimum_where_greedy_eviction_pays_more(forward, seed, budget, optimum):
    """Cases found by search (max_cost=20): greedy eviction's bytes-per-own-cost choice costs more here."""
    graph = random_training_graph(forward, seed, max_cost=20)
    assert BruteForce(graph).solve(budget)[0] == optimum
    greedy = get_strategy("eviction_greedy")(graph, budget)
    assert greedy.cost > optimum
    assert solve_closure_eviction(graph, budget).cost == pytest.approx(optimum)


def test_a_value_is_left_out_between_its_readers_or_for_one_stage_and_never_where_it_is_read():
    readers = np.array([3, 7, 12])
    assert drop_intervals(readers, 1, 5) == [(4, 7), (5, 6)]
    assert drop_intervals(readers, 1, 6) == [(4, 7)]  # the next reader is the next stage: one way
    assert drop_intervals(readers, 1, 2) == [(2, 3)]  # before the first reader: from just after the value itself
    assert drop_intervals(readers, 1, 7) == []  # stage 7 reads it
    assert drop_intervals(readers, 1, 12) == []  # nothing reads it later


def test_it_is_registered_and_reaches_budgets_greedy_eviction_cannot_on_a_chain():
    chain = linear_chain(8)
    budget = memory_lower_bound(chain)[0] + 2
    result = get_strategy("closure_eviction")(chain, budget)
    assert result.status == Status.FEASIBLE and result.peak_memory <= budget
