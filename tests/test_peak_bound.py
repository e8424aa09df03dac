"""The resident-set relaxation: every schedule maps into it, and its bounds never pass brute force's least peak."""

from __future__ import annotations

import numpy as np
import pytest
from brute_force import BruteForce

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.budget import memory_lower_bound, no_recompute_peak
from remat.generators import random_training_graph
from remat.graph import DFGraph, GraphError
from remat.maxbatch.limits import allowed_cost, batch_upper_bound
from remat.maxbatch.relaxation import (
    backward_windows,
    budget_ruled_out,
    build_resident_set_relaxation,
    least_peak_lower_bound,
    relaxation_point,
    smallest_batch_ruled_out,
)
from remat.maxbatch.search import max_batch_size
from remat.schedule import simulate
from remat.solvers import SolverOptions, solve_milp
from remat.strategies import get_strategy, strategy_names


def stage_lists(g, seed=0):
    """Every stage, the backward windows of a short length, and a random subset of stages."""
    rng = np.random.default_rng(seed)
    subset = np.sort(rng.choice(g.n, size=max(2, g.n // 3), replace=False))
    return [None, *backward_windows(g, length=4), subset]


CHAIN_ONLY = {"chen_greedy", "chen_sqrtn", "griewank_logn"}  # refuse a forward pass with skip connections
EXACT = {"ilp", "ilp_plain"}


def frontier_schedules(g):
    """Schedules of every strategy at two budgets where recomputation is needed (those that are frontier-advancing).

    The budgets lie between brute force's least budget and the no-recomputation peak (on these graphs 0.9 and
    0.7 of the peak are below the least budget, where no strategy has a schedule). Only the chain-only
    heuristics may refuse the graph, and only with GraphError; the exact strategies must find a schedule.
    """
    out = [checkpoint_all_schedule(g)]
    lo, hi = BruteForce(g).min_budget(), no_recompute_peak(g)
    for fraction in (0.3, 0.7):
        budget = lo + fraction * (hi - lo)
        for name in strategy_names():
            try:
                result = get_strategy(name)(g, budget, time_limit=20)
            except GraphError:
                assert name in CHAIN_ONLY, f"{name} refused {g.name}"
                continue
            if name in EXACT:
                assert result.has_schedule, f"{name} found no schedule at {budget}: {result.message}"
            if result.has_schedule and result.schedule.is_frontier_advancing:
                out.append(result.schedule)
    assert len(out) > 10  # most strategies' schedules are points to check, not only checkpoint-all's
    return out


@pytest.mark.parametrize("seed", range(3))
def test_every_strategys_schedule_is_a_point_of_the_relaxation_with_its_resident_peak(seed):
    g = random_training_graph(5, seed)
    for schedule in frontier_schedules(g):
        sim = simulate(g, schedule, plan=False)
        for stages in stage_lists(g, seed):
            rel = build_resident_set_relaxation(g, sim.cost, stages)
            x = relaxation_point(rel, schedule)
            p = rel.problem
            assert np.all(x >= p.lb - 1e-9) and np.all(x <= p.ub + 1e-9)
            ax = p.A @ x
            assert np.all(ax >= p.row_lb - 1e-9) and np.all(ax <= p.row_ub + 1e-9)
            assert rel.peak(x[-1]) <= sim.peak_memory + 1e-9


def least_peak(g, cost_limit):
    """The least peak of any schedule costing at most ``cost_limit``, by bisection over brute-force minimum costs."""
    oracle = BruteForce(g)
    lo, hi = int(oracle.min_budget()) - 1, int(simulate(g, checkpoint_all_schedule(g), plan=False).peak_memory)
    while hi - lo > 1:  # memories are whole numbers, so peaks are too
        mid = (lo + hi) // 2
        found = oracle.solve(mid)
        lo, hi = (lo, mid) if found is not None and found[0] <= cost_limit + 1e-9 else (mid, hi)
    return hi


def cost_limits(g):
    """Eq. (10)'s cap, and a tenth of the way from the cost of one computation per node to it."""
    return [allowed_cost(g), float(g.cost.sum()) + 0.1 * (allowed_cost(g) - float(g.cost.sum()))]


@pytest.mark.parametrize(("layers", "seed"), [(4, s) for s in range(6)] + [(5, s) for s in range(3)])
def test_the_bounds_never_pass_the_least_peak_and_the_milp_is_often_tight(layers, seed):
    g = random_training_graph(layers, seed)
    for limit in cost_limits(g):
        exact = least_peak(g, limit)
        lp = least_peak_lower_bound(g, limit)
        rel = build_resident_set_relaxation(g, limit)
        milp = solve_milp(rel.problem, "highs", SolverOptions(mip_gap=0))
        assert lp <= rel.peak(milp.objective) + 1e-6 and rel.peak(milp.objective) <= exact + 1e-6
        assert memory_lower_bound(g)[0] <= exact
        for stages in backward_windows(g, length=4):
            window = build_resident_set_relaxation(g, limit, stages)
            out = solve_milp(window.problem, "highs", SolverOptions(mip_gap=0))
            assert window.peak(out.objective) <= exact + 1e-6
        # A proof below the least peak is allowed; at it, never (the optimal schedule is a point).
        assert budget_ruled_out(g, exact, limit) is False


def test_the_relaxation_beats_the_memory_bound_and_reaches_the_least_peak_where_the_cap_binds():
    """On these graphs the cap forces more than one node's working set: the MILP finds exactly how much."""
    tighter, tight = 0, 0
    for seed in range(6):
        g = random_training_graph(4, seed)
        limit = cost_limits(g)[1]
        exact = least_peak(g, limit)
        rel = build_resident_set_relaxation(g, limit)
        bound = rel.peak(solve_milp(rel.problem, "highs", SolverOptions(mip_gap=0)).objective)
        tighter += bound > memory_lower_bound(g)[0]
        tight += abs(bound - exact) < 1e-6
        assert budget_ruled_out(g, bound - 1, limit) is True
    assert tighter >= 3 and tight >= 3


def batched(seed, layers, batch=8, params=100):
    g = random_training_graph(layers, seed)
    return DFGraph(g.names, g.cost * batch, g.memory * batch, g.edges, g.loss, batch_size=batch,
                   constant_memory=params)


@pytest.mark.parametrize(("seed", "layers", "budget"), [(2, 5, 500), (2, 5, 1000), (0, 6, 500), (1, 6, 800)])
def test_the_least_batch_ruled_out_is_above_the_exact_maximum_batch(seed, layers, budget):
    g = batched(seed, layers)
    exact = max_batch_size(g, budget, method="milp")
    assert exact.exact
    ruled_out = smallest_batch_ruled_out(g, budget, 0, 10 * exact.max_batch + 10, allowed_cost)
    assert ruled_out is not None and ruled_out > exact.max_batch


def test_the_search_takes_its_upper_end_from_the_relaxation_and_stays_exact():
    """The memory bound allows 11 samples; the relaxation proves 11 does not fit, so the seed's 10 is exact."""
    g = batched(2, 5)
    search = max_batch_size(g, 500)
    assert batch_upper_bound(g, 500) == 11
    assert search.status == "optimal" and search.max_batch == max_batch_size(g, 500, method="milp").max_batch == 10
    assert [(p["batch"], p["verdict"], p.get("proof")) for p in search.probes[1:]] == [
        (11, "infeasible", "resident_set_relaxation")]


def test_stages_out_of_range_are_refused():
    g = random_training_graph(3, 0)
    with pytest.raises(ValueError, match="stages"):
        build_resident_set_relaxation(g, allowed_cost(g), [0, g.n])
