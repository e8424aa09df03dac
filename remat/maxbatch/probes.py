"""One probe of the maximum-batch search: is there a schedule at batch B within the budget and eq. (10)'s cap?"""

from __future__ import annotations

import time
from typing import Any

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.budget import check_budget
from remat.graph import DFGraph, GraphError
from remat.maxbatch.limits import allowed_cost
from remat.milp.certified import solve_ilp_certified
from remat.milp.formulation import build_checkmate_milp
from remat.milp.frontier import solve_frontier_lazily
from remat.milp.rounding import DEFAULT_THRESHOLDS, rounded_schedule
from remat.schedule import simulate
from remat.solvers import SolverOptions, solve_milp
from remat.solvers.isolated import KILL_GRACE, call_with_hard_limit, can_isolate


def probe_milp(graph: DFGraph, budget: float, time_limit: float | None, threads: int, backend: str,
                hard_limit: bool = False) -> tuple[str, Any]:
    """Is there a schedule within ``budget`` costing at most the cap of eq. (10)? Exact, cheapest test first.

    Checkpoint-all or a fast heuristic within the cap proves "yes" by example; the
    memory lower bound proves "no". Then the solvers (:func:`probe_by_solvers`).
    ``time_limit`` covers the whole probe; reaching it leaves the answer "unknown".
    ``hard_limit`` runs the solvers in a child process killed at the limit
    (:mod:`remat.solvers.isolated`), since a backend may overrun its own limit.
    """
    start = time.perf_counter()
    cap = allowed_cost(graph)
    if graph.constant_memory + checkpoint_all_peak_activations(graph) <= budget:
        return "feasible", checkpoint_all_schedule(graph)
    if check_budget(graph, budget) is not None:
        return "infeasible", None
    for example in heuristic_schedules(graph, budget):
        if example.cost <= cap:
            return "feasible", example.schedule
    if time_limit is None:
        return probe_by_solvers(graph, budget, None, threads, backend)
    left = max(time_limit - (time.perf_counter() - start), 1e-3)
    if not (hard_limit and can_isolate()):
        return probe_by_solvers(graph, budget, left, threads, backend)
    done, answer = call_with_hard_limit(probe_by_solvers, (graph, budget, left, threads, backend),
                                        left + KILL_GRACE)
    return answer if done else ("unknown", None)


def probe_by_solvers(graph: DFGraph, budget: float, time_limit: float | None, threads: int,
                      backend: str) -> tuple[str, Any]:
    """The solver half of :func:`probe_milp`, cheapest first.

    An infeasible LP of the frontier relaxation with the cost cap proves "no";
    rounding that LP may give an example. Then the certified ``ilp`` pipeline
    minimises the cost (its RINS local search finds examples the heuristics
    miss) until a schedule is within the cap or its bound is above it, for half
    the time left; last, the feasibility MILP, on the frontier relaxation with
    the cap and lazily added rows (:mod:`remat.milp.frontier`), which
    prunes by the cap itself.
    """
    start = time.perf_counter()

    def left() -> float | None:
        return None if time_limit is None else max(time_limit - (time.perf_counter() - start), 1e-3)

    cap = allowed_cost(graph)
    relax = build_checkmate_milp(graph, budget, free_formulation="tight", cost_bound=cap, frontier_relaxation=True,
                                 free_once=True)
    lp = solve_milp(relax.problem.relaxed(), "highs", SolverOptions(time_limit=left(), threads=threads))
    if lp.status == "infeasible":
        return "infeasible", None
    if lp.status == "optimal":
        _, S_star = relax.fractional(lp.x)
        for p in DEFAULT_THRESHOLDS:
            schedule = rounded_schedule(graph, S_star > p)
            sim = simulate(graph, schedule, plan=False)
            if sim.within(budget) and sim.cost <= cap:
                return "feasible", schedule
    half = None if time_limit is None else 0.5 * left()
    least = solve_ilp_certified(graph, budget, time_limit=half, threads=threads, backend=backend, target=cap)
    if least.has_schedule and least.cost <= cap:
        return "feasible", least.schedule
    if least.status == "infeasible" or (least.lower_bound is not None and least.lower_bound > cap):
        return "infeasible", None
    lazy = solve_frontier_lazily(graph, budget, SolverOptions(time_limit=left(), threads=threads), backend,
                                 cost_bound=cap, feasibility=True, free_once=True)
    if lazy.schedule is not None:
        return "feasible", lazy.schedule
    return ("infeasible" if lazy.status == "infeasible" else "unknown"), None


FAST_HEURISTICS = ("eviction_greedy", "linearized_greedy", "ap_greedy", "chen_greedy")


def heuristic_schedules(graph: DFGraph, budget: float):
    """In-budget schedules of the fast heuristics (every one is a point of the MILP's space)."""
    from remat.strategies import get_strategy

    for name in FAST_HEURISTICS:
        try:
            result = get_strategy(name)(graph, budget, grid_size=40)
        except (GraphError, ValueError):
            continue  # chain-only heuristics on other graphs
        if result.has_schedule:
            yield result


def checkpoint_all_peak_activations(graph: DFGraph) -> float:
    return simulate(graph, checkpoint_all_schedule(graph), plan=False).peak_memory - graph.constant_memory


def probe_strategy(graph: DFGraph, budget: float, strategy: str, options: dict) -> tuple[str, Any]:
    from remat.strategies import get_strategy

    result = get_strategy(strategy)(graph, budget, **options)
    if result.has_schedule and result.cost <= allowed_cost(graph):
        return "feasible", result.schedule
    if result.status in ("time_limit", "error"):
        return "unknown", None
    return "infeasible", None
