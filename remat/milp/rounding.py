"""Two-phase LP rounding (paper §5, Algorithm 2, App. D).

Phase one solves the LP relaxation of problem (9) at a reduced budget
``(1 - eps) * budget`` (§5.3); phase two rounds its checkpoint matrix ``S*`` -
deterministically at thresholds, or by seeded Bernoulli samples - and completes
each rounded S with the minimum recomputation R (:func:`solve_min_r`). Every
candidate is checked by ``simulate()`` against the *full* budget and the
cheapest one is kept. Rather than fixing ``eps = 0.1``, the allowance is searched:
``eps = 0`` first, then larger allowances until a candidate fits (App. D).
The LP optimum at the full budget is a proved lower bound on the optimal cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import numpy as np

from remat.baselines.recompute import solve_min_r
from remat.budget import check_budget
from remat.graph import DFGraph
from remat.milp.plain import solve_lp_relaxation
from remat.result import SolveResult, Status, relative_gap
from remat.schedule import Schedule, simulate

DEFAULT_THRESHOLDS = (0.5, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9)
DEFAULT_ALLOWANCES = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)

Rounder = Callable[[np.ndarray], Iterable[np.ndarray]]


def deterministic_roundings(thresholds: Iterable[float]) -> Rounder:
    """``S_int = 1[S* > p]`` for each threshold ``p`` (Algorithm 2 uses ``p = 0.5``)."""

    def rounder(S_star: np.ndarray) -> Iterable[np.ndarray]:
        for p in thresholds:
            yield S_star > p

    return rounder


def randomized_roundings(samples: int, seed: int) -> Rounder:
    """``S_int[t, i] ~ Bernoulli(S*[t, i])``, ``samples`` draws from a seeded generator (§5.1)."""

    def rounder(S_star: np.ndarray) -> Iterable[np.ndarray]:
        rng = np.random.default_rng(seed)
        for _ in range(samples):
            yield rng.random(S_star.shape) < S_star

    return rounder


def rounded_schedule(graph: DFGraph, S: np.ndarray) -> Schedule:
    """Phase two of Algorithm 2: a rounded checkpoint matrix ``S`` with its minimum recomputation ``R``."""
    return Schedule(solve_min_r(graph, S), np.tril(S, -1))


def two_phase_rounding(
    graph: DFGraph,
    budget: float,
    rounder: Rounder,
    name: str,
    allowances: Iterable[float] = DEFAULT_ALLOWANCES,
    time_limit: float | None = None,
    threads: int = 1,
    options: dict | None = None,
) -> SolveResult:
    """Algorithm 2 with an allowance search; see the module docstring."""
    start = time.perf_counter()
    options = dict(options or {})
    reason = check_budget(graph, budget)
    if reason is not None:
        return SolveResult(name, Status.INFEASIBLE, budget, message=reason, options=options)
    best: tuple[float, Schedule] | None = None
    smallest_peak = np.inf
    lower_bound = None
    tried: list[dict] = []
    for eps in allowances:
        if not 0 <= eps < 1:
            raise ValueError(f"budget allowances must lie in [0, 1), got {eps!r}")
        remaining = None if time_limit is None else time_limit - (time.perf_counter() - start)
        if remaining is not None and remaining <= 0:
            break
        milp, lp = solve_lp_relaxation(graph, (1 - eps) * budget, time_limit=remaining, threads=threads)
        if lp.status != "optimal":
            tried.append({"eps": eps, "lp": lp.status})
            break  # a smaller LP budget is no more feasible
        if eps == 0:
            lower_bound = milp.cost(lp.objective)
        _, S_star = milp.fractional(lp.x)
        fits = 0
        for S in rounder(S_star):
            schedule = rounded_schedule(graph, S)
            sim = simulate(graph, schedule, plan=False)
            smallest_peak = min(smallest_peak, sim.peak_memory)
            if sim.within(budget):
                fits += 1
                if best is None or sim.cost < best[0]:
                    best = (sim.cost, schedule)
        tried.append({"eps": eps, "lp": "optimal", "fitting_candidates": fits})
        if best is not None:
            break
    elapsed = time.perf_counter() - start
    stats = {"allowances": tried}
    if best is None:
        status = Status.TIME_LIMIT if time_limit is not None and elapsed >= time_limit else Status.INFEASIBLE
        return SolveResult(name, status, budget, solve_time=elapsed, lower_bound=lower_bound, options=options,
                           min_feasible_budget=smallest_peak if np.isfinite(smallest_peak) else None,
                           message="no rounded schedule fits the budget", stats=stats)
    schedule = best[1]
    sim = simulate(graph, schedule)
    return SolveResult(name, Status.FEASIBLE, budget, schedule, sim, elapsed, lower_bound,
                       relative_gap(sim.cost, lower_bound), options=options, stats=stats)


def solve_approx_lp_deterministic(
    graph: DFGraph, budget: float, thresholds: Iterable[float] = DEFAULT_THRESHOLDS,
    allowances: Iterable[float] = DEFAULT_ALLOWANCES, time_limit: float | None = None, threads: int = 1,
    **_: object,
) -> SolveResult:
    """Two-phase deterministic rounding (§5.2): thresholds 0.5 and a sweep, best in-budget kept."""
    thresholds = tuple(thresholds)
    return two_phase_rounding(graph, budget, deterministic_roundings(thresholds), "approx_lp_deterministic",
                              allowances, time_limit, threads, {"thresholds": thresholds})


def solve_approx_lp_randomized(
    graph: DFGraph, budget: float, samples: int = 100, seed: int = 0,
    allowances: Iterable[float] = DEFAULT_ALLOWANCES, time_limit: float | None = None, threads: int = 1,
    **_: object,
) -> SolveResult:
    """Two-phase randomized rounding (§5.1, App. D): seeded Bernoulli samples of S*, best in-budget kept."""
    return two_phase_rounding(graph, budget, randomized_roundings(samples, seed), "approx_lp_randomized",
                              allowances, time_limit, threads, {"samples": samples, "seed": seed})
