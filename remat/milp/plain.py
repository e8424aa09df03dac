"""Problem (9) handed to a solver as is (``ilp_plain``), and its LP relaxation (§4, §5.1)."""

from __future__ import annotations

import time
from collections.abc import Callable

from remat.budget import check_budget
from remat.graph import DFGraph
from remat.milp.formulation import CheckmateMilp, build_checkmate_milp
from remat.result import SolveResult, Status, result_from_schedule
from remat.schedule import Schedule
from remat.solvers import SolverOptions, SolverOutput, solve_milp


def solve_ilp(
    graph: DFGraph,
    budget: float,
    time_limit: float | None = None,
    mip_gap: float = 1e-4,
    threads: int = 1,
    warm_start: Schedule | None = None,
    backend: str = "highs",
    partitioned: bool = True,
    free_formulation: str = "paper",
    verbose: bool = False,
    on_incumbent: Callable[[float, float, float], None] | None = None,
    memory_bound_check: bool = True,
    **_: object,
) -> SolveResult:
    """Optimal rematerialization by MILP (problem 9), solved by an exact backend.

    Status is ``optimal`` (within ``mip_gap``), ``feasible`` (a limit stopped the
    search with an incumbent), ``infeasible`` (proved), or ``time_limit`` (no
    incumbent). ``lower_bound`` is the solver's dual bound in cost units. A
    ``warm_start`` schedule (e.g. the best heuristic) is handed to the solver.
    ``memory_bound_check=False`` skips the instant infeasibility test of
    :func:`check_budget` (benchmarks use it to time the MILP alone).
    """
    options = {"time_limit": time_limit, "mip_gap": mip_gap, "threads": threads, "backend": backend,
               "partitioned": partitioned, "free_formulation": free_formulation}
    start = time.perf_counter()
    reason = check_budget(graph, budget) if memory_bound_check else None
    if reason is not None:
        return SolveResult("ilp_plain", Status.INFEASIBLE, budget, message=reason, options=options,
                           min_feasible_budget=None, solve_time=time.perf_counter() - start)
    milp = build_checkmate_milp(graph, budget, partitioned, free_formulation)
    x0 = milp.vector(warm_start) if warm_start is not None and milp.fits(warm_start) else None

    def report(seconds: float, objective: float, bound: float) -> None:
        if on_incumbent is not None:
            on_incumbent(seconds, milp.cost(objective), milp.cost(bound))

    solver_options = SolverOptions(time_limit, mip_gap, threads, verbose, report if on_incumbent else None)
    out = solve_milp(milp.problem, backend, solver_options, x0)
    return milp_result("ilp_plain", milp, out, start, options)


def milp_result(name: str, milp: CheckmateMilp, out: SolverOutput, start: float, options: dict) -> SolveResult:
    """Turn a solver's answer into a SolveResult checked by simulate()."""
    graph, budget = milp.graph, milp.budget
    stats = {"variables": milp.problem.num_vars, "constraints": milp.problem.num_rows,
             "build_time": milp.build_time, "solver_time": out.time, **out.stats}
    bound = milp.cost(out.bound) if out.bound is not None else None
    elapsed = time.perf_counter() - start
    if out.status in ("optimal", "feasible") and out.x is not None:
        schedule = milp.schedule(out.x)
        status = Status.OPTIMAL if out.status == "optimal" else Status.FEASIBLE
        result = result_from_schedule(name, graph, schedule, budget, elapsed, status=status, lower_bound=bound,
                                      options=options, stats=stats, message=out.message)
        result.stats["solver_memory"] = milp.memory(out.x)
        result.stats["solver_objective"] = milp.cost(out.objective)
        return result
    status = {"infeasible": Status.INFEASIBLE, "time_limit": Status.TIME_LIMIT}.get(out.status, Status.ERROR)
    return SolveResult(name, status, budget, solve_time=elapsed, lower_bound=bound, message=out.message,
                       options=options, stats=stats)


def solve_lp_relaxation(
    graph: DFGraph, budget: float, partitioned: bool = True, free_formulation: str = "paper",
    time_limit: float | None = None, threads: int = 1,
) -> tuple[CheckmateMilp, SolverOutput]:
    """The LP relaxation of problem (9) (§5.1): its optimum is a lower bound on the MILP's."""
    milp = build_checkmate_milp(graph, budget, partitioned, free_formulation)
    out = solve_milp(milp.problem.relaxed(), "highs", SolverOptions(time_limit=time_limit, threads=threads))
    return milp, out
