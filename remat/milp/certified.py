"""The default ``ilp`` strategy: problem (9) solved exactly, with an anytime answer and a certificate.

The plain MILP (:func:`remat.milp.plain.solve_ilp`) hands problem (9) to the
solver and waits. On the larger reference graphs HiGHS then spends minutes in
presolve and the root LP before it has any schedule, and may find none. This
pipeline keeps the model exact but reaches good schedules and proved bounds
sooner, in stages, stopping as soon as ``cost <= (1 + mip_gap) * lower bound``:

1. **Cheap infeasibility proof**: computing node k needs its inputs resident and
   its output allocated (eqs. 1b, 3), so a budget below
   :func:`~remat.budget.memory_lower_bound` is infeasible - no solve.
2. **Trivial bound and a heuristic incumbent**: every node runs at least once,
   so ``sum_i C_i`` bounds the cost from below (and checkpoint-all is optimal
   when it fits). :mod:`~remat.baselines.eviction` gives a first schedule in
   well under a second, often within a fraction of a percent at moderate budgets.
   Then the *stage-closure bound* (:mod:`~remat.milp.closure_bound`): at each
   stage's frontier step the resident values must fit, and each value left out
   must be computed again with every input behind it that is not resident - a
   small exact MILP per stage, often within a fraction of a percent of the
   optimum where the LP of (9) is percents below it (a fifth of the time left,
   60 s at most). Then large neighbourhood search over windows of stages
   (:mod:`~remat.milp.windows`: each window of (9) solved exactly with the rest
   fixed, a fifth of the time left). A graph whose frontier model would exceed
   :data:`WHOLE_MODEL_COLUMNS` columns skips stages 3 and 4 and spends all its
   time on windows; its certificate is the stage-closure bound.
3. **LP bound and rounding** (§5): the LP of the frontier relaxation of (9)
   (budget enforced at each stage's frontier step only; see
   :func:`~remat.milp.formulation.build_checkmate_milp`) is a proved lower bound,
   as tight as the full LP on the reference graphs and about ten times faster.
   It often certifies the first heuristic at once; otherwise the other fast
   baselines (App. B greedy generalisations, coarse grid) and two-phase rounding
   of ``S*`` at several thresholds and small budget allowances (§5.3) add
   incumbents. Last, RINS local search from every schedule found so far
   (:mod:`~remat.milp.local_search`, a tenth of the time left at most)
   often reaches the optimum, which shortens the proof below several-fold.
   When the LP frees some value more than once in a stage, the valid rows that
   a value is freed at most once and only if present (``free_once`` of
   :func:`~remat.milp.formulation.build_checkmate_milp`) are added and the LP
   solved again; every later model keeps them if they raised the bound (SegNet
   at 0.5: frontier LP bound 1.006 -> 1.052 x, proof 29 s instead of 436 s).
4. **Branch and bound** warm-started from the best schedule so far, with the
   requested relative gap and what is left of the time limit: by default on the
   frontier relaxation, tightened lazily where its answer breaks the budget
   (:mod:`~remat.milp.frontier`, exact); ``exact_model="full"`` runs
   branch and cut on (9) itself instead. With two or more threads on HiGHS two
   engines race (``race_with``): the first to decide stops the other.

The answer is ``optimal`` when the gap to the best proved bound is within
``mip_gap``, ``feasible`` otherwise, ``infeasible`` only with a proof (memory
bound, LP or MILP infeasibility), ``time_limit`` when no schedule was found,
``interrupted`` when a ``stop`` event (:mod:`~remat.milp.stoppable`) ended it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from remat.baselines import BASELINES
from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.budget import check_budget
from remat.graph import DFGraph, GraphError
from remat.milp.closure_bound import recomputation_lower_bound
from remat.milp.closure_eviction import solve_closure_eviction
from remat.milp.formulation import build_checkmate_milp, free_once_violation, frontier_model_columns
from remat.milp.frontier import solve_frontier_lazily
from remat.milp.incumbent import Incumbent
from remat.milp.local_search import search_near_schedules
from remat.milp.rounding import DEFAULT_THRESHOLDS, rounded_schedule
from remat.milp.stoppable import run_until_stopped
from remat.milp.windows import improve_by_windows
from remat.result import SolveResult, Status, result_from_schedule
from remat.schedule import Schedule
from remat.solvers import SolverOptions, solve_milp
from remat.solvers.highs import reserve_threads

DEFAULT_HEURISTICS = ("eviction_greedy", "chen_greedy", "ap_greedy", "linearized_greedy")


CLOSURE_SHARE, CLOSURE_SECONDS = 0.2, 60.0  # the stage-closure bound's share of the time left, or its limit
WINDOWS_SHARE, WINDOWS_SECONDS = 0.2, 120.0  # window search's share of the time left, or its limit without one
WHOLE_MODEL_COLUMNS = 2_000_000  # larger frontier models are not built whole (no LP, no branch and bound)
# Local search's share of the time left and its limit; with a target (a max-batch probe) a schedule under it is
# what is sought, not a proof, so it gets RINS_TARGET_SHARE.
RINS_SHARE, RINS_SECONDS, RINS_TARGET_SHARE = 0.1, 60.0, 0.5
# Freed-at-most-once rows are kept when the LP breaks them by more than this and they lift its bound by more than
# this fraction (they slow branch and bound where they do not: ResNet50's cells by 10-40 %).
FREE_ONCE_TOLERANCE, FREE_ONCE_GAIN = 1e-6, 1e-4

# Exact last-stage engines: (model, HiGHS settings). Racing two that differ only in a setting pays because
# branch-and-bound time varies by x0.5-x2 with such settings, in no fixed direction (issue 7 notes).
ENGINES = {"frontier": ("frontier", {}), "frontier_norestart": ("frontier", {"mip_allow_restart": False}),
           "full": ("full", {})}


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
    local_search: bool = True,
    exact_model: str = "frontier",
    race_with: str | None = "frontier_norestart",
    warm_start: Schedule | None = None,
    on_incumbent: Callable[[float, float, float], None] | None = None,
    target: float | None = None,
    verbose: bool = False,
    free_once: bool | None = None,
    stop: threading.Event | None = None,
    **_: object,
) -> SolveResult:
    """Optimal rematerialization (problem 9) by the staged pipeline of the module docstring.

    With ``threads >= 2`` on HiGHS, stage 4 races ``exact_model`` against
    ``race_with`` (names in :data:`ENGINES`; None for no race) on two threads
    from the same incumbent, each with half the threads; the first to decide
    stops the other, and the bounds and schedules of both count. ``target``
    (a cost) ends the solve early once a schedule costs at most it or the
    bound proves none does (the maximum-batch search's question, eq. 10).
    ``free_once`` adds to every model the valid inequality that a value is freed
    at most once per stage (:func:`~remat.milp.formulation.build_checkmate_milp`)
    or leaves it out; None (the default) lets stage 3's LP decide.

    ``stop`` (a ``threading.Event``, e.g. set by a SIGINT handler) ends the
    solve: the pipeline then runs in a worker thread, and within about a second
    of the event the call returns the best schedule found with its proved bound
    and status ``interrupted`` (a solver call that does not check the event,
    such as HiGHS's presolve of a large model, finishes in the background).
    """
    start = time.perf_counter()
    if time_limit is not None and not time_limit > 0:
        raise ValueError(f"time limit must be positive seconds, got {time_limit!r}; omit it for no limit")
    for key, name in (("exact_model", exact_model), ("race_with", race_with)):
        if name not in ENGINES and not (key == "race_with" and name is None):
            raise ValueError(f"{key} must be one of {', '.join(ENGINES)}, got {name!r}")
    if int(threads) < 1:
        raise ValueError(f"threads must be >= 1, got {threads!r}")
    heuristics = list(heuristics)
    unknown = [name for name in heuristics if name not in BASELINES]
    if unknown:
        raise ValueError(f"unknown heuristic {unknown[0]!r} for the ilp pipeline: pick baselines among "
                         f"{', '.join(BASELINES)}")
    racing = race_with is not None and threads >= 2 and backend == "highs"
    options = {"time_limit": time_limit, "mip_gap": mip_gap, "threads": threads, "backend": backend,
               "heuristics": list(heuristics), "use_lp": use_lp, "local_search": local_search,
               "exact_model": exact_model,
               "race_with": race_with if racing else None, "free_once": free_once}
    reason = check_budget(graph, budget)
    if reason is not None:
        return SolveResult("ilp", Status.INFEASIBLE, budget, solve_time=time.perf_counter() - start,
                           message=reason, options=options, stats={"proof": "memory lower bound"})
    inc = Incumbent(graph, budget, mip_gap, start, on_incumbent)
    inc.target, inc.free_once = target, free_once
    engine_threads = max(threads // 2, 1) if racing else threads

    def remaining() -> float | None:
        return None if time_limit is None else max(time_limit - inc.elapsed(), 1e-3)

    def engine_options() -> SolverOptions:
        return SolverOptions(remaining(), mip_gap, engine_threads, verbose, stop=inc.stop)

    def run() -> SolveResult:
        # Stage 2: checkpoint-all, a given warm start, the first (fastest) heuristic.
        inc.offer(checkpoint_all_schedule(graph), "checkpoint_all")
        if warm_start is not None:
            inc.offer(warm_start, "warm_start")
        names = list(heuristics) if graph.has_training_structure else []
        outcomes: list[tuple[str, str, str, dict]] = []
        # Graphs whose whole model is too big to build get windows of it instead (remat.milp.windows), and no
        # baselines: each of their simulate() calls takes about a second there, and they run without a time limit.
        whole = frontier_model_columns(graph) <= WHOLE_MODEL_COLUMNS
        inc.milestones["whole_model"] = float(whole)
        if not whole:
            names = []
        if not (inc.decided() or _offer_heuristics(inc, names[:1], grid_size) or _offer_closure_eviction(inc, remaining)
                or _closure_bound(inc, remaining, threads)):
            if whole:
                _windows(inc, remaining, threads, verbose, WINDOWS_SHARE)
                if not inc.decided():
                    _improve(inc, names[1:], grid_size, thresholds, allowances if use_lp else None, local_search,
                             SolverOptions(remaining(), threads=threads, verbose=verbose), remaining)
            else:
                _windows(inc, remaining, threads, verbose, 1.0)
        if whole and not inc.decided() and (time_limit is None or inc.elapsed() < time_limit):
            racer = None
            if racing:
                reserve_threads(engine_threads)  # from this thread: see remat.solvers.highs
                failures: list[BaseException] = []

                def race() -> None:
                    try:
                        _run_engine(inc, race_with, engine_options(), backend, outcomes)
                    except BaseException as exc:  # handed to the caller's thread below
                        failures.append(exc)
                        inc.stop.set()

                racer = threading.Thread(target=race, name="remat-race", daemon=True)
                racer.start()
            try:
                _run_engine(inc, exact_model, engine_options(), backend, outcomes)
            finally:
                inc.stop.set()
                if racer is not None:
                    racer.join()
            if racer is not None and failures:
                raise failures[0]
        closure = inc.closure
        stats = {"milestones": inc.milestones, "incumbent_source": inc.source, "free_once": inc.free_once,
                 "closure_bound": None if closure is None else {
                     "extra": closure.extra, "stage": closure.stage, "stages_over": closure.stages_over,
                     "stages_solved": closure.stages_solved, "seconds": closure.seconds},
                 "engines": {name: {"status": status, **more} for name, status, _, more in outcomes}}
        if inc.proof and inc.schedule is None:  # a schedule valid under simulate() outranks a numerical proof
            return SolveResult("ilp", Status.INFEASIBLE, budget, solve_time=inc.elapsed(), lower_bound=inc.bound,
                               message=f"{inc.proof} proved that no schedule fits", options=options,
                               stats={**stats, "proof": inc.proof})
        message = "; ".join(m for _, _, m, _ in outcomes if m)
        if target is not None and inc.bound > target:
            message = f"stopped: no schedule costs at most the target {target:.6g} (lower bound {inc.bound:.6g})"
        if inc.schedule is None:
            errors = [m for _, status, m, _ in outcomes if status == "error"]
            if not whole and not inc.interrupted:  # ended before its limit, out of methods: say which were missing
                message = "the whole model is too large to build and no schedule fits to start windows from"
            ended = Status.INTERRUPTED if inc.interrupted else Status.TIME_LIMIT
            return SolveResult("ilp", Status.ERROR if errors else ended, budget, solve_time=inc.elapsed(),
                               lower_bound=inc.bound, message=message, options=options, stats=stats)
        # A stop that came while the worker could still finish ends it early: say so unless it is proved anyway.
        status = Status.OPTIMAL if inc.certified() else Status.INTERRUPTED if inc.interrupted else Status.FEASIBLE
        return result_from_schedule("ilp", graph, inc.schedule, budget, inc.elapsed(), status=status,
                                    lower_bound=inc.bound, options=options, stats=stats, message=message)

    if stop is None:
        return run()
    return run_until_stopped(run, inc, stop, options)


def _windows(inc: Incumbent, remaining: Callable[[], float | None], threads: int, verbose: bool,
             share: float) -> None:
    """Stage 3b: large neighbourhood search over stage windows from the best schedule (:mod:`remat.milp.windows`)."""
    schedule, cost, _ = inc.best()
    if schedule is None:
        return
    left = remaining()
    limit = WINDOWS_SECONDS if left is None else share * left
    improve_by_windows(inc.graph, inc.budget, schedule, cost,
                       SolverOptions(limit, threads=threads, verbose=verbose, stop=inc.stop),
                       on_schedule=lambda found, found_cost: inc.offer(found, "windows", found_cost))
    inc.milestones["windows"] = inc.elapsed()


def _closure_bound(inc: Incumbent, remaining: Callable[[], float | None], threads: int) -> bool:
    """Stage 2b: the stage-closure lower bound (:mod:`remat.milp.closure_bound`); True once the answer is decided."""
    left = remaining()
    limit = CLOSURE_SECONDS if left is None else min(CLOSURE_SECONDS, CLOSURE_SHARE * left)
    bound = recomputation_lower_bound(inc.graph, inc.budget, limit, threads=threads, stop=inc.stop)
    inc.closure = bound
    if bound.infeasible_stage is not None:
        inc.proof = f"the stage-closure bound at stage {bound.infeasible_stage}"
        inc.stop.set()
    else:
        inc.raise_bound(inc.graph.total_cost + bound.extra)
    inc.milestones["closure_bound"] = inc.elapsed()
    return inc.decided()


def _offer_closure_eviction(inc: Incumbent, remaining: Callable[[], float | None]) -> bool:
    """Stage 2c: the closure-eviction schedule (:mod:`remat.milp.closure_eviction`); True once decided."""
    left = remaining()
    limit = CLOSURE_SECONDS if left is None else min(CLOSURE_SECONDS, CLOSURE_SHARE * left)
    result = solve_closure_eviction(inc.graph, inc.budget, time_limit=limit,
                                    on_schedule=lambda schedule, cost: inc.offer(schedule, "closure_eviction", cost))
    if result.has_schedule:
        inc.offer(result.schedule, "closure_eviction", result.cost)
    return inc.decided()


def _improve(inc: Incumbent, names: list[str], grid_size: int, thresholds: Iterable[float],
             allowances: Iterable[float] | None, local_search: bool, lp_options: SolverOptions,
             remaining: Callable[[], float | None]) -> None:
    """Stage 3: the LP bound, the other heuristics, rounding at budget allowances (None: no LP), local search."""
    time_limit = lp_options.time_limit
    if allowances is not None:
        if _lp_rounding(inc, 0.0, thresholds, lp_options) == "infeasible":
            inc.proof = "the LP relaxation"
            inc.stop.set()
        if inc.decided():
            return
    if _offer_heuristics(inc, names, grid_size):
        return
    for eps in allowances or ():
        if inc.decided():
            return
        if eps > 0 and (time_limit is None or remaining() > 0.5 * time_limit):
            lp_options.time_limit = remaining()
            if _lp_rounding(inc, eps, thresholds, lp_options) != "optimal":
                break
    if local_search and not inc.decided() and inc.lp_solution is not None:
        # RINS (remat.milp.local_search): a near-optimal incumbent makes branch and bound far shorter.
        left = remaining()
        share = RINS_SHARE if inc.target is None else RINS_TARGET_SHARE
        options = SolverOptions(RINS_SECONDS if left is None else min(left, max(1.0, share * left)),
                                threads=lp_options.threads, verbose=lp_options.verbose, stop=inc.stop)
        search_near_schedules(inc.graph, inc.budget, *inc.lp_solution, inc.pool(), options,
                              lambda schedule, cost: inc.offer(schedule, "rins", cost), free_once=bool(inc.free_once))


def _run_engine(inc: Incumbent, name: str, options: SolverOptions, backend: str,
                outcomes: list[tuple[str, str, str, dict]]) -> None:
    """Stage 4: one exact engine of :data:`ENGINES` from the incumbent; appends (name, status, message, stats).

    An engine that ends decided (optimal or infeasible) sets ``inc.stop``, ending any other still running.
    """
    model, settings = ENGINES[name]
    options.extra = {**settings, **options.extra}
    graph, budget = inc.graph, inc.budget
    if model == "frontier":
        # Branch and bound on the frontier relaxation, tightened lazily (remat.milp.frontier).
        lazy = solve_frontier_lazily(graph, budget, options, backend, inc.schedule,
                                     on_schedule=lambda schedule, cost: inc.offer(schedule, name, cost),
                                     on_bound=inc.raise_bound, free_once=bool(inc.free_once))
        status, message, stats = lazy.status, lazy.message, {"lazy": lazy.stats}
        proof = "branch and bound on the frontier relaxation"
    else:
        # Branch and cut on (9) itself.
        milp = build_checkmate_milp(graph, budget, free_formulation="tight", free_once=bool(inc.free_once))
        x0 = milp.vector(inc.schedule) if inc.schedule is not None and milp.fits(inc.schedule) else None

        def improving(seconds: float, objective: float, bound: float) -> None:
            inc.raise_bound(milp.cost(bound))
            inc.cost_hint(milp.cost(objective))

        options.on_incumbent = improving
        options.on_bound = lambda seconds, bound: inc.raise_bound(milp.cost(bound))
        out = solve_milp(milp.problem, backend, options, x0)
        if out.bound is not None:
            inc.raise_bound(milp.cost(out.bound))
        if out.x is not None:
            inc.offer(milp.schedule(out.x), name)
        status, message = out.status, out.message
        stats = {"solver": out.stats, "variables": milp.problem.num_vars, "constraints": milp.problem.num_rows}
        proof = "branch and cut on (9)"
    if status == "infeasible":
        inc.proof = proof
    if status in ("optimal", "infeasible"):
        inc.stop.set()
    outcomes.append((name, status, message if status == "error" else "", stats))


def _offer_heuristics(inc: Incumbent, names: list[str], grid_size: int) -> bool:
    """Offer each named heuristic's schedule; True as soon as one is certified."""
    for name in names:
        try:
            result = BASELINES[name](inc.graph, inc.budget, grid_size=grid_size)
        except GraphError:
            continue  # e.g. chen_greedy on a non-linear graph
        if result.has_schedule:
            inc.offer(result.schedule, name, result.cost)
        if inc.decided():
            return True
    return False


def _lp_rounding(inc: Incumbent, eps: float, thresholds: Iterable[float], options: SolverOptions) -> str:
    """§5: LP of the frontier relaxation at budget ``(1 - eps) B``, its bound (eps = 0) and its roundings.

    The frontier relaxation's LP bound is as tight as the full LP's on the
    reference graphs and about ten times faster. Returns the LP's status.
    """
    graph = inc.graph
    relax = build_checkmate_milp(graph, (1 - eps) * inc.budget, free_formulation="tight", frontier_relaxation=True,
                                 free_once=bool(inc.free_once))
    lp = solve_milp(relax.problem.relaxed(), "highs", options)
    if eps == 0 and inc.free_once is None:
        inc.free_once = False
        if lp.status == "optimal" and free_once_violation(relax, lp.x) > FREE_ONCE_TOLERANCE:
            tight = build_checkmate_milp(graph, inc.budget, free_formulation="tight", frontier_relaxation=True,
                                         free_once=True)
            tight_lp = solve_milp(tight.problem.relaxed(), "highs", options)
            if tight_lp.status == "infeasible" or (tight_lp.status == "optimal" and tight.cost(tight_lp.objective)
                                                   > relax.cost(lp.objective) * (1 + FREE_ONCE_GAIN)):
                inc.free_once, relax, lp = True, tight, tight_lp
    if lp.status != "optimal":
        return lp.status
    R_star, S_star = relax.fractional(lp.x)
    if eps == 0:
        inc.raise_bound(relax.cost(lp.objective))
        inc.milestones["lp"] = inc.elapsed()
        inc.lp_solution = R_star, S_star
    for p in thresholds:
        inc.offer(rounded_schedule(graph, S_star > p), f"lp_rounding@{p},eps={eps}")
    return lp.status
