"""The default ``ilp`` strategy: problem (9) solved exactly, with an anytime answer and a certificate.

The plain MILP (:func:`remat.strategies.ilp.solve_ilp`) hands problem (9) to the
solver and waits. On the larger reference graphs HiGHS then spends minutes in
presolve and the root LP before it has any schedule, and may find none. This
pipeline keeps the model exact but reaches good schedules and proved bounds
sooner, in stages, stopping as soon as ``cost <= (1 + mip_gap) * lower bound``:

1. **Cheap infeasibility proof**: computing node k needs its inputs resident and
   its output allocated (eqs. 1b, 3), so a budget below
   :func:`~remat.strategies.ilp.memory_lower_bound` is infeasible - no solve.
2. **Trivial bound and a heuristic incumbent**: every node runs at least once,
   so ``sum_i C_i`` bounds the cost from below (and checkpoint-all is optimal
   when it fits). :mod:`~remat.strategies.eviction` gives a first schedule in
   well under a second, often within a fraction of a percent at moderate budgets.
3. **LP bound and rounding** (§5): the LP of the frontier relaxation of (9)
   (budget enforced at each stage's frontier step only; see
   :func:`~remat.strategies.ilp.build_checkmate_milp`) is a proved lower bound,
   as tight as the full LP on the reference graphs and about ten times faster.
   It often certifies the first heuristic at once; otherwise the other fast
   baselines (App. B greedy generalisations, coarse grid) and two-phase rounding
   of ``S*`` at several thresholds and small budget allowances (§5.3) add
   incumbents.
4. **Branch and bound** warm-started from the best schedule so far, with the
   requested relative gap and what is left of the time limit: by default on the
   frontier relaxation, tightened lazily where its answer breaks the budget
   (:mod:`~remat.strategies.frontier`, exact); ``exact_model="full"`` runs
   branch and cut on (9) itself instead.

The answer is ``optimal`` when the gap to the best proved bound is within
``mip_gap``, ``feasible`` otherwise, ``infeasible`` only with a proof (memory
bound, LP or MILP infeasibility), ``time_limit`` when no schedule was found.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import numpy as np

from remat.graph import DFGraph, GraphError
from remat.schedule import Schedule, simulate
from remat.solvers.base import SolverOptions, solve_milp
from remat.strategies.checkpoint import checkpoint_all_schedule
from remat.strategies.frontier import solve_frontier_lazily
from remat.strategies.ilp import build_checkmate_milp, check_budget, milp_result
from remat.strategies.result import SolveResult, Status, result_from_schedule
from remat.strategies.rounding import DEFAULT_THRESHOLDS, rounded_schedule

DEFAULT_HEURISTICS = ("eviction_greedy", "chen_greedy", "ap_greedy", "linearized_greedy")


class _Incumbent:
    """The best schedule so far, the best proved bound, and when each milestone was reached."""

    def __init__(self, graph: DFGraph, budget: float, gap: float, start: float,
                 on_incumbent: Callable[[float, float, float], None] | None) -> None:
        self.graph, self.budget, self.gap, self.start = graph, budget, gap, start
        self.cost = np.inf
        self.hinted = np.inf  # best objective a solver reported before handing over its schedule
        self.schedule: Schedule | None = None
        self.source = ""
        self.bound = graph.total_cost  # every node is computed at least once
        self.on_incumbent = on_incumbent
        self.milestones: dict[str, float] = {}

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def offer(self, schedule: Schedule, source: str, cost: float | None = None) -> None:
        if cost is None:
            sim = simulate(self.graph, schedule, plan=False)
            if not sim.within(self.budget):
                return
            cost = sim.cost
        if cost < self.cost - 1e-9:
            self.cost, self.schedule, self.source = cost, schedule, source
            self.milestones.setdefault("first_schedule", self.elapsed())
            self._notify()

    def cost_hint(self, cost: float) -> None:
        """A solver's improving objective: reported at once, its schedule is collected when the solver returns."""
        if cost < min(self.cost, self.hinted) - 1e-9:
            self.hinted = cost
            self._notify()

    def raise_bound(self, bound: float | None) -> None:
        if bound is not None and bound > self.bound:
            self.bound = bound
            self._notify()

    def certified(self) -> bool:
        done = self.schedule is not None and self.cost <= (1 + self.gap) * self.bound + 1e-9
        if done:
            self.milestones.setdefault("certified", self.elapsed())
        return done

    def _notify(self) -> None:
        best = min(self.cost, self.hinted)
        if not np.isfinite(best):
            return
        if best <= 1.01 * self.bound + 1e-9:
            self.milestones.setdefault("gap_1pct", self.elapsed())
        if self.on_incumbent is not None:
            self.on_incumbent(self.elapsed(), best, self.bound)


def solve_ilp_certified(
    graph: DFGraph,
    budget: float,
    time_limit: float | None = None,
    mip_gap: float = 1e-4,
    threads: int = 1,
    backend: str = "highs",
    heuristics: Iterable[str] = DEFAULT_HEURISTICS,
    grid_size: int = 40,
    thresholds: Iterable[float] = DEFAULT_THRESHOLDS,
    allowances: Iterable[float] = (0.0, 0.02, 0.05),
    use_lp: bool = True,
    exact_model: str = "frontier",
    warm_start: Schedule | None = None,
    on_incumbent: Callable[[float, float, float], None] | None = None,
    verbose: bool = False,
    **_: object,
) -> SolveResult:
    """Optimal rematerialization (problem 9) by the staged pipeline of the module docstring."""
    start = time.perf_counter()
    if time_limit is not None and not time_limit > 0:
        raise ValueError(f"time limit must be positive seconds, got {time_limit!r}; omit it for no limit")
    if exact_model not in ("frontier", "full"):
        raise ValueError(f"exact_model must be 'frontier' or 'full', got {exact_model!r}")
    options = {"time_limit": time_limit, "mip_gap": mip_gap, "threads": threads, "backend": backend,
               "heuristics": list(heuristics), "use_lp": use_lp, "exact_model": exact_model}
    reason = check_budget(graph, budget)
    if reason is not None:
        return SolveResult("ilp", Status.INFEASIBLE, budget, solve_time=time.perf_counter() - start,
                           message=reason, options=options, stats={"proof": "memory lower bound"})
    inc = _Incumbent(graph, budget, mip_gap, start, on_incumbent)

    def remaining() -> float | None:
        return None if time_limit is None else max(time_limit - inc.elapsed(), 1e-3)

    def finish(status: Status | None = None, message: str = "", stats: dict | None = None) -> SolveResult:
        stats = {"milestones": inc.milestones, "incumbent_source": inc.source, **(stats or {})}
        if inc.schedule is None:
            return SolveResult("ilp", status or Status.TIME_LIMIT, budget, solve_time=inc.elapsed(),
                               lower_bound=inc.bound, message=message, options=options, stats=stats)
        certified = inc.certified()
        status = Status.OPTIMAL if certified else Status.FEASIBLE
        return result_from_schedule("ilp", graph, inc.schedule, budget, inc.elapsed(), status=status,
                                    lower_bound=inc.bound, options=options, stats=stats, message=message)

    # Stage 2: checkpoint-all, a given warm start, the first (fastest) heuristic.
    inc.offer(checkpoint_all_schedule(graph), "checkpoint_all")
    if warm_start is not None:
        inc.offer(warm_start, "warm_start")
    names = list(heuristics) if graph.has_training_structure else []
    if inc.certified() or _offer_heuristics(inc, names[:1], grid_size):
        return finish()
    # Stage 3: the LP bound often certifies that heuristic at once; then the other heuristics, then
    # rounding at budget allowances (each a further LP), as long as half the time is left.
    lp_options = SolverOptions(time_limit=remaining(), threads=threads, verbose=verbose)
    if use_lp:
        status = _lp_rounding(inc, 0.0, thresholds, lp_options)
        if status == "infeasible":
            return finish(Status.INFEASIBLE, "the LP relaxation is infeasible, so no schedule fits",
                          {"proof": "LP relaxation"})
        if inc.certified():
            return finish()
    if _offer_heuristics(inc, names[1:], grid_size):
        return finish()
    for eps in allowances if use_lp else ():
        if eps > 0 and (time_limit is None or remaining() > 0.5 * time_limit):
            lp_options.time_limit = remaining()
            if _lp_rounding(inc, eps, thresholds, lp_options) != "optimal" or inc.certified():
                break
    if inc.certified():
        return finish()
    if time_limit is not None and inc.elapsed() >= time_limit:
        return finish(message="time limit reached before branch and bound")
    solver_options = SolverOptions(remaining(), mip_gap, threads, verbose)
    if exact_model == "frontier":
        # Stage 4: branch and bound on the frontier relaxation, tightened lazily (remat.strategies.frontier).
        lazy = solve_frontier_lazily(graph, budget, solver_options, backend, inc.schedule,
                                     on_schedule=lambda schedule, cost: inc.offer(schedule, "frontier_bb", cost),
                                     on_bound=inc.raise_bound)
        if lazy.status == "infeasible":
            return finish(Status.INFEASIBLE, "branch and bound on a relaxation proved no schedule fits",
                          {"proof": "frontier relaxation MILP"})
        if lazy.status == "error" and inc.schedule is None:
            return finish(Status.ERROR, lazy.message)
        return finish(message=lazy.message, stats={"lazy": lazy.stats})
    # Stage 4 (exact_model="full"): branch and cut on (9) itself, from the incumbent.
    milp = build_checkmate_milp(graph, budget, free_formulation="tight")
    x0 = milp.vector(inc.schedule) if inc.schedule is not None and milp.fits(inc.schedule) else None

    def improving(seconds: float, objective: float, bound: float) -> None:
        inc.raise_bound(milp.cost(bound))
        inc.cost_hint(milp.cost(objective))

    solver_options.on_incumbent = improving
    solver_options.on_bound = lambda seconds, bound: inc.raise_bound(milp.cost(bound))
    out = solve_milp(milp.problem, backend, solver_options, x0)
    if out.status == "infeasible":
        return finish(Status.INFEASIBLE, "branch and cut proved no schedule fits", {"proof": "MILP"})
    if out.status == "error":
        return milp_result("ilp", milp, out, start, options)
    inc.raise_bound(milp.cost(out.bound) if out.bound is not None else None)
    if out.x is not None:
        inc.offer(milp.schedule(out.x), "branch_and_cut")
    return finish(message=out.message, stats={"solver": out.stats, "variables": milp.problem.num_vars,
                                              "constraints": milp.problem.num_rows})


def _offer_heuristics(inc: _Incumbent, names: list[str], grid_size: int) -> bool:
    """Offer each named heuristic's schedule; True as soon as one is certified."""
    from remat.strategies import get_strategy

    for name in names:
        try:
            result = get_strategy(name)(inc.graph, inc.budget, grid_size=grid_size)
        except GraphError:
            continue  # e.g. chen_greedy on a non-linear graph
        if result.has_schedule:
            inc.offer(result.schedule, name, result.cost)
        if inc.certified():
            return True
    return False


def _lp_rounding(inc: _Incumbent, eps: float, thresholds: Iterable[float], options: SolverOptions) -> str:
    """§5: LP of the frontier relaxation at budget ``(1 - eps) B``, its bound (eps = 0) and its roundings.

    The frontier relaxation's LP bound is as tight as the full LP's on the
    reference graphs and about ten times faster. Returns the LP's status.
    """
    graph = inc.graph
    relax = build_checkmate_milp(graph, (1 - eps) * inc.budget, free_formulation="tight", frontier_relaxation=True)
    lp = solve_milp(relax.problem.relaxed(), "highs", options)
    if lp.status != "optimal":
        return lp.status
    if eps == 0:
        inc.raise_bound(relax.cost(lp.objective))
        inc.milestones["lp"] = inc.elapsed()
    _, S_star = relax.fractional(lp.x)
    for p in thresholds:
        inc.offer(rounded_schedule(graph, S_star > p), f"lp_rounding@{p},eps={eps}")
    return lp.status


def _register() -> None:
    from remat.strategies import register

    register("ilp", solve_ilp_certified)


_register()
