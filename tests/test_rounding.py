import numpy as np
import pytest
from brute_force import BruteForce

from remat.generators import linear_chain, random_dag, random_training_graph
from remat.result import Status
from remat.strategies import get_strategy


@pytest.mark.parametrize("graph", [linear_chain(6)] + [random_training_graph(4, s) for s in range(4)] +
                         [random_dag(7, 2)], ids=lambda g: g.name)
@pytest.mark.parametrize("name", ["approx_lp_deterministic", "approx_lp_randomized"])
def test_rounding_is_valid_in_budget_and_above_lp_bound(graph, name):
    bf = BruteForce(graph)
    for budget in (bf.min_budget() + 2, bf.const + sum(bf.M)):
        r = get_strategy(name)(graph, budget)
        assert r.lower_bound is not None
        optimum = bf.solve(budget)[0]
        assert r.lower_bound <= optimum + 1e-6  # the LP bounds the optimum from below
        if r.status == Status.FEASIBLE:
            assert r.simulation.valid and r.peak_memory <= budget
            assert r.cost >= optimum - 1e-9 and r.cost >= r.lower_bound - 1e-6
            assert r.gap == pytest.approx((r.cost - r.lower_bound) / r.cost)
        else:
            assert r.status == Status.INFEASIBLE and r.min_feasible_budget > budget


def test_randomized_rounding_is_reproducible():
    g = linear_chain(8)
    a = get_strategy("approx_lp_randomized")(g, 5, seed=3, samples=50)
    b = get_strategy("approx_lp_randomized")(g, 5, seed=3, samples=50)
    assert a.cost == b.cost and np.array_equal(a.schedule.S, b.schedule.S)


def test_allowance_search_goes_past_zero_when_needed():
    g = linear_chain(8)
    r = get_strategy("approx_lp_deterministic")(g, 6)
    steps = r.stats["allowances"]
    # eps = 0 first: its LP solves but no rounding fits; the search goes on to a positive allowance, whose
    # rounding fits, and stops there.
    assert steps[0] == {"eps": 0.0, "lp": "optimal", "fitting_candidates": 0}
    assert len(steps) >= 2 and all(a["eps"] > 0 for a in steps[1:])
    assert steps[-1]["fitting_candidates"] >= 1 and all(a["fitting_candidates"] == 0 for a in steps[:-1])
    assert r.status == Status.FEASIBLE and r.peak_memory <= 6
    # Without the search (eps = 0 alone) nothing fits: going past zero is what found the schedule.
    alone = get_strategy("approx_lp_deterministic")(g, 6, allowances=(0.0,))
    assert alone.status == Status.INFEASIBLE and alone.min_feasible_budget > 6


def test_rounding_refuses_impossible_budget():
    r = get_strategy("approx_lp_deterministic")(linear_chain(4), 1)
    assert r.status == Status.INFEASIBLE and "raise the budget" in r.message
