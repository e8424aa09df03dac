"""The MILP against exhaustive search, and its U against simulate()."""

import numpy as np
import pytest
from brute_force import BruteForce

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.generators import linear_chain, random_dag, random_training_graph
from remat.milp.formulation import build_checkmate_milp
from remat.milp.plain import solve_ilp, solve_lp_relaxation
from remat.result import Status
from remat.strategies import get_strategy

GRAPHS = [linear_chain(L) for L in (1, 2, 3, 4)] + [random_training_graph(F, seed) for F in (2, 3, 4)
                                                     for seed in range(4)] + [random_dag(7, 0), random_dag(8, 1)]


def budgets(bf: BruteForce) -> list[float]:
    lo = bf.min_budget()
    hi = bf.const + sum(bf.M)
    return sorted({lo, lo + 1, lo + 3, (lo + hi) / 2, hi})


def check_against_simulate(result):
    sim = result.simulation
    U = result.stats["solver_memory"]
    mask = ~np.isnan(U)
    assert np.allclose(U[mask], sim.memory[mask], atol=1e-5), "MILP U differs from simulate()"
    assert result.stats["solver_objective"] == pytest.approx(sim.cost, abs=1e-6)


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda g: g.name)
def test_milp_optimum_equals_exhaustive_search(graph):
    bf = BruteForce(graph)
    for budget in budgets(bf):
        expected = bf.solve(budget)
        result = solve_ilp(graph, budget, mip_gap=0)
        assert expected is not None
        assert result.status == Status.OPTIMAL, (budget, result.message)
        assert result.cost == pytest.approx(expected[0]), f"budget {budget}"
        assert result.peak_memory <= budget + 1e-9
        check_against_simulate(result)


@pytest.mark.parametrize("graph", GRAPHS[:6], ids=lambda g: g.name)
def test_just_below_smallest_budget_is_infeasible(graph):
    bf = BruteForce(graph)
    smallest = bf.min_budget()
    assert solve_ilp(graph, smallest - 0.5).status == Status.INFEASIBLE
    assert solve_ilp(graph, smallest).status == Status.OPTIMAL


@pytest.mark.parametrize("seed", range(3))
def test_tight_free_formulation_same_optimum(seed):
    g = random_training_graph(4, seed)
    bf = BruteForce(g)
    for budget in budgets(bf)[:3]:
        a = solve_ilp(g, budget, mip_gap=0)
        b = solve_ilp(g, budget, mip_gap=0, free_formulation="tight")
        assert a.cost == pytest.approx(b.cost)
        check_against_simulate(b)


def test_lp_relaxation_is_a_lower_bound():
    g = linear_chain(6)
    for budget in (4, 5, 7):
        milp, lp = solve_lp_relaxation(g, budget)
        assert lp.status == "optimal"
        assert milp.cost(lp.objective) <= solve_ilp(g, budget).cost + 1e-6


def test_warm_start_and_vector_round_trip():
    g = random_training_graph(4, 7)
    schedule = checkpoint_all_schedule(g)
    milp = build_checkmate_milp(g, 1e6)
    x = milp.vector(schedule)
    A = milp.problem.A
    activity = A @ x
    assert np.all(activity >= milp.problem.row_lb - 1e-9) and np.all(activity <= milp.problem.row_ub + 1e-9)
    assert np.array_equal(milp.schedule(x).R, schedule.R)
    warm = solve_ilp(g, 1e6, warm_start=schedule)
    assert warm.status == Status.OPTIMAL and warm.cost == g.total_cost


def test_unpartitioned_is_never_worse():
    g = linear_chain(2)
    for budget in (3, 4):
        part = solve_ilp(g, budget, mip_gap=0)
        unpart = solve_ilp(g, budget, mip_gap=0, partitioned=False, time_limit=60)
        assert unpart.status == Status.OPTIMAL
        assert unpart.cost <= part.cost + 1e-9
        assert unpart.simulation.valid


def test_limits_give_a_status_not_an_exception():
    g = linear_chain(24)
    result = solve_ilp(g, 6, time_limit=0.05)
    assert result.status in (Status.FEASIBLE, Status.TIME_LIMIT, Status.OPTIMAL)
    assert result.status != Status.FEASIBLE or result.simulation.valid


def test_budget_errors():
    g = linear_chain(3).with_constant_memory(100)
    r = solve_ilp(g, 50)
    assert r.status == Status.INFEASIBLE and "constant overhead" in r.message
    r = solve_ilp(g, 101)
    assert r.status == Status.INFEASIBLE and "needed to compute node" in r.message
    with pytest.raises(ValueError, match="positive number"):
        solve_ilp(g, float("nan"))
    with pytest.raises(ValueError, match="time limit"):
        solve_ilp(g, 1000, time_limit=0)


def test_registry():
    assert get_strategy("ilp_plain") is solve_ilp
    with pytest.raises(ValueError, match="known strategies: .*checkpoint_all"):
        get_strategy("nope")


@pytest.mark.parametrize("graph", GRAPHS[:10], ids=lambda g: g.name)
def test_frontier_relaxation_bounds_the_optimum(graph):
    from remat.solvers import solve_milp

    bf = BruteForce(graph)
    for budget in budgets(bf)[:3]:
        relax = build_checkmate_milp(graph, budget, free_formulation="tight", frontier_relaxation=True)
        lp = solve_milp(relax.problem.relaxed())
        full_milp, full_lp = solve_lp_relaxation(graph, budget, free_formulation="tight")
        assert lp.status == "optimal"
        assert relax.cost(lp.objective) <= full_milp.cost(full_lp.objective) + 1e-6 <= bf.solve(budget)[0] + 2e-6


def _random_schedules(graph, count, seed):
    """Valid frontier-advancing schedules with random checkpoints (the least R for each random S)."""
    from remat.baselines.recompute import solve_min_r
    from remat.schedule import Schedule

    rng = np.random.default_rng(seed)
    for _ in range(count):
        S = np.tril(rng.random((graph.n, graph.n)) < rng.uniform(0.1, 0.7), -1)
        yield Schedule(solve_min_r(graph, S), S)


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda g: g.name)
def test_free_once_rows_hold_for_every_schedule(graph):
    # Valid for (9): every schedule's exact vector (Free by eq. 5) satisfies the full model and the relaxation.
    from remat.schedule import simulate

    for schedule in _random_schedules(graph, 12, graph.n):
        assert simulate(graph, schedule, plan=False).valid
        budget = simulate(graph, schedule, plan=False).peak_memory
        for frontier in (False, True):
            milp = build_checkmate_milp(graph, budget, free_formulation="tight", frontier_relaxation=frontier,
                                        free_once=True)
            activity = milp.problem.A @ milp.vector(schedule)
            assert np.all(activity >= milp.problem.row_lb - 1e-7) and np.all(activity <= milp.problem.row_ub + 1e-7)


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda g: g.name)
def test_free_once_keeps_the_optimum(graph):
    from remat.solvers import SolverOptions, solve_milp

    bf = BruteForce(graph)
    for budget in budgets(bf)[:3]:
        milp = build_checkmate_milp(graph, budget, free_formulation="tight", free_once=True)
        out = solve_milp(milp.problem, "highs", SolverOptions(mip_gap=0))
        assert out.status == "optimal"
        assert milp.cost(out.objective) == pytest.approx(bf.solve(budget)[0])


def test_free_once_tightens_the_lp():
    # Without the rows the LP frees one value after each of several readers: bytes that were never allocated.
    from remat.solvers import solve_milp

    stronger = 0
    for graph in GRAPHS:
        bf = BruteForce(graph)
        for budget in budgets(bf)[:2]:
            bounds = []
            for free_once in (False, True):
                relax = build_checkmate_milp(graph, budget, free_formulation="tight", frontier_relaxation=True,
                                             free_once=free_once)
                lp = solve_milp(relax.problem.relaxed())
                bounds.append(relax.cost(lp.objective) if lp.status == "optimal" else np.inf)
            assert bounds[0] <= bounds[1] + 1e-7 and bounds[1] <= bf.solve(budget)[0] + 1e-6
            stronger += bounds[1] > bounds[0] + 1e-6
    assert stronger >= 3
