"""Local search returns valid schedules that keep to their neighbourhood and are optimal within it."""

import numpy as np
import pytest
from brute_force import BruteForce

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.budget import memory_lower_bound, no_recompute_peak
from remat.generators import random_training_graph
from remat.milp.formulation import build_checkmate_milp
from remat.milp.local_search import improve_in_neighbourhood, rins_neighbourhood, search_near_schedules
from remat.schedule import simulate
from remat.solvers import SolverOptions, solve_milp
from remat.strategies import get_strategy

EXACT = SolverOptions(mip_gap=0)


def cell(forward: int, seed: int, fraction: float):
    graph = random_training_graph(forward, seed)
    lo, hi = memory_lower_bound(graph)[0], no_recompute_peak(graph)
    budget = lo + fraction * (hi - lo)
    centre = get_strategy("eviction_greedy")(graph, budget).schedule
    relax = build_checkmate_milp(graph, budget, free_formulation="tight", frontier_relaxation=True)
    lp = solve_milp(relax.problem.relaxed(), "highs", SolverOptions())
    return graph, budget, centre, *relax.fractional(lp.x)


@pytest.mark.parametrize("forward, seed", [(5, 0), (5, 2), (6, 1)])
def test_rins_keeps_to_the_neighbourhood_and_never_loses(forward, seed):
    graph, budget, centre, lp_R, lp_S = cell(forward, seed, 0.4)
    neighbourhood = rins_neighbourhood(lp_R, lp_S, centre)
    _, free_R, free_S = neighbourhood
    assert not (free_R & (lp_R == centre.R)).any()  # free exactly where the LP and the centre disagree
    out = improve_in_neighbourhood(graph, budget, neighbourhood, EXACT)
    sim = simulate(graph, out.schedule, plan=False)
    assert out.status == "optimal" and sim.within(budget) and sim.valid
    assert out.cost == pytest.approx(sim.cost)
    assert out.cost <= simulate(graph, centre, plan=False).cost + 1e-9
    assert (out.schedule.R[~free_R] == centre.R[~free_R]).all()
    assert (out.schedule.S[~free_S] == centre.S[~free_S]).all()


def test_an_all_free_neighbourhood_is_the_whole_problem_and_a_fixed_one_is_the_centre():
    graph, budget, centre, _, _ = cell(6, 1, 0.3)
    everything = np.ones_like(centre.R)
    out = improve_in_neighbourhood(graph, budget, (centre, everything, everything), EXACT)
    assert out.cost == pytest.approx(BruteForce(graph).solve(budget)[0])
    nothing = np.zeros_like(centre.R)
    same = improve_in_neighbourhood(graph, budget, (centre, nothing, nothing), EXACT)
    assert (same.schedule.R == centre.R).all() and (same.schedule.S == centre.S).all()


def test_search_near_schedules_reports_valid_schedules_and_skips_repeats():
    graph, budget, centre, lp_R, lp_S = cell(6, 4, 0.5)
    other = checkpoint_all_schedule(graph)
    heard = []
    searched = search_near_schedules(graph, budget, lp_R, lp_S, [centre, centre, other], EXACT,
                                     lambda schedule, cost: heard.append((schedule, cost)))
    # Two distinct schedules, plus one crossover when they lead to two different results.
    assert searched in (2, 3) and len(heard) >= 1
    for schedule, cost in heard:
        sim = simulate(graph, schedule, plan=False)
        assert sim.within(budget) and sim.cost == pytest.approx(cost)
    assert min(c for _, c in heard) <= simulate(graph, centre, plan=False).cost + 1e-9
