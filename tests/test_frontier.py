"""Branch and bound on the frontier relaxation with lazy rows is exact for problem (9)."""

import threading

import pytest
from brute_force import BruteForce

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.budget import memory_lower_bound, no_recompute_peak
from remat.generators import linear_chain, random_dag, random_training_graph
from remat.milp.frontier import solve_frontier_lazily, violated_steps
from remat.milp.plain import solve_ilp
from remat.schedule import Schedule
from remat.solvers import SolverOptions

EXACT = SolverOptions(mip_gap=0)
SMALL = [linear_chain(4)] + [random_training_graph(4, s) for s in range(4)] + [random_dag(7, 1)]


@pytest.mark.parametrize("graph", SMALL, ids=lambda g: g.name)
def test_lazy_frontier_matches_exhaustive_search(graph):
    bf = BruteForce(graph)
    lo = bf.min_budget()
    for budget in (lo, lo + 2, lo + 6):
        out = solve_frontier_lazily(graph, budget, EXACT)
        assert out.status == "optimal"
        assert out.cost == pytest.approx(bf.solve(budget)[0])
        assert out.bound <= out.cost + 1e-6
    assert solve_frontier_lazily(graph, lo - 0.5, EXACT).status == "infeasible"


# Cells where the first relaxed answer breaks the budget at a non-frontier step, so rows are added lazily.
LAZY_CELLS = [(5, 5, 0.25), (5, 5, 0.5), (6, 0, 0.25), (6, 0, 0.5), (6, 4, 0.0), (5, 2, 0.0)]


@pytest.mark.parametrize("forward, seed, fraction", LAZY_CELLS)
def test_lazy_rounds_reach_the_plain_milp_optimum(forward, seed, fraction):
    graph = random_training_graph(forward, seed)
    lo, hi = memory_lower_bound(graph)[0], no_recompute_peak(graph)
    budget = lo + fraction * (hi - lo)
    out = solve_frontier_lazily(graph, budget, EXACT)
    plain = solve_ilp(graph, budget, mip_gap=0)
    assert out.stats["rounds"] >= 2 and out.stats["lazy_steps"] >= 1
    assert out.status == str(plain.status)
    if out.status == "optimal":
        assert out.cost == pytest.approx(plain.cost)
        assert not len(violated_steps(graph, out.schedule, budget))


def test_violated_steps_names_the_steps_over_budget():
    g = linear_chain(2)  # unit memories: forward 0, 1; loss 2; backward 3, 4
    schedule = checkpoint_all_schedule(g)
    peak = no_recompute_peak(g)
    assert not len(violated_steps(g, schedule, peak))
    over = violated_steps(g, schedule, peak - 0.5)
    assert len(over) and all(schedule.R[t, k] for t, k in over)
    assert len(violated_steps(g, schedule, 0.5)) == int(schedule.R.sum())  # every step holds >= 1 unit


def test_warm_start_and_callbacks_report_valid_schedules_and_bounds():
    graph = random_training_graph(5, 5)
    lo, hi = memory_lower_bound(graph)[0], no_recompute_peak(graph)
    budget = lo + 0.5 * (hi - lo)
    seen, bounds = [], []
    out = solve_frontier_lazily(graph, budget, EXACT, warm_start=None,
                                on_schedule=lambda s, c: seen.append((s, c)), on_bound=bounds.append)
    assert seen and seen[-1][1] == pytest.approx(out.cost)
    assert all(not len(violated_steps(graph, s, budget)) for s, _ in seen)
    assert max(bounds) <= out.cost + 1e-6
    assert isinstance(out.schedule, Schedule)


@pytest.mark.parametrize("backend", ["highs", "gurobi", "cpsat"])
def test_every_backend_runs_the_lazy_rounds_to_the_same_optimum(backend):
    graph = random_training_graph(5, 5)
    lo, hi = memory_lower_bound(graph)[0], no_recompute_peak(graph)
    budget = lo + 0.5 * (hi - lo)
    out = solve_frontier_lazily(graph, budget, EXACT, backend=backend)
    assert out.status == "optimal" and out.stats["rounds"] >= 2
    assert out.cost == pytest.approx(solve_ilp(graph, budget, mip_gap=0).cost)


@pytest.mark.parametrize("forward, seed, fraction", LAZY_CELLS[:3])
def test_restarting_at_budget_breaking_incumbents_stays_exact(forward, seed, fraction):
    graph = random_training_graph(forward, seed)
    lo, hi = memory_lower_bound(graph)[0], no_recompute_peak(graph)
    budget = lo + fraction * (hi - lo)
    out = solve_frontier_lazily(graph, budget, EXACT, restart=True)
    plain = solve_ilp(graph, budget, mip_gap=0)
    assert out.status == str(plain.status)
    if out.status == "optimal":
        assert out.cost == pytest.approx(plain.cost)


def test_a_warm_start_over_the_budget_is_ignored():
    graph = random_training_graph(4, 1)
    lo = BruteForce(graph).min_budget()
    assert no_recompute_peak(graph) > lo  # so checkpoint-all breaks this budget
    out = solve_frontier_lazily(graph, lo, EXACT, warm_start=checkpoint_all_schedule(graph))
    assert out.status == "optimal" and out.cost == pytest.approx(BruteForce(graph).solve(lo)[0])
    assert not len(violated_steps(graph, out.schedule, lo))


def test_a_stop_set_before_the_first_round_returns_the_warm_start():
    # The race's second engine can be told to stop before it builds its first round.
    graph = random_training_graph(4, 2)
    stop = threading.Event()
    stop.set()
    warm = checkpoint_all_schedule(graph)
    out = solve_frontier_lazily(graph, no_recompute_peak(graph), SolverOptions(mip_gap=0, stop=stop),
                                warm_start=warm)
    assert out.status == "feasible" and out.schedule is warm
    assert out.stats["rounds"] == 0 and out.stats["variables"] == 0
