"""Property test: on random small training graphs, every strategy's schedule passes simulate() within the budget.

Hypothesis draws the graph (structure, costs, memories, constant overhead) and the budget; brute force
(tests/brute_force.py) says what the optimum is. Every registered strategy must then give either a
schedule that simulate() accepts within the budget - with the cost and peak it reports, which brute
force's own stage-by-stage accounting of that schedule confirms, and never cheaper than the optimum -
or an answer without one that says why; the exact strategies must find the optimum itself, and only
the chain-only heuristics may refuse a graph with skip connections.
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
    # Mostly in the lower half between the least feasible budget and the no-recomputation peak, where
    # schedules recompute and free values mid-stage; sometimes just below the least budget.
    budget = lo + draw(st.floats(0, 0.5)) * (hi - lo) if draw(st.integers(0, 4)) else lo - 0.5
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
            # ... and simulate() itself agrees with brute force's own, loop-by-loop accounting of the schedule.
            assert (sim.cost, sim.peak_memory) == pytest.approx(oracle.replay(result.schedule.R, result.schedule.S))
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


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(st.integers(2, 6), st.integers(0, 10**6), st.floats(0.1, 0.6), st.floats(0, 0.3))
def test_simulate_agrees_with_brute_force_accounting_on_random_schedules(forward, seed, keep, extra):
    """Random checkpoints, the least recomputation for them, then extra recomputations (of resident values too)."""
    import numpy as np

    from remat.baselines.recompute import solve_min_r
    from remat.schedule import Schedule

    g = random_training_graph(forward, seed).with_constant_memory(seed % 7)
    rng = np.random.default_rng(seed)
    S = np.tril(rng.random((g.n, g.n)) < keep, -1)
    R = solve_min_r(g, S) | (np.tril(rng.random((g.n, g.n)) < extra) & S)
    for t in range(g.n):  # the inputs those extra recomputations need
        for v in range(t, -1, -1):
            if R[t, v]:
                R[t, g.deps[v][~S[t, g.deps[v]]]] = True
    sim = simulate(g, Schedule(R, S), plan=False)
    assert sim.valid, sim.violation
    assert (sim.cost, sim.peak_memory) == pytest.approx(BruteForce(g).replay(R, S))
