"""The Gurobi and CP-SAT backends against HiGHS and exhaustive search, on real solvers.

CP-SAT runs in a child process (about a second to start), so its cases are few and small.
"""

import dataclasses
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from brute_force import BruteForce

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.budget import check_budget, no_recompute_peak
from remat.generators import linear_chain, random_training_graph
from remat.graph.reference import load_reference_graph, reference_graphs_available
from remat.milp.formulation import build_checkmate_milp
from remat.milp.plain import solve_ilp
from remat.result import Status
from remat.solvers import MilpProblem, SolverError, SolverOptions, solve_milp
from remat.solvers.integral import integral_model

BACKENDS = ["gurobi", "cpsat"]
# (graph, budget): tight, middling and loose budgets on chains and random training graphs.
CASES = [(linear_chain(3), 3.0), (linear_chain(4), 4.0), (random_training_graph(3, 0), 27.0),
         (random_training_graph(3, 1), 30.0), (random_training_graph(3, 2), 22.0), (random_training_graph(4, 3), 30.0)]
# Budgets that pass the cheap memory test but admit no schedule (exhaustive search says 20 and 27 are needed).
INFEASIBLE = [(random_training_graph(3, 9), 19.5), (random_training_graph(4, 13), 26.0)]


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text and text, text
    return text


@pytest.mark.parametrize("backend", BACKENDS)
def test_optimum_equals_highs_and_schedule_is_valid(backend):
    for k, (graph, budget) in enumerate(CASES):
        expected = solve_ilp(graph, budget, mip_gap=0)
        assert expected.status == Status.OPTIMAL
        seen = []
        warm = checkpoint_all_schedule(graph) if k == 0 else None
        result = solve_ilp(graph, budget, mip_gap=0, threads=2, backend=backend, warm_start=warm,
                           on_incumbent=lambda *a, seen=seen: seen.append(a))
        assert result.status == Status.OPTIMAL, (graph.name, budget, result.message)
        assert result.cost == pytest.approx(expected.cost), (graph.name, budget)
        assert result.lower_bound == pytest.approx(expected.cost)
        assert result.simulation.valid and result.peak_memory <= budget
        assert result.stats["solver_objective"] == pytest.approx(result.simulation.cost)
        assert result.stats["threads"] == 2  # as read back from the solver
        assert seen and seen[-1][1] == pytest.approx(result.cost), "the last incumbent is the answer"
        assert all(bound <= objective + 1e-9 for _, objective, bound in seen)


@pytest.mark.parametrize("backend", BACKENDS)
def test_infeasible_budget_is_proved_by_the_backend(backend):
    for graph, budget in INFEASIBLE:
        assert check_budget(graph, budget) is None, "the cheap test must not decide it"
        assert BruteForce(graph).solve(budget) is None
        result = solve_ilp(graph, budget, backend=backend, threads=2)
        assert result.status == Status.INFEASIBLE, result.message


def test_gurobi_below_the_licence_limit_solves_and_above_returns_the_limit():
    small = build_checkmate_milp(linear_chain(8), 4)
    assert small.problem.num_vars < 2000 and small.problem.num_rows < 2000
    result = solve_ilp(linear_chain(8), 4, backend="gurobi", mip_gap=0)
    assert result.status == Status.OPTIMAL and result.cost == 26  # 17 forward/backward nodes + 9 recomputations
    big = solve_ilp(linear_chain(40), 10, backend="gurobi")
    assert big.status == Status.ERROR and big.schedule is None
    assert "2,000 variables" in big.message and "2,000 constraints" in big.message
    assert "13,822 variables" in big.message  # the model's own size
    assert "solver=highs" in big.message and "\n" not in big.message


def test_gurobi_infeasible_or_unbounded_is_resolved_to_infeasible():
    # x + y >= 1 and x + y <= 0 with free columns and a free improving direction: presolve says INF_OR_UNBD.
    problem = MilpProblem(np.array([0.0, 0.0, -1.0]), sp.csr_matrix(np.array([[1.0, 1, 0], [1, 1, 0]])),
                          np.array([1.0, -np.inf]), np.array([np.inf, 0.0]), np.full(3, -np.inf), np.full(3, np.inf),
                          np.array([True, True, False]))
    out = solve_milp(problem, "gurobi")
    assert out.status == "infeasible" and out.stats["resolved_without_dual_reductions"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_tiny_time_limit_returns_an_answer_not_an_exception(backend):
    graph = random_training_graph(10, 0)  # 1,138 variables: inside Gurobi's licence; Gurobi needs ~14 s here
    milp = build_checkmate_milp(graph, 47.0)
    out = solve_milp(milp.problem, backend, SolverOptions(time_limit=0.2, threads=1, mip_gap=0))
    assert out.status in ("feasible", "time_limit"), out.message
    limit_time = out.stats["cpsat_time"] if backend == "cpsat" else out.time
    assert limit_time < 1.5
    if out.status == "feasible":
        assert milp.schedule(out.x).R.shape == (graph.n, graph.n)
        assert out.bound is None or out.bound <= out.objective + 1e-9


@pytest.mark.parametrize("backend", ["highs", *BACKENDS])
def test_bad_time_limit_and_unknown_backend(backend):
    with pytest.raises(ValueError) as exc:
        solve_ilp(linear_chain(3), 4, backend=backend, time_limit=0)
    assert "time limit" in one_line(exc)
    with pytest.raises(ValueError) as exc:
        solve_ilp(linear_chain(3), 4, backend=backend + "x")
    assert all(name in one_line(exc) for name in ("highs", "gurobi", "cpsat"))


@pytest.mark.parametrize("backend, package, fix", [("gurobi", "gurobipy", "pip install gurobipy"),
                                                   ("cpsat", "ortools", "pip install ortools")])
def test_missing_package_is_a_one_line_error(monkeypatch, backend, package, fix):
    monkeypatch.setitem(sys.modules, package, None)  # makes the import fail as if it were not installed
    with pytest.raises(SolverError) as exc:
        solve_ilp(linear_chain(3), 4, backend=backend)
    assert fix in one_line(exc)


@pytest.mark.parametrize("backend, stop_early", [("gurobi", {"SolutionLimit": 1}),
                                                 ("cpsat", {"stop_after_first_solution": True})])
def test_backend_specific_options_are_passed_and_bad_names_rejected(backend, stop_early):
    milp = build_checkmate_milp(random_training_graph(10, 0), 47.0)  # takes Gurobi seconds to prove
    options = SolverOptions(threads=1, mip_gap=0)
    options.extra = stop_early
    out = solve_milp(milp.problem, backend, options)
    assert out.status == "feasible" and out.objective >= 17 - 1e-9, (out.status, out.objective)  # optimum: 17
    options.extra = {"no_such_parameter": 1}
    with pytest.raises(ValueError) as exc:
        solve_milp(milp.problem, backend, options)
    assert "no_such_parameter" in one_line(exc)


# The integral model CP-SAT solves, checked without a solver.

def test_integral_model_is_exact_on_checkmate_milps():
    graphs = [linear_chain(4), *(random_training_graph(F, s) for F in (3, 4, 6) for s in range(3))]
    for graph in graphs:
        milp = build_checkmate_milp(graph, graph.constant_memory + float(graph.memory.sum()))
        im = integral_model(milp.problem)
        assert im.exact and im.objective_error == 0, (graph.name, im.notes)
        # U is memory in units of gcd(sizes): memory_scale / col_scale divides every tensor.
        u_scale = im.col_scale[milp.U[milp.U >= 0]]
        assert np.all(graph.memory % round(milp.memory_scale / u_scale[0]) == 0) and np.all(u_scale == u_scale[0])
        check_vector_round_trip(milp, im, checkpoint_all_schedule(graph))


@pytest.mark.skipif(not reference_graphs_available(), reason="reference graphs not found (../shared/data/graphs)")
def test_integral_model_is_exact_on_vgg16():
    graph = load_reference_graph("vgg16")
    milp = build_checkmate_milp(graph, no_recompute_peak(graph))
    im = integral_model(milp.problem)
    assert im.exact, im.notes
    assert im.col_scale.max() == 3288334336 // 1024  # largest tensor / gcd of all tensor sizes
    check_vector_round_trip(milp, im, checkpoint_all_schedule(graph))


def test_byte_sized_memory_with_a_scalar_loss_is_exact_and_matches_highs():
    # Activation sizes of a batch-256 CNN and a 4-byte loss: largest / gcd = 205,520,896 > 2**26.
    graph = random_training_graph(4, 3)
    numel = np.random.default_rng(0).choice([64 * 56 * 56, 256 * 56 * 56, 128 * 28 * 28, 2048 * 7 * 7, 1000], graph.n)
    memory = 4 * 256 * numel
    memory[graph.loss] = 4
    graph = dataclasses.replace(graph, memory=memory)
    milp = build_checkmate_milp(graph, float(memory.sum()))  # checkpoint_all fits: round-trip its vector
    im = integral_model(milp.problem)
    assert im.exact, im.notes
    assert im.col_scale.max() == milp.memory_scale / 4
    check_vector_round_trip(milp, im, checkpoint_all_schedule(graph))
    budget = 0.6 * float(memory.sum())
    expected = solve_ilp(graph, budget, mip_gap=0)
    result = solve_ilp(graph, budget, mip_gap=0, backend="cpsat", threads=2)
    assert result.status == expected.status == Status.OPTIMAL, result.message
    assert result.cost == pytest.approx(expected.cost) and result.peak_memory <= budget


def check_vector_round_trip(milp, im, schedule):
    """A valid schedule's MILP vector maps to integers that satisfy the integer rows exactly."""
    x = milp.vector(schedule)
    y = im.y(x)
    assert np.allclose(im.x(y), x, rtol=0, atol=1e-12)
    activity = im.A @ y
    lo = np.array([v if v is not None else -np.inf for v in im.row_lb], float)
    hi = np.array([v if v is not None else np.inf for v in im.row_ub], float)
    assert np.all(activity >= lo) and np.all(activity <= hi)
    assert np.all((y >= im.lb) & (y <= im.ub))
    assert int(im.objective @ y) / im.objective_scale == pytest.approx(milp.problem.c @ x, abs=1e-9)


def small_problem(c, rows, lo, hi, integral, ub=5.0):
    A = sp.csr_matrix(np.array(rows, float))
    n = A.shape[1]
    return MilpProblem(np.array(c, float), A, np.array(lo, float), np.array(hi, float), np.zeros(n),
                       np.full(n, ub), np.array(integral, bool))


def test_fractional_rows_and_implied_continuous_column_match_highs():
    # max x + y + z with 0.5x + y/3 <= 1.2 and z = 0.25x + 0.1y continuous (implied integral in units of 1/20).
    problem = small_problem([-1, -1, -1], [[0.5, 1 / 3, 0], [0.25, 0.1, -1]], [-np.inf, 0], [1.2, 0], [1, 1, 0])
    im = integral_model(problem)
    assert im.exact and im.col_scale[2] == 20
    highs = solve_milp(problem, "highs", SolverOptions(mip_gap=0))
    cpsat = solve_milp(problem, "cpsat", SolverOptions(mip_gap=0, threads=2))
    assert cpsat.status == highs.status == "optimal"
    assert cpsat.objective == pytest.approx(highs.objective) and cpsat.bound == pytest.approx(highs.objective)
    assert np.allclose(cpsat.x, highs.x, atol=1e-7)


def test_inexact_models_never_claim_optimality_or_infeasibility():
    # z continuous appears only in an inequality: not implied integral, so the lattice model is a restriction.
    restricted = small_problem([0, 0, -1], [[1, 1, 1]], [-np.inf], [2.5], [1, 1, 0])
    assert not integral_model(restricted).exact
    # Coefficients with no common denominator below 2**40 get rounded.
    rounded = small_problem([-1, -1, -1], [[np.pi, np.e, np.sqrt(2)]], [-np.inf], [7.0], [1, 1, 1])
    assert not integral_model(rounded).exact
    out = solve_milp(restricted, "cpsat", SolverOptions(threads=2))
    assert out.status == "feasible" and out.bound is None and "restriction" in out.message
    assert out.objective == pytest.approx(-2.0)  # the lattice holds the integers, not the true optimum -2.5
    assert np.all(restricted.A @ out.x <= 2.5 + 1e-9)


def test_highs_reports_the_dual_bound_while_it_searches():
    from remat.budget import memory_lower_bound, no_recompute_peak
    from remat.milp.formulation import build_checkmate_milp
    from remat.solvers import highs

    graph = random_training_graph(6, 0)
    lo, hi = memory_lower_bound(graph)[0], no_recompute_peak(graph)
    milp = build_checkmate_milp(graph, lo + 0.3 * (hi - lo))  # a budget that needs branching
    bounds = []
    old = highs.BOUND_REPORT_SECONDS
    highs.BOUND_REPORT_SECONDS = 0.0  # report at every interrupt check
    try:
        out = solve_milp(milp.problem, "highs", SolverOptions(mip_gap=0, on_bound=lambda s, b: bounds.append(b)))
    finally:
        highs.BOUND_REPORT_SECONDS = old
    assert out.status == "optimal" and bounds
    assert max(b for b in bounds if np.isfinite(b)) <= out.objective + 1e-6


@pytest.mark.parametrize("backend", ["highs", "gurobi"])
def test_a_set_stop_event_ends_the_search_as_at_a_time_limit(backend):
    import threading

    from remat.budget import memory_lower_bound

    graph = random_training_graph(6, 0)
    lo, hi = memory_lower_bound(graph)[0], no_recompute_peak(graph)
    milp = build_checkmate_milp(graph, lo + 0.3 * (hi - lo))
    if backend == "gurobi" and (milp.problem.num_vars > 2000 or milp.problem.num_rows > 2000):
        pytest.skip("model above the pip licence's size limit")
    stop = threading.Event()
    stop.set()
    out = solve_milp(milp.problem, backend, SolverOptions(mip_gap=0, stop=stop))
    assert out.status in ("feasible", "time_limit")
    assert solve_milp(milp.problem, backend, SolverOptions(mip_gap=0)).status == "optimal"


def test_highs_runs_with_any_thread_count_from_any_thread():
    # HiGHS sizes one process-wide thread pool; a run asking for another size, or from a thread that ran under
    # an older pool, used to fail at once with status "Not Set" (remat.solvers.highs).
    import threading

    milp = build_checkmate_milp(random_training_graph(4, 3), 30.0)
    statuses = []

    def run(threads: int) -> None:
        statuses.append(solve_milp(milp.problem, "highs", SolverOptions(threads=threads)).status)

    for threads, in_thread in ((2, False), (1, True), (1, False), (2, True), (2, False), (1, False)):
        if in_thread:
            worker = threading.Thread(target=run, args=(threads,))
            worker.start()
            worker.join()
        else:
            run(threads)
    assert statuses == ["optimal"] * 6
