"""Maximum batch size under a memory budget (paper §6.4, eq. 10).

The largest batch ``B`` whose B-scaled graph (activations, gradients and inputs
grow with B; parameters do not) has a valid schedule within the budget costing at
most one extra forward pass: ``cost <= 2 sum_fwd C + sum_bwd C`` (eq. 10).

``method="search"`` (any strategy): feasibility is monotone in B for the MILP, so
B is found by galloping then bisection over feasibility MILPs (objective dropped:
any schedule within the budget and the cost cap will do), reporting the largest
B proved feasible and the smallest proved infeasible. A feasible probe's schedule
proves every larger B it still fits unchanged (:func:`largest_batch_for`), so the
search moves on from there. Heuristics are searched the same way, each probe
being one run of the strategy.

For the MILP the search starts from the best fast heuristic's own maximum batch,
or from a schedule found by local search if that fits more: a checkpoint set,
then rematerialization stages chosen freely from it (each schedule is a point
of the MILP's space; together the two take up to 450 s). Above the seed, window MILPs of the
resident-set relaxation (:mod:`remat.strategies.peak_bound`, HiGHS) bisect for the least B they
prove infeasible, which replaces the memory bound as the top of the search. ``time_limit``
bounds each probe and ``total_time_limit`` the search; an open search reports status ``time_limit``.

``method="milp"`` (the MILP only) is the paper's own single model, with B an
integer variable (:mod:`remat.strategies.maxbatch_model`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from remat.graph import DFGraph, GraphError
from remat.schedule import Schedule, simulate
from remat.solvers.base import SolverOptions, solve_milp
from remat.solvers.isolated import KILL_GRACE, call_with_hard_limit, can_isolate
from remat.strategies.certified import solve_ilp_certified
from remat.strategies.checkpoint import checkpoint_all_schedule
from remat.strategies.checkpoint_search import least_peak_checkpoint_set
from remat.strategies.frontier import solve_frontier_lazily
from remat.strategies.ilp import build_checkmate_milp, check_budget, memory_lower_bound
from remat.strategies.materialization_search import least_peak_materialization
from remat.strategies.peak_bound import smallest_batch_ruled_out
from remat.strategies.rounding import DEFAULT_THRESHOLDS, rounded_schedule


@dataclass
class MaxBatchResult:
    strategy: str
    method: str
    budget: float
    max_batch: int  # largest B known feasible (0: none)
    # Smallest B proved (for heuristics, found) infeasible: a probe, a relaxation or the memory bound; None if unknown.
    smallest_infeasible: int | None
    solve_time: float
    schedule: Schedule | None = None
    probes: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    out_of_time: bool = False  # the search's total time limit ended it with the answer unproved

    @property
    def exact(self) -> bool:
        return self.smallest_infeasible is not None and self.smallest_infeasible == self.max_batch + 1

    @property
    def status(self) -> str:
        """``optimal`` (proved exact), ``infeasible`` (proved that no B >= 1 fits), ``time_limit`` (time ran out
        with the answer unproved), ``feasible`` (unproved otherwise) or ``error`` (no answer at all)."""
        if self.exact:
            return "infeasible" if self.max_batch == 0 else "optimal"
        if self.out_of_time or any(p.get("verdict") == "unknown" for p in self.probes):
            return "time_limit"
        return "feasible" if self.max_batch > 0 else "error"


def cost_cap(graph: DFGraph) -> float:
    """Eq. (10): the cost of one training step plus one extra forward pass."""
    graph.require_training_structure("the maximum-batch cost cap (eq. 10)")
    return 2 * graph.forward_cost + float(graph.cost[graph.loss :].sum())


def allowed_cost(graph: DFGraph) -> float:
    """Eq. (10)'s cap with a relative tolerance of 1e-9, so float rounding never rejects a schedule at the cap."""
    return cost_cap(graph) * (1 + 1e-9)


def batch_upper_bound(graph: DFGraph, budget: float) -> int:
    """A B above which no schedule fits: computing the hungriest node alone overflows (eqs. 1b, 3)."""
    one = graph.with_batch_size(1)
    need, _ = memory_lower_bound(one.with_constant_memory(0))
    scaled_need = need + one.input_memory
    if scaled_need <= 0:
        raise GraphError("the graph's memory does not grow with the batch size, so the batch is unbounded")
    return max(0, math.floor((budget - one.parameter_memory) / scaled_need))


def _probe_milp(graph: DFGraph, budget: float, time_limit: float | None, threads: int, backend: str,
                hard_limit: bool = False) -> tuple[str, Any]:
    """Is there a schedule within ``budget`` costing at most the cap of eq. (10)? Exact, cheapest test first.

    Checkpoint-all or a fast heuristic within the cap proves "yes" by example; the
    memory lower bound proves "no". Then the solvers (:func:`_probe_by_solvers`).
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
    for example in _heuristic_schedules(graph, budget):
        if example.cost <= cap:
            return "feasible", example.schedule
    if time_limit is None:
        return _probe_by_solvers(graph, budget, None, threads, backend)
    left = max(time_limit - (time.perf_counter() - start), 1e-3)
    if not (hard_limit and can_isolate()):
        return _probe_by_solvers(graph, budget, left, threads, backend)
    done, answer = call_with_hard_limit(_probe_by_solvers, (graph, budget, left, threads, backend),
                                        left + KILL_GRACE)
    return answer if done else ("unknown", None)


def _probe_by_solvers(graph: DFGraph, budget: float, time_limit: float | None, threads: int,
                      backend: str) -> tuple[str, Any]:
    """The solver half of :func:`_probe_milp`, cheapest first.

    An infeasible LP of the frontier relaxation with the cost cap proves "no";
    rounding that LP may give an example. Then the certified ``ilp`` pipeline
    minimises the cost (its RINS local search finds examples the heuristics
    miss) until a schedule is within the cap or its bound is above it, for half
    the time left; last, the feasibility MILP, on the frontier relaxation with
    the cap and lazily added rows (:mod:`remat.strategies.frontier`), which
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


def largest_batch_for(graph: DFGraph, schedule: Schedule, budget: float, low: int, high: int) -> int:
    """The largest ``B`` in ``[low, high]`` at which ``schedule`` keeps within ``budget`` and eq. (10)'s cap.

    ``schedule`` must qualify at ``low``. Memory only grows with ``B``, and cost
    minus cap is linear in ``B`` (every cost either scales with the batch or does
    not), so the qualifying ``B`` from ``low`` on form one interval: bisection
    over ``simulate()`` finds its end with no solver.
    """

    while low < high:
        mid = (low + high + 1) // 2
        if qualifies(graph, schedule, budget, mid):
            low = mid
        else:
            high = mid - 1
    return low


def qualifies(graph: DFGraph, schedule: Schedule, budget: float, B: int) -> bool:
    """Does ``schedule`` keep within ``budget`` and eq. (10)'s cap at batch size ``B``?"""
    g = graph.with_batch_size(B)
    sim = simulate(g, schedule, plan=False)
    return sim.within(budget) and sim.cost <= allowed_cost(g)


FAST_HEURISTICS = ("eviction_greedy", "linearized_greedy", "ap_greedy", "chen_greedy")
CLIMB_SECONDS = 150.0  # the seed's checkpoint local search reaches its best in ~100 s on ResNet50
MATERIALIZE_SECONDS = 300.0  # then the rematerialization-stage search (ResNet50: 553 -> 766 in 300 s)


def _heuristic_schedules(graph: DFGraph, budget: float):
    """In-budget schedules of the fast heuristics (every one is a point of the MILP's space)."""
    from remat.strategies import get_strategy

    for name in FAST_HEURISTICS:
        try:
            result = get_strategy(name)(graph, budget, grid_size=40)
        except (GraphError, ValueError):
            continue  # chain-only heuristics on other graphs
        if result.has_schedule:
            yield result


def _best_heuristic_batch(graph: DFGraph, budget: float, hi_bound: int,
                          deadline: float | None = None) -> tuple[str, int, Schedule] | None:
    """The largest batch a fast heuristic's own search reaches within the cap, with its schedule.

    Each such schedule is a point of the MILP's space, so the MILP's answer is at
    least this (§6.4 compares the strategies the same way). Seeding the search
    with it keeps the reported lower end at or above every baseline's even where
    the solver probes run out of time (ResNet50). Then, unless a heuristic has
    reached the memory bound ``hi_bound``, a checkpoint set of least peak within
    the cap is sought by local search at the best heuristic's batch
    (:mod:`remat.strategies.checkpoint_search`) for at most ``CLIMB_SECONDS``,
    and from its result a schedule with freely chosen rematerialization stages
    (:mod:`remat.strategies.materialization_search`) for at most
    ``MATERIALIZE_SECONDS``, all ending by ``deadline`` (a ``time.perf_counter()``
    value) if one is given.
    """
    best: tuple[str, int, Schedule] | None = None
    for name in FAST_HEURISTICS:
        try:
            found = max_batch_size(graph, budget, strategy=name)
        except (GraphError, ValueError):
            continue  # chain-only heuristics on other graphs
        B = found.max_batch
        if B > (best[1] if best else 0) and found.schedule is not None and qualifies(graph, found.schedule, budget, B):
            best = (name, B, found.schedule)
    climb_time = _tighter(CLIMB_SECONDS, None if deadline is None else deadline - time.perf_counter())
    if (best and best[1] >= hi_bound) or climb_time <= 0:
        return best
    B = best[1] if best else 1
    scaled = graph.with_batch_size(B)
    climbed = least_peak_checkpoint_set(scaled, allowed_cost(scaled), climb_time)
    if climbed is not None:
        best = _fitting_more(graph, budget, B, hi_bound, best, "checkpoint_local_search", climbed[0])
    left = _tighter(MATERIALIZE_SECONDS, None if deadline is None else deadline - time.perf_counter())
    if climbed is None or best is None or best[1] >= hi_bound or left <= 0:
        return best
    B = best[1]
    scaled = graph.with_batch_size(B)
    found = least_peak_materialization(scaled, allowed_cost(scaled), climbed[0], left,
                                       good_enough=lambda s: qualifies(graph, s, budget, hi_bound))
    if found is not None:
        best = _fitting_more(graph, budget, B, hi_bound, best, "materialization_local_search", found[0])
    return best


def _fitting_more(graph: DFGraph, budget: float, B: int, hi_bound: int, best: tuple[str, int, Schedule] | None,
                  name: str, schedule: Schedule) -> tuple[str, int, Schedule] | None:
    """``(name, reach, schedule)`` if ``schedule`` fits at ``B`` and its reach beats ``best``'s; else ``best``."""
    if not qualifies(graph, schedule, budget, B):
        return best
    reach = largest_batch_for(graph, schedule, budget, B, hi_bound)
    return (name, reach, schedule) if reach > (best[1] if best else 0) else best


def _tighter(limit: float | None, other: float | None) -> float | None:
    """The smaller of two optional time limits (None: no limit)."""
    return limit if other is None else min(other, limit if limit is not None else math.inf)


def checkpoint_all_peak_activations(graph: DFGraph) -> float:
    return simulate(graph, checkpoint_all_schedule(graph), plan=False).peak_memory - graph.constant_memory


def _probe_strategy(graph: DFGraph, budget: float, strategy: str, options: dict) -> tuple[str, Any]:
    from remat.strategies import get_strategy

    result = get_strategy(strategy)(graph, budget, **options)
    if result.has_schedule and result.cost <= allowed_cost(graph):
        return "feasible", result.schedule
    if result.status in ("time_limit", "error"):
        return "unknown", None
    return "infeasible", None


def max_batch_size(
    graph: DFGraph,
    budget: float,
    strategy: str = "ilp",
    method: str = "search",
    time_limit: float | None = None,
    threads: int = 1,
    backend: str = "highs",
    on_probe: Callable[[dict[str, Any]], None] | None = None,
    hard_limits: bool = True,
    total_time_limit: float | None = None,
    **options: Any,
) -> MaxBatchResult:
    """The maximum batch size for ``strategy`` at ``budget`` bytes; see the module docstring.

    ``time_limit`` bounds each probe (search) or the single model (milp); with
    ``hard_limits`` (the default) an ``ilp`` probe's solvers run in a child
    process that is killed at its limit, since HiGHS can overrun its own limit
    on large models. ``on_probe`` hears each probe's ``{"batch", "verdict",
    "seconds"}`` as it ends, with ``"fits_up_to"``: the largest B its schedule
    (found at ``batch``, valid unchanged at every B up to there) proves feasible.
    ``total_time_limit`` bounds the whole search: each probe gets at most what is
    left, and the search stops when none is, answering with the bracket it reached.
    """
    if total_time_limit is not None and not total_time_limit > 0:
        raise ValueError(f"total time limit must be positive seconds, got {total_time_limit!r}; omit it for no limit")
    if graph.batch_size is None:
        raise GraphError(f"graph {graph.name!r} does not record its batch size; it cannot be rescaled")
    cost_cap(graph)
    start = time.perf_counter()
    if method == "milp":
        if strategy != "ilp":
            raise ValueError("method='milp' is the MILP's own model; use method='search' for other strategies")
        from remat.strategies.maxbatch_model import max_batch_single_milp

        return max_batch_single_milp(graph, budget, _tighter(time_limit, total_time_limit), threads, backend, start)
    if method != "search":
        raise ValueError(f"unknown method {method!r}; choose 'search' or 'milp'")
    hi_bound = batch_upper_bound(graph, budget)
    probes: list[dict[str, Any]] = []
    best: tuple[int, Schedule | None] = (0, None)
    infeasible = hi_bound + 1
    unknown: list[int] = []

    def time_left() -> float | None:
        return None if total_time_limit is None else total_time_limit - (time.perf_counter() - start)

    def out_of_time() -> bool:
        left = time_left()
        return left is not None and left <= 0

    def probe(B: int) -> str:
        t0 = time.perf_counter()
        g = graph.with_batch_size(B)
        if strategy == "ilp":
            verdict, schedule = _probe_milp(g, budget, _tighter(time_limit, time_left()), threads, backend,
                                            hard_limits)
        else:
            verdict, schedule = _probe_strategy(g, budget, strategy, options)
        return note(B, verdict, schedule, t0)

    def note(B: int, verdict: str, schedule: Schedule | None, t0: float, **extra: Any) -> str:
        """Record a probe's answer (and tell ``on_probe``), moving the bracket."""
        nonlocal best, infeasible
        record = {"batch": B, "verdict": verdict, "seconds": time.perf_counter() - t0, **extra}
        if verdict == "feasible":
            # For the MILP a schedule is a proof for every B it fits (other strategies must be rerun at each B).
            reach = largest_batch_for(graph, schedule, budget, B, hi_bound) if strategy == "ilp" else B
            record["fits_up_to"] = reach
            if reach > best[0]:
                best = (reach, schedule)
        elif verdict == "infeasible":
            infeasible = min(infeasible, B)
        elif verdict == "unknown":
            unknown.append(B)
        probes.append(record)
        if on_probe is not None:
            on_probe(record)
        return verdict

    def bracket() -> tuple[int, int]:
        """Largest B proved feasible, and the smallest B above it not (yet) known to be feasible."""
        return best[0], min([infeasible, *(u for u in unknown if u > best[0])])

    if strategy == "ilp" and hi_bound >= 1:
        t0 = time.perf_counter()
        seed = _best_heuristic_batch(graph, budget, hi_bound,
                                     None if total_time_limit is None else start + total_time_limit)
        if seed is not None:
            name, B, schedule = seed
            note(B, "feasible", schedule, t0, heuristic=name)
        if best[0] < hi_bound and not out_of_time():
            t0 = time.perf_counter()
            ruled_out = smallest_batch_ruled_out(graph, budget, best[0], hi_bound, allowed_cost,
                                                 None if total_time_limit is None else start + total_time_limit)
            if ruled_out is not None:
                note(ruled_out, "infeasible", None, t0, proof="resident_set_relaxation")
                hi_bound = ruled_out - 1
    if hi_bound >= 1:
        # Gallop and end on the top (the memory bound, or the relaxation's): when it is tight (MobileNet at
        # 16 GB) the answer is then proved at once, with no bisection over near-infeasible, slow probes.
        # The first probe always runs, so that even a spent time limit answers with something.
        B = min(2 * best[0], hi_bound) if best[0] else 1
        while best[0] < hi_bound and not (probes and out_of_time()) and probe(B) == "feasible":
            B = min(2 * best[0], hi_bound)
        lo, hi = bracket()
        while hi - lo > 1 and not out_of_time():
            probe((lo + hi) // 2)
            lo, hi = bracket()
    elapsed = time.perf_counter() - start
    # An unknown probe between the largest feasible and the smallest infeasible B leaves the answer unproved.
    lo, hi = bracket()
    stopped = hi - lo > 1 and out_of_time()
    if stopped:
        # Only a proof bounds the answer from above: an unknown probe does not.
        message = (f"stopped at the total time limit of {total_time_limit:g} s: the maximum batch is in "
                   f"[{lo}, {infeasible - 1}]; give more time to narrow it")
    elif not best[0]:
        message = f"no batch size B >= 1 fits {budget:.6g} bytes within one extra forward pass"
    else:
        message = ""
    return MaxBatchResult(strategy, "search", budget, best[0], infeasible, elapsed, best[1], probes, message, stopped)
