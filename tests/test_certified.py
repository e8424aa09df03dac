"""The default ilp pipeline is exact: same optimum as exhaustive search and as the plain MILP."""

import pytest
from brute_force import BruteForce

from remat.budget import memory_lower_bound, no_recompute_peak
from remat.generators import linear_chain, random_dag, random_training_graph
from remat.milp.certified import solve_ilp_certified
from remat.milp.plain import solve_ilp
from remat.result import Status
from remat.schedule import simulate
from remat.strategies import get_strategy

GRAPHS = [linear_chain(3), linear_chain(5)] + [random_training_graph(4, s) for s in range(6)] + [random_dag(8, 3)]


# Graphs whose least budget is below the no-recomputation peak, so every budget tried needs recomputation.
RECOMPUTING = [linear_chain(3), linear_chain(5)] + [random_training_graph(4, s) for s in (0, 1, 3, 4, 5, 6)] + [
    random_dag(8, 5)]

# One engine, and two racing on two threads (remat.milp.certified.ENGINES); then the same with heuristics, the LP
# stage and local search off, so that the exact engines decide most cells (the closure stages, which have no
# switch, settle the others; see test_the_exact_engines_decide_the_cells_the_earlier_stages_leave_open).
SETTINGS = {"serial": {}, "race": {"threads": 2}, "race_full": {"threads": 2, "race_with": "full"}}
ENGINES_ONLY = {"heuristics": (), "use_lp": False, "local_search": False}
SETTINGS |= {f"{name}_engines_only": {**options, **ENGINES_ONLY} for name, options in list(SETTINGS.items())}


def recomputing_budgets(graph, bf):
    """The least feasible budget, the midpoint to the no-recomputation peak, and just below that peak."""
    lo, hi = bf.min_budget(), no_recompute_peak(graph)
    assert lo < hi
    return sorted({lo, (lo + hi) / 2, hi - 0.5} - {b for b in (hi - 0.5,) if b < lo})


@pytest.mark.parametrize("settings", SETTINGS)
@pytest.mark.parametrize("graph", RECOMPUTING, ids=lambda g: g.name)
def test_pipeline_matches_exhaustive_search_and_plain_milp(graph, settings):
    bf = BruteForce(graph)
    options = SETTINGS[settings]
    for budget in recomputing_budgets(graph, bf):
        expected = bf.solve(budget)[0]
        result = solve_ilp_certified(graph, budget, mip_gap=0, **options)
        assert result.status == Status.OPTIMAL
        assert result.cost == pytest.approx(expected)
        assert result.lower_bound <= expected + 1e-6
        if settings == "serial":
            assert solve_ilp(graph, budget, mip_gap=0).cost == pytest.approx(expected)
        if settings.endswith("engines_only") and result.stats["engines"]:
            # Where the exact engines run, every engine of the setting runs (both in a race).
            racing = options.get("threads", 1) >= 2
            assert set(result.stats["engines"]) == {"frontier"} | (
                {options.get("race_with", "frontier_norestart")} if racing else set())
    below = solve_ilp_certified(graph, bf.min_budget() - 0.5, **options)
    assert below.status == Status.INFEASIBLE and "proof" in below.stats


def test_the_exact_engines_decide_the_cells_the_earlier_stages_leave_open():
    """With heuristics, LP and RINS off only checkpoint-all and the closure stages come before the engines; they
    settle some cells (the closure bound, closure eviction and windows), and the engines must then decide the rest."""
    decided_by_engines = 0
    for graph in RECOMPUTING:
        bf = BruteForce(graph)
        for budget in recomputing_budgets(graph, bf):
            result = solve_ilp_certified(graph, budget, mip_gap=0, **ENGINES_ONLY)
            assert result.status == Status.OPTIMAL and result.cost == pytest.approx(bf.solve(budget)[0])
            if result.stats["engines"]:
                decided_by_engines += 1
                assert set(result.stats["engines"]) == {"frontier"}
            else:  # decided before stage 4: by an offered schedule that meets a proved bound
                assert result.stats["incumbent_source"] in ("checkpoint_all", "closure_eviction", "windows")
    # 10 of these 25 cells before the windows stage; windows (exact sub-MILPs) now settle most of the others.
    assert decided_by_engines >= 1


@pytest.mark.parametrize("race_with", ["frontier_norestart", "full"])
def test_a_race_proves_the_optimum_where_branch_and_bound_is_needed(race_with):
    # Budgets where heuristics, the LP and local search leave a gap, so both engines run.
    for forward, seed in ((6, 0), (6, 4), (5, 5)):
        graph = random_training_graph(forward, seed)
        lo, hi = memory_lower_bound(graph)[0], no_recompute_peak(graph)
        budget = lo + 0.3 * (hi - lo)
        plain = solve_ilp(graph, budget, mip_gap=0)
        raced = solve_ilp_certified(graph, budget, mip_gap=0, threads=2, race_with=race_with)
        assert plain.status == raced.status == Status.OPTIMAL
        assert raced.cost == pytest.approx(plain.cost) and raced.lower_bound <= plain.cost + 1e-6
        assert simulate(graph, raced.schedule, plan=False).within(budget)
        assert set(raced.stats["engines"]) == {"frontier", race_with}  # both engines ran


def test_bad_engine_names_and_thread_counts_are_one_line_errors():
    with pytest.raises(ValueError, match="race_with must be one of frontier, frontier_norestart, full"):
        solve_ilp_certified(linear_chain(3), 10, race_with="gurobi")
    with pytest.raises(ValueError, match="exact_model must be one of"):
        solve_ilp_certified(linear_chain(3), 10, exact_model="cp")
    with pytest.raises(ValueError, match="threads must be >= 1"):
        solve_ilp_certified(linear_chain(3), 10, threads=0)


def test_anytime_callback_reports_improving_schedules():
    seen = []
    g = linear_chain(12)
    r = solve_ilp_certified(g, 5, mip_gap=0, on_incumbent=lambda s, c, b: seen.append((s, c, b)))
    assert r.status == Status.OPTIMAL and seen
    costs = [c for _, c, _ in seen]
    assert costs == sorted(costs, reverse=True) and costs[-1] == pytest.approx(r.cost)
    assert all(b <= c + 1e-6 for _, c, b in seen)
    assert r.stats["milestones"]["first_schedule"] <= r.solve_time


def test_registry_default_is_the_pipeline():
    assert get_strategy("ilp") is solve_ilp_certified
    with pytest.raises(ValueError, match="time limit"):
        solve_ilp_certified(linear_chain(3), 10, time_limit=-1)


def test_checkpoint_all_is_certified_when_it_fits():
    g = random_training_graph(4, 1)
    r = solve_ilp_certified(g, 1e9)
    assert r.status == Status.OPTIMAL and r.cost == g.total_cost and r.stats["incumbent_source"] == "checkpoint_all"


def _lp_bounds(graph, budget):
    """The frontier LP's bound without and with the freed-at-most-once rows."""
    from remat.milp.formulation import build_checkmate_milp
    from remat.solvers import solve_milp

    bounds = []
    for free_once in (False, True):
        relax = build_checkmate_milp(graph, budget, free_formulation="tight", frontier_relaxation=True,
                                     free_once=free_once)
        lp = solve_milp(relax.problem.relaxed())
        bounds.append(relax.cost(lp.objective) if lp.status == "optimal" else float("inf"))
    return bounds


def test_the_lp_decides_whether_models_free_each_value_at_most_once():
    # Kept exactly where the rows lift the LP bound; the answer is the optimum either way.
    kept = dropped = 0
    for graph in GRAPHS + [random_training_graph(5, s) for s in (4, 5)]:
        bf = BruteForce(graph)
        lo = bf.min_budget()
        for budget in (lo, lo + 2):
            plain, tight = _lp_bounds(graph, budget)
            result = solve_ilp_certified(graph, budget, mip_gap=0, heuristics=())
            assert result.cost == pytest.approx(bf.solve(budget)[0])
            if "free_once" not in result.stats or result.stats["free_once"] is None:
                continue  # decided before the LP stage
            assert result.stats["free_once"] == (tight > plain * (1 + 1e-4))
            kept += result.stats["free_once"]
            dropped += not result.stats["free_once"]
            off = solve_ilp_certified(graph, budget, mip_gap=0, heuristics=(), free_once=False)
            assert off.stats["free_once"] is False and off.cost == pytest.approx(result.cost)
    assert kept >= 2 and dropped >= 2
