"""Problem (9) solved exactly through its frontier relaxation, tightened lazily where it errs.

Problem (9) bounds memory at every step ``U[t, k]``. On the reference graphs the
budget binds almost only at each stage's frontier step ``U[t, t]``, where the
whole stage's allocations are live. The *frontier relaxation*
(:func:`~remat.milp.formulation.build_checkmate_milp` with
``frontier_relaxation=True``) keeps eqs. (1b), (1c), (8a)-(8c) and Free's upper
bounds (7c), but enforces eqs. (2)-(4) only summed up to the frontier step: no
``U`` variables, no Free lower bounds (7b), about a third fewer columns and half
the rows. Branch and bound on it is a few times faster than on (9).

Exactness (the argument of a lazy-constraint method): every schedule feasible
for (9), with its exact Free, satisfies the relaxation's rows, so the
relaxation's optimum and every dual bound on the way are lower bounds on (9).
Its schedules are checked by ``simulate()``, which frees every value eq. (5)
allows - at least what the relaxation's Free frees - so memory is never higher
than the relaxation assumed at a frontier step. When the relaxation's optimal
schedule keeps to the budget at every step it is therefore optimal for (9).
When it breaks the budget at some non-frontier steps ``(t, k)``, those steps'
summed rows are added (valid for (9), so still a relaxation) and the solve is
repeated, warm-started from the best valid schedule; each round cuts the last
answer off, so the loop ends with an optimum or at the time limit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from remat.graph import DFGraph
from remat.milp.formulation import build_checkmate_milp
from remat.schedule import Schedule, Simulation, simulate
from remat.solvers import SolverOptions, solve_milp


@dataclass
class LazyOutcome:
    """What :func:`solve_frontier_lazily` ends with; ``status`` as a backend's (optimal ... error)."""

    status: str
    schedule: Schedule | None = None
    cost: float = np.inf
    bound: float | None = None
    message: str = ""
    stats: dict = field(default_factory=dict)


def violated_steps(graph: DFGraph, schedule: Schedule, budget: float, sim: Simulation | None = None) -> np.ndarray:
    """The ``(t, k)`` steps where ``schedule`` computes node k above ``budget``, per ``simulate()``."""
    sim = sim if sim is not None else simulate(graph, schedule, plan=False)
    return np.argwhere(schedule.R & (sim.memory > budget * (1 + 1e-7)))


def solve_frontier_lazily(
    graph: DFGraph,
    budget: float,
    options: SolverOptions,
    backend: str = "highs",
    warm_start: Schedule | None = None,
    on_schedule: Callable[[Schedule, float], None] | None = None,
    on_bound: Callable[[float], None] | None = None,
    max_rounds: int = 100,
    cost_bound: float | None = None,
    feasibility: bool = False,
    restart: bool = False,
    neighbourhood: tuple[Schedule, np.ndarray, np.ndarray] | None = None,
    free_once: bool = False,
    columns: tuple[np.ndarray, np.ndarray] | None = None,
    complete: Callable[[Schedule], Schedule] | None = None,
) -> LazyOutcome:
    """Optimal rematerialization (problem 9) by branch and bound on the frontier relaxation with lazy rows.

    ``on_schedule(schedule, cost)`` hears every budget-valid schedule found on
    the way (from the solver's improving solutions), ``on_bound(bound)`` every
    proved lower bound, both in cost units. ``options.time_limit`` covers all
    rounds together; ``options.stop`` ends the search between or within
    rounds. ``cost_bound`` adds eq. (10)'s ``sum C R <= cost_bound``;
    ``feasibility=True`` drops the objective, so any valid schedule answers
    (status ``optimal``) and ``infeasible`` is a proof that none exists.
    ``restart`` stops a round at the first improving relaxed schedule that
    breaks the budget (HiGHS, Gurobi), adds its rows and starts the next round,
    instead of letting that schedule prune the search as an incumbent.
    ``neighbourhood=(centre, free_R, free_S)`` fixes R and S to ``centre``'s
    values outside the free masks (:mod:`remat.milp.local_search`): the
    answer is then optimal only within that neighbourhood, and its bounds are
    not bounds on (9). ``free_once`` adds the valid inequality of
    :func:`~remat.milp.formulation.build_checkmate_milp` that frees a value at most
    once per stage (the relaxation's LP is otherwise free to release memory never
    allocated). ``columns`` builds only those R and S columns
    (:func:`~remat.milp.formulation.build_checkmate_milp`); ``complete`` then turns
    the model's schedule, zero outside its columns, into a whole one (a window's
    answer merged into its centre, :mod:`remat.milp.windows`) before ``simulate()``.
    """
    start = time.perf_counter()
    best = LazyOutcome("time_limit")
    if warm_start is not None:
        sim = simulate(graph, warm_start, plan=False)
        if sim.within(budget):  # a warm start over the budget is ignored, not returned
            best.schedule, best.cost = warm_start, sim.cost
    steps = np.zeros((0, 2), np.int64)
    rounds = 0
    size = {"variables": 0, "constraints": 0}  # stays 0 when time or a stop ends the search before a round

    def assess(schedule: Schedule) -> np.ndarray:
        """The steps where ``schedule`` breaks the budget; keeps it as the best when it breaks none."""
        if complete is not None:
            schedule = complete(schedule)
        sim = simulate(graph, schedule, plan=False)
        over = violated_steps(graph, schedule, budget, sim)
        if sim.valid and not len(over) and sim.cost < best.cost - 1e-9:
            best.schedule, best.cost = schedule, sim.cost
            if on_schedule is not None:
                on_schedule(schedule, sim.cost)
        return over

    while True:
        left = None if options.time_limit is None else options.time_limit - (time.perf_counter() - start)
        if (left is not None and left <= 0) or (options.stop is not None and options.stop.is_set()):
            break
        rounds += 1
        relax = build_checkmate_milp(graph, budget, free_formulation="tight", frontier_relaxation=True,
                                     extra_steps=steps, cost_bound=cost_bound, free_once=free_once,
                                     columns=columns)
        if feasibility:
            relax.problem.c[:] = 0.0
        if neighbourhood is not None:
            relax.restrict(*neighbourhood)
        size = {"variables": relax.problem.num_vars, "constraints": relax.problem.num_rows}

        pending: list[np.ndarray] = []

        def improving(_seconds: float, x: np.ndarray, relax=relax, pending=pending) -> bool:
            over = assess(relax.schedule(x))
            if len(over):
                pending.append(over)
            return restart and bool(len(over))

        def report_bound(bound: float, relax=relax) -> None:
            # The relaxation's objectives are not schedule costs (its solutions may break the budget); bounds are.
            if on_bound is not None and np.isfinite(bound):
                on_bound(relax.cost(bound))

        round_options = SolverOptions(
            left, options.mip_gap, options.threads, options.verbose,
            on_incumbent=lambda _s, _objective, bound, report=report_bound: report(bound),
            on_solution=improving, on_bound=lambda _s, bound, report=report_bound: report(bound),
            extra=dict(options.extra), stop=options.stop)
        fits = best.schedule is not None and (complete is not None or relax.fits(best.schedule))
        x0 = relax.vector(best.schedule) if fits else None
        out = solve_milp(relax.problem, backend, round_options, x0)
        if out.bound is not None and np.isfinite(out.bound) and not feasibility:
            best.bound = max(best.bound or -np.inf, relax.cost(out.bound))
            if on_bound is not None:
                on_bound(best.bound)
        if out.status in ("infeasible", "error"):
            best.status, best.message = out.status, out.message
            break
        if out.x is None:
            break  # time limit without a relaxed schedule
        over = np.unique(np.concatenate([assess(relax.schedule(out.x)), *pending]), axis=0)
        if out.status == "optimal" and len(over) == 0:
            best.status = "optimal"
            break
        if len(over) == 0 or rounds >= max_rounds:
            break  # stopped by the time limit with a valid schedule, or out of rounds
        steps = np.concatenate([steps, over])
    if best.status not in ("optimal", "infeasible", "error"):
        best.status = "feasible" if best.schedule is not None else "time_limit"
    best.stats = {"rounds": rounds, "lazy_steps": len(steps), **size, "time": time.perf_counter() - start}
    return best
