"""Gurobi backend (gurobipy), built with the matrix API.

The pip wheel ships a size-limited licence: models over 2,000 variables or
2,000 constraints fail with GurobiError 10010. That outcome is returned as
status ``error`` with a one-line message naming the limit and the fix, so a
sweep records it like any other result; a missing ``gurobipy`` raises
:class:`SolverError` because the backend cannot run at all.
"""

from __future__ import annotations

import math
import time

import numpy as np

from remat.solvers.problem import MilpProblem, SolverError, SolverOptions, SolverOutput

# Error code of "Model too large for size-limited license".
SIZE_LIMITED_LICENCE = 10010
LICENCE_LIMIT = 2000


def licence_message(problem: MilpProblem, rows: int) -> str:
    return (f"Gurobi's size-limited pip licence stops at {LICENCE_LIMIT:,} variables or {LICENCE_LIMIT:,} "
            f"constraints and this model has {problem.num_vars:,} variables and {rows:,} constraints; "
            f"use solver=highs (or cpsat), or install a full Gurobi licence")


def _import_gurobipy():  # -> the gurobipy module
    try:
        import gurobipy
    except ImportError as exc:
        raise SolverError(f"the gurobi backend needs gurobipy, which is not installed: pip install gurobipy "
                          f"(or use solver=highs) [{exc}]") from None
    return gurobipy


def solve_gurobi(problem: MilpProblem, options: SolverOptions, warm_start: np.ndarray | None = None) -> SolverOutput:
    """Solve with Gurobi's branch-and-cut (its LP solver when no column is integral)."""
    gp = _import_gurobipy()
    env = gp.Env(empty=True)  # an empty env keeps the licence banner off stdout
    env.setParam("OutputFlag", 1 if options.verbose else 0)
    try:
        env.start()
    except gp.GurobiError as exc:  # no or expired licence
        raise SolverError(f"Gurobi cannot start: {exc.message} (error {exc.errno}); fix the Gurobi licence "
                          f"or use solver=highs") from None
    model = gp.Model(env=env)
    try:
        return _solve(gp, model, problem, options, warm_start)
    finally:
        model.dispose()
        env.dispose()


def _solve(gp, model, problem: MilpProblem, options: SolverOptions, warm_start: np.ndarray | None) -> SolverOutput:
    GRB = gp.GRB
    params = model.Params
    params.Threads = int(options.threads)
    params.MIPGap = float(options.mip_gap)
    # Same tolerances as the HiGHS backend: memory is in units of the largest tensor.
    params.FeasibilityTol = 1e-7
    params.IntFeasTol = 1e-7
    if options.time_limit is not None:
        params.TimeLimit = float(options.time_limit)
    for key, value in getattr(options, "extra", {}).items():
        try:
            model.setParam(key, value)
        except gp.GurobiError as exc:
            raise ValueError(f"Gurobi rejected parameter {key}={value!r}: {exc.message}; see Gurobi's "
                             f"parameter reference") from None

    is_mip = bool(problem.integrality.any())
    vtype = np.where(problem.integrality, GRB.INTEGER, GRB.CONTINUOUS) if is_mip else GRB.CONTINUOUS
    lb = np.where(np.isfinite(problem.lb), problem.lb, -GRB.INFINITY)
    ub = np.where(np.isfinite(problem.ub), problem.ub, GRB.INFINITY)
    x = model.addMVar(problem.num_vars, lb=lb, ub=ub, obj=problem.c.astype(float), vtype=vtype)
    model.ObjCon = float(problem.offset)
    rows = _add_rows(model, x, problem, GRB)
    if warm_start is not None:
        x.Start = np.asarray(warm_start, float)

    callback = None
    if (options.on_incumbent is not None or options.on_solution is not None or options.stop is not None) and is_mip:
        def callback(cb_model, where: int) -> None:
            if options.stop is not None and options.stop.is_set():
                cb_model.terminate()
            if where == GRB.Callback.MIPSOL and options.on_solution is not None:
                if options.on_solution(cb_model.cbGet(GRB.Callback.RUNTIME), np.array(cb_model.cbGetSolution(x))):
                    cb_model.terminate()
            if where == GRB.Callback.MIPSOL and options.on_incumbent is not None:
                bound = cb_model.cbGet(GRB.Callback.MIPSOL_OBJBND)
                options.on_incumbent(cb_model.cbGet(GRB.Callback.RUNTIME), cb_model.cbGet(GRB.Callback.MIPSOL_OBJ),
                                     bound if abs(bound) < GRB.INFINITY else math.copysign(math.inf, bound))

    start = time.perf_counter()
    try:
        model.optimize(callback)
        status = model.Status
        resolved = status == GRB.INF_OR_UNBD
        if resolved:
            # Presolve's dual reductions could not tell the two apart; a second run without them can.
            params.DualReductions = 0
            model.reset()
            model.optimize(callback)
            status = model.Status
    except gp.GurobiError as exc:
        elapsed = time.perf_counter() - start
        if exc.errno == SIZE_LIMITED_LICENCE:
            return SolverOutput("error", time=elapsed, message=licence_message(problem, rows),
                                stats={"gurobi_error": exc.errno})
        return SolverOutput("error", time=elapsed, message=f"Gurobi error {exc.errno}: {exc.message}",
                            stats={"gurobi_error": exc.errno})
    elapsed = time.perf_counter() - start
    out = _output(model, x, status, is_mip, elapsed, GRB)
    out.stats["resolved_without_dual_reductions"] = resolved
    return out


def _add_rows(model, x, problem: MilpProblem, GRB) -> int:
    """Add row_lb <= A x <= row_ub as one-sided blocks; returns the number of Gurobi constraints."""
    A = problem.A.tocsr()
    lo, hi = np.asarray(problem.row_lb, float), np.asarray(problem.row_ub, float)
    has_lo, has_hi = np.isfinite(lo), np.isfinite(hi)
    equal = has_lo & has_hi & (lo == hi)
    count = 0
    # A ranged row becomes two constraints; Checkmate's model has none, so this costs nothing there.
    for mask, sense, rhs in ((equal, GRB.EQUAL, lo), (has_hi & ~equal, GRB.LESS_EQUAL, hi),
                             (has_lo & ~equal, GRB.GREATER_EQUAL, lo)):
        idx = np.flatnonzero(mask)
        if idx.size:
            model.addMConstr(A[idx], x, sense, rhs[idx])
            count += idx.size
    return count


def _output(model, x, status: int, is_mip: bool, elapsed: float, GRB) -> SolverOutput:
    has_solution = model.SolCount > 0
    values = np.asarray(x.X, float) if has_solution else None
    objective = float(model.ObjVal) if has_solution else None
    bound = None
    if is_mip and status != GRB.INFEASIBLE:
        bound = float(model.ObjBound)
        bound = bound if np.isfinite(bound) and abs(bound) < GRB.INFINITY else None
    elif not is_mip and status == GRB.OPTIMAL:
        bound = objective
    names = {getattr(GRB, s): s for s in ("OPTIMAL", "INFEASIBLE", "INF_OR_UNBD", "UNBOUNDED", "TIME_LIMIT",
                                          "INTERRUPTED", "NODE_LIMIT", "SOLUTION_LIMIT", "ITERATION_LIMIT",
                                          "WORK_LIMIT", "MEM_LIMIT", "SUBOPTIMAL", "NUMERIC", "USER_OBJ_LIMIT")}
    name = names.get(status, str(status))
    stats = {"nodes": int(model.NodeCount) if is_mip else 0, "gurobi_status": name,
             "solutions": int(model.SolCount), "threads": int(model.Params.Threads)}
    if status == GRB.OPTIMAL:
        return SolverOutput("optimal", values, objective, bound, elapsed, "", stats)
    if status == GRB.INFEASIBLE:
        return SolverOutput("infeasible", None, None, None, elapsed, "proved infeasible", stats)
    if status in (GRB.TIME_LIMIT, GRB.INTERRUPTED, GRB.NODE_LIMIT, GRB.SOLUTION_LIMIT, GRB.ITERATION_LIMIT,
                  GRB.WORK_LIMIT, GRB.MEM_LIMIT, GRB.USER_OBJ_LIMIT, GRB.SUBOPTIMAL):
        if has_solution:
            return SolverOutput("feasible", values, objective, bound, elapsed, name.lower(), stats)
        return SolverOutput("time_limit", None, None, bound, elapsed, name.lower(), stats)
    return SolverOutput("error", values, objective, bound, elapsed, f"Gurobi ended with {name}", stats)
