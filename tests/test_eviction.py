import pytest
from brute_force import BruteForce

from remat.generators import linear_chain, random_training_graph
from remat.result import Status
from remat.strategies import get_strategy


@pytest.mark.parametrize("graph", [linear_chain(6)] + [random_training_graph(5, s) for s in range(5)],
                         ids=lambda g: g.name)
def test_eviction_greedy_valid_in_budget_and_never_below_optimum(graph):
    bf = BruteForce(graph)
    for budget in (bf.min_budget() + 3, bf.const + 0.8 * sum(bf.M)):
        r = get_strategy("eviction_greedy")(graph, budget)
        optimum = bf.solve(budget)[0]
        if r.status == Status.FEASIBLE:
            assert r.simulation.valid and r.peak_memory <= budget
            assert r.cost >= optimum - 1e-9
        else:
            assert r.status == Status.INFEASIBLE and r.min_feasible_budget > budget


def test_eviction_greedy_drops_nothing_when_everything_fits():
    g = random_training_graph(5, 0)
    r = get_strategy("eviction_greedy")(g, 1e9)
    assert r.cost == g.total_cost and r.stats["dropped"] == []
