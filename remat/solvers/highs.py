"""HiGHS backend (highspy): the default, embedded, licence-free MILP solver."""

from __future__ import annotations

import math
import threading
import time
from contextlib import contextmanager

import numpy as np

from remat.solvers.problem import MilpProblem, SolverOptions, SolverOutput

BOUND_REPORT_SECONDS = 2.0  # how often on_bound hears the dual bound during a search

# HiGHS runs every instance in a process on one global thread pool, sized by the first run; a later run that
# asks for another size fails at once ("Not Set"). Resizing (Highs.resetGlobalScheduler) also resets the
# calling thread's view of the pool, but not other threads' views: a thread that ran HiGHS before a resize made
# elsewhere fails the same way until it resizes itself. So the pool is resized only between runs, and a thread
# whose view is stale resizes again before its next run.
_pool = {"threads": 0, "active": 0, "generation": 0}
_pool_lock = threading.Lock()
_seen = threading.local()  # the pool generation this thread last ran under


def _resize(threads: int) -> None:
    """Size the pool for ``threads`` if no run holds it (call under the lock)."""
    import highspy

    stale = getattr(_seen, "generation", _pool["generation"]) != _pool["generation"]
    if _pool["active"] == 0 and (_pool["threads"] != threads or stale):
        if _pool["threads"]:
            highspy.Highs.resetGlobalScheduler(True)
            _pool["generation"] += 1
        _pool["threads"] = threads
    _seen.generation = _pool["generation"]


def reserve_threads(threads: int) -> None:
    """Size HiGHS's pool for ``threads`` from this thread, before other threads run HiGHS beside it."""
    with _pool_lock:
        _resize(threads)


@contextmanager
def _thread_pool(threads: int):
    """Yield the thread count a run may use: ``threads``, or the pool's size while another run holds it."""
    with _pool_lock:
        _resize(threads)
        _pool["active"] += 1
        size = _pool["threads"]
    try:
        yield size
    finally:
        with _pool_lock:
            _pool["active"] -= 1


def solve_highs(problem: MilpProblem, options: SolverOptions, warm_start: np.ndarray | None = None) -> SolverOutput:
    """Solve with HiGHS's branch-and-cut (or its LP solver when no column is integral)."""
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", bool(options.verbose))
    h.setOptionValue("mip_rel_gap", float(options.mip_gap))
    h.setOptionValue("mip_feasibility_tolerance", 1e-7)
    h.setOptionValue("primal_feasibility_tolerance", 1e-7)
    if options.time_limit is not None:
        h.setOptionValue("time_limit", float(options.time_limit))
    for key, value in options.extra.items():
        h.setOptionValue(key, value)

    A = problem.A.tocsc()
    lp = highspy.HighsLp()
    lp.num_col_ = problem.num_vars
    lp.num_row_ = problem.num_rows
    lp.col_cost_ = problem.c.astype(float)
    lp.col_lower_ = problem.lb.astype(float)
    lp.col_upper_ = problem.ub.astype(float)
    lp.row_lower_ = np.where(np.isfinite(problem.row_lb), problem.row_lb, -highspy.kHighsInf)
    lp.row_upper_ = np.where(np.isfinite(problem.row_ub), problem.row_ub, highspy.kHighsInf)
    lp.offset_ = float(problem.offset)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = A.indptr.astype(np.int32)
    lp.a_matrix_.index_ = A.indices.astype(np.int32)
    lp.a_matrix_.value_ = A.data.astype(float)
    is_mip = bool(problem.integrality.any())
    if is_mip:
        lp.integrality_ = [highspy.HighsVarType.kInteger if b else highspy.HighsVarType.kContinuous
                           for b in problem.integrality]
    h.passModel(lp)
    if warm_start is not None and is_mip:
        sol = highspy.HighsSolution()
        sol.col_value = np.asarray(warm_start, float).tolist()
        sol.value_valid = True
        h.setSolution(sol)
    hooks = (options.on_incumbent, options.on_solution, options.on_bound, options.stop)
    if (is_mip and any(hook is not None for hook in hooks)) or options.stop is not None:
        start = time.perf_counter()
        kind = highspy.cb.HighsCallbackType
        stop = [False]
        last_report = [0.0]
        lp_interrupts = (kind.kCallbackSimplexInterrupt, kind.kCallbackIpmInterrupt)

        def callback(event: int, _msg: str, data_out, data_in, _user) -> None:
            if event in lp_interrupts:  # a long LP (a MIP's root, or an LP alone) also ends on a stop request
                data_in.user_interrupt = options.stop is not None and options.stop.is_set()
                return
            if event == kind.kCallbackMipInterrupt:
                data_in.user_interrupt = stop[0] or (options.stop is not None and options.stop.is_set())
                seconds = time.perf_counter() - start
                if options.on_bound is not None and seconds - last_report[0] >= BOUND_REPORT_SECONDS:
                    last_report[0] = seconds
                    options.on_bound(seconds, data_out.mip_dual_bound)
                return
            seconds = time.perf_counter() - start
            if options.on_solution is not None:
                stop[0] = bool(options.on_solution(seconds, np.array(data_out.mip_solution))) or stop[0]
            if options.on_incumbent is not None:
                options.on_incumbent(seconds, data_out.objective_function_value, data_out.mip_dual_bound)

        h.setCallback(callback, None)
        if is_mip:
            h.startCallback(kind.kCallbackMipImprovingSolution)
            if options.on_solution is not None or options.on_bound is not None or options.stop is not None:
                h.startCallback(kind.kCallbackMipInterrupt)
        if options.stop is not None:
            for event in lp_interrupts:
                h.startCallback(event)

    start = time.perf_counter()
    with _thread_pool(max(int(options.threads), 1)) as threads:
        h.setOptionValue("threads", threads)
        h.run()
    elapsed = time.perf_counter() - start
    status = h.getModelStatus()
    info = h.getInfo()
    has_solution = info.primal_solution_status == highspy.kSolutionStatusFeasible
    S = highspy.HighsModelStatus
    x = np.array(h.getSolution().col_value) if has_solution else None
    objective = float(info.objective_function_value) if has_solution else None
    if is_mip:
        bound = float(info.mip_dual_bound)
        bound = bound if math.isfinite(bound) else None
    else:
        bound = objective if status == S.kOptimal else None
    stats = {"nodes": int(info.mip_node_count) if is_mip else 0, "highs_status": h.modelStatusToString(status)}
    if status == S.kOptimal:
        return SolverOutput("optimal", x, objective, bound if is_mip else objective, elapsed, "", stats)
    if status == S.kInfeasible:
        return SolverOutput("infeasible", None, None, None, elapsed, "proved infeasible", stats)
    if status in (S.kTimeLimit, S.kInterrupt, S.kSolutionLimit, S.kIterationLimit, S.kHighsInterrupt):
        if has_solution:
            return SolverOutput("feasible", x, objective, bound, elapsed, stats["highs_status"], stats)
        return SolverOutput("time_limit", None, None, bound, elapsed, stats["highs_status"], stats)
    return SolverOutput("error", x, objective, bound, elapsed, f"HiGHS ended with {stats['highs_status']}", stats)
