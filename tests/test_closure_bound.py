"""The stage-closure lower bound is a true lower bound on problem (9), and tight where it should be."""

import numpy as np
import pytest
from brute_force import BruteForce

from remat.budget import memory_lower_bound, no_recompute_peak
from remat.generators import linear_chain, random_dag, random_training_graph
from remat.graph import DFGraph
from remat.milp.closure_bound import recomputation_lower_bound, stages_over_budget
from remat.milp.plain import solve_ilp

SMALL = [linear_chain(3), linear_chain(5)] + [random_training_graph(4, s) for s in range(8)] + [
    random_dag(8, s) for s in range(3)]


@pytest.mark.parametrize("graph", SMALL, ids=lambda g: g.name)
def test_the_bound_never_exceeds_the_exhaustive_optimum(graph):
    bf = BruteForce(graph)
    lo = bf.min_budget()
    hi = no_recompute_peak(graph)
    for budget in np.unique(np.round(np.linspace(lo, hi, 4))):
        expected = bf.solve(budget)
        bound = recomputation_lower_bound(graph, budget)
        if expected is None:
            continue  # the bound may or may not see infeasibility; it must never claim a cost
        assert bound.complete
        assert graph.total_cost + bound.extra <= expected[0] + 1e-6


@pytest.mark.parametrize("seed", range(4))
def test_the_bound_never_exceeds_the_plain_milps_optimum_on_larger_graphs(seed):
    graph = random_training_graph(7, seed)
    lo, hi = memory_lower_bound(graph)[0], no_recompute_peak(graph)
    for share in (0.2, 0.5, 0.8):
        budget = lo + share * (hi - lo)
        plain = solve_ilp(graph, budget, mip_gap=0)
        if plain.status == "optimal":
            assert graph.total_cost + recomputation_lower_bound(graph, budget).extra <= plain.cost + 1e-6


def test_on_a_unit_chain_the_bound_is_the_optimum():
    """Dropping one forward value of a unit chain costs one recomputation; the bound sees exactly that."""
    chain = linear_chain(5)
    peak = no_recompute_peak(chain)
    bf = BruteForce(chain)
    for budget in (peak - 1, peak - 2):
        optimum = bf.solve(budget)[0]
        bound = recomputation_lower_bound(chain, budget)
        assert chain.total_cost + bound.extra == pytest.approx(optimum)


def test_dropping_a_cheap_value_pays_for_the_expensive_input_behind_it():
    """x -> a (expensive) -> b (cheap) -> loss: freeing b at the loss means recomputing a as well, unless a is kept.

    a and b are the same size, so keeping a instead of b saves nothing; the LP of (9) halves both and recomputes b
    from half of a, the bound does not.
    """
    names = ["a", "b", "c", "loss", "db", "da"]
    # forward a -> b -> c, loss, backward: db reads b and the loss, da reads db and a.
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (1, 4), (4, 5), (0, 5)]
    graph = DFGraph(names=names, cost=[100, 1, 1, 1, 1, 1], memory=[10, 10, 4, 1, 1, 1], edges=edges, loss=3)
    peak = no_recompute_peak(graph)
    bf = BruteForce(graph)
    budget = peak - 5
    optimum = bf.solve(budget)[0]
    bound = recomputation_lower_bound(graph, budget)
    assert graph.total_cost + bound.extra == pytest.approx(optimum)


def test_an_impossible_frontier_step_is_a_proof_of_infeasibility():
    chain = linear_chain(5)
    need, _ = memory_lower_bound(chain)
    bound = recomputation_lower_bound(chain, need - 0.5)
    assert bound.infeasible_stage is not None and bound.extra == np.inf


def test_only_stages_over_budget_are_solved_and_a_spent_time_limit_still_answers():
    graph = random_training_graph(8, 2)
    budget = 0.7 * no_recompute_peak(graph)
    over, excess = stages_over_budget(graph, budget)
    assert over.size and (excess > 0).all() and (np.diff(excess) <= 0).all()
    assert recomputation_lower_bound(graph, no_recompute_peak(graph)).stages_over == 0
    spent = recomputation_lower_bound(graph, budget, time_limit=1e-9)
    assert spent.extra == 0 and spent.stages_solved == 0 and not spent.complete
