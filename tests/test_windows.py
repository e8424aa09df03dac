"""Stage windows: an exact model of stages a..b with the rest fixed; spliced answers are valid and never worse."""

import numpy as np
import pytest
from brute_force import BruteForce

from remat.baselines import BASELINES
from remat.budget import memory_lower_bound, no_recompute_peak
from remat.generators import random_training_graph, transformer_training_graph
from remat.milp.closure_eviction import solve_closure_eviction
from remat.milp.windows import improve_by_windows, solve_window, splice, window_columns
from remat.schedule import simulate
from remat.solvers import SolverOptions


def start(graph, share):
    """A budget ``share`` of the way from the least to the no-recomputation one, and the cheapest baseline there."""
    lo, hi = memory_lower_bound(graph)[0], no_recompute_peak(graph)
    budget = lo + share * (hi - lo)
    results = [solve_closure_eviction(graph, budget)] + [
        BASELINES[name](graph, budget) for name in ("eviction_greedy", "linearized_greedy", "ap_greedy")]
    return budget, min((r for r in results if r.has_schedule), key=lambda r: r.cost, default=results[0])


@pytest.mark.parametrize("seed", range(4))
def test_one_window_over_every_stage_is_the_whole_problem(seed):
    graph = random_training_graph(4, seed)
    budget, first = start(graph, 0.4)
    if not first.has_schedule:
        pytest.skip("closure eviction found no start here")  # the start is an input of this test, not its subject
    found = solve_window(graph, budget, first.schedule, 0, graph.n - 1, SolverOptions(time_limit=60, mip_gap=0))
    optimum = BruteForce(graph).solve(budget)[0]
    cost = found[1] if found is not None else first.cost
    assert cost == pytest.approx(optimum)


@pytest.mark.parametrize("seed", range(3))
def test_windows_keep_to_the_budget_and_never_cost_more(seed):
    graph = random_training_graph(9, seed)
    budget, first = next((b, f) for b, f in map(lambda s: start(graph, s), (0.5, 0.7, 0.9))
                         if f.has_schedule and (f.schedule.R.sum(1) > 1).any())  # a start that recomputes
    for a in range(0, graph.n - 6, 3):
        found = solve_window(graph, budget, first.schedule, a, a + 5, SolverOptions(time_limit=30))
        if found is not None:
            schedule, cost = found
            sim = simulate(graph, schedule, plan=False)
            assert sim.valid and sim.within(budget) and sim.cost == pytest.approx(cost)
            assert cost <= first.cost + 1e-9
            # outside the window the schedule is the centre's
            assert np.array_equal(schedule.R[:a], first.schedule.R[:a])
            assert np.array_equal(schedule.R[a + 6:], first.schedule.R[a + 6:])


def test_a_window_model_is_small_and_its_columns_hold_the_centre():
    graph = transformer_training_graph(layers=6, hidden=64, heads=4, seq=64, batch=2, vocab=100)
    budget = 0.6 * no_recompute_peak(graph)
    first = solve_closure_eviction(graph, budget)
    a, b = 60, 75
    R, S = window_columns(graph, first.schedule, a, b)
    assert not R[:a].any() and not R[b + 1:].any()
    assert (first.schedule.R[a: b + 1] <= R[a: b + 1]).all() and (first.schedule.S[a: b + 2] <= S[a: b + 2]).all()
    assert R.sum() + S.sum() < 0.2 * graph.n ** 2  # a window's model, not the graph's
    assert splice(first.schedule, first.schedule, a, b).R.tolist() == first.schedule.R.tolist()


def test_the_window_search_reaches_the_optimum_of_a_small_transformer():
    """From closure eviction's start, windows close the gap to the stage-closure bound (both measured here)."""
    from remat.milp.closure_bound import recomputation_lower_bound

    graph = transformer_training_graph(layers=4, hidden=128, heads=4, seq=128, batch=4, vocab=1000)
    budget = 0.6 * no_recompute_peak(graph)
    first = solve_closure_eviction(graph, budget)
    best, cost = improve_by_windows(graph, budget, first.schedule, first.cost, SolverOptions(time_limit=120))
    bound = graph.total_cost + recomputation_lower_bound(graph, budget).extra
    assert simulate(graph, best, plan=False).within(budget)
    assert cost <= first.cost and cost <= 1.01 * bound
