"""Property test: on random small training graphs, every strategy's schedule passes simulate() within the budget.

Hypothesis draws the graph (structure, costs, memories, constant overhead) and the budget; brute force
(tests/brute_force.py) says what the optimum is. Every registered strategy must then give either a schedule
that simulate() accepts within the budget - with the cost and peak it reports, and never cheaper than the
optimum - or an answer without one that says why; the exact strategies must find the optimum itself, and
only the chain-only heuristics may refuse a graph with skip connections.
"""

from __future__ import annotations

import math

import pytest
from brute_force import BruteForce
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remat.budget import no_recompute_peak
from remat.generators import random_training_graph
from remat.graph import GraphError
from remat.result import Status
from remat.schedule import simulate
from remat.strategies import get_strategy, strategy_names

CHAIN_ONLY = {"chen_greedy", "chen_sqrtn", "griewank_logn"}
EXACT = {"ilp", "ilp_plain"}


@st.composite
def graphs_and_budgets(draw):
    forward = draw(st.integers(2, 4))
    g = random_training_graph(forward, draw(st.integers(0, 10**6)), skip_probability=draw(st.sampled_from([0, 0.4])),
                              max_cost=draw(st.integers(1, 10)), max_memory=draw(st.integers(1, 10)))
    g = g.with_constant_memory(draw(st.integers(0, 5)))
    oracle = BruteForce(g)
    lo, hi = oracle.min_budget(), no_recompute_peak(g)
    # Mostly between the least feasible budget and the no-recomputation peak; sometimes just below it.
    budget = lo + draw(st.floats(0, 1)) * (hi - lo) if draw(st.integers(0, 4)) else lo - 0.5
    return g, budget, oracle


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(graphs_and_budgets())
def test_every_strategys_schedule_passes_simulate_within_budget(case):
    g, budget, oracle = case
    found = oracle.solve(budget)
    optimum = found[0] if found is not None else math.inf
    linear = all(len(g.deps[i]) <= 1 for i in range(g.loss))
    for name in strategy_names():
        try:
            result = get_strategy(name)(g, budget, time_limit=10)
        except GraphError:
            assert name in CHAIN_ONLY and not linear, f"{name} refused {g.name}"
            continue
        if result.has_schedule:
            sim = simulate(g, result.schedule, plan=False)
            assert sim.valid, (name, sim.violation)
            assert sim.within(budget), (name, sim.peak_memory, budget)
            assert result.cost == sim.cost and result.peak_memory == sim.peak_memory, name
            assert result.status in (Status.OPTIMAL, Status.FEASIBLE), name
            if result.schedule.is_frontier_advancing:  # brute force searches these
                assert sim.cost >= optimum - 1e-9, (name, sim.cost, optimum)
        else:
            assert result.status in (Status.INFEASIBLE, Status.TIME_LIMIT), (name, result.status, result.message)
            if result.min_feasible_budget is not None:  # a heuristic's schedule that needs more than the budget
                assert result.min_feasible_budget > budget, name
        if result.lower_bound is not None and found is not None:
            assert result.lower_bound <= optimum + 1e-6, (name, result.lower_bound, optimum)
        if name in EXACT:
            if found is None:
                assert result.status == Status.INFEASIBLE, (name, result.status)
            else:
                assert result.status == Status.OPTIMAL and result.cost == pytest.approx(optimum), (name, optimum)
