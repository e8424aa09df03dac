"""The paper's single maximum-batch model (§6.4): B is an integer variable of one MILP.

Every batch-scaled memory term ``M_i x`` of problem (9) becomes ``M_i z`` with
``z = B x``, linearised exactly for binary ``x`` by ``z <= Bmax x``, ``z <= B``,
``z >= B - Bmax (1 - x)``, ``z >= 0``; the objective maximises B under eq. (10)'s
cost cap. The search in :mod:`remat.maxbatch.search` reaches the same answer
by feasibility probes and is the default; this model is the paper's own, kept
for comparison (the tests check that both agree).
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp

from remat.graph import DFGraph
from remat.maxbatch.limits import allowed_cost, batch_upper_bound
from remat.maxbatch.result import MaxBatchResult
from remat.milp.formulation import build_checkmate_milp
from remat.solvers import MilpProblem, SolverOptions, solve_milp


def max_batch_single_milp(graph: DFGraph, budget: float, time_limit: float | None, threads: int, backend: str,
                          start: float) -> MaxBatchResult:
    """``max_batch_size(..., method="milp")``: one MILP with the batch size B as an integer variable (§6.4)."""
    one = graph.with_batch_size(1)
    b_max = batch_upper_bound(graph, budget)
    if b_max < 1:
        return MaxBatchResult("ilp", "milp", budget, 0, 1, time.perf_counter() - start,
                              message=f"no batch size B >= 1 fits {budget:.6g} bytes")
    milp = build_checkmate_milp(one, budget, cost_bound=allowed_cost(one))
    problem = _batch_variable_model(milp, one, budget, b_max)
    out = solve_milp(problem, backend, SolverOptions(time_limit=time_limit, threads=threads))
    elapsed = time.perf_counter() - start
    if out.status in ("optimal", "feasible"):
        B = int(round(out.x[-1]))
        upper = math.floor(-out.bound + 1e-6) if out.bound is not None else None
        proved = B + 1 if out.status == "optimal" else (upper + 1 if upper is not None else None)
        schedule = milp.schedule(out.x[: milp.problem.num_vars])
        return MaxBatchResult("ilp", "milp", budget, B, proved, elapsed, schedule,
                              [{"status": out.status, "seconds": out.time}], out_of_time=out.status == "feasible")
    return MaxBatchResult("ilp", "milp", budget, 0, 1 if out.status == "infeasible" else None, elapsed,
                          message=f"solver status {out.status}", out_of_time=out.status == "time_limit")


def _batch_variable_model(milp, one: DFGraph, budget: float, b_max: int) -> MilpProblem:
    """Rewrite the batch-1 memory rows so every batch-scaled term is multiplied by an integer B."""
    p = milp.problem
    N = p.num_vars
    A = p.A.tocsr()
    mem = np.zeros(A.shape[0], bool)
    mem[milp.memory_rows[milp.memory_rows >= 0]] = True
    scaled_node = one.batch_scaled
    column_node = np.full(N, -1)
    for idx in (milp.R, milp.S):
        mask = idx >= 0
        column_node[idx[mask]] = np.nonzero(mask)[1]
    mask = milp.F >= 0
    column_node[milp.F[mask]] = one.edges[np.nonzero(mask)[1], 0]
    A_mem = A[mem].tocsc()
    touched = np.flatnonzero(np.diff(A_mem.indptr) > 0)
    cols = touched[p.integrality[touched] & (column_node[touched] >= 0) & scaled_node[column_node[touched].clip(0)]]
    Z = len(cols)
    z_of = np.full(N, -1)
    z_of[cols] = N + np.arange(Z)
    b_col = N + Z
    # Memory rows: coefficients of scaled binaries move to their z; the input term moves onto B.
    coo = A.tocoo()
    move = mem[coo.row] & (z_of[coo.col] >= 0)
    new_col = np.where(move, z_of[coo.col], coo.col)
    rows, colsA, vals = [coo.row], [new_col], [coo.data]
    row_lb, row_ub = p.row_lb.copy(), p.row_ub.copy()
    first_rows = milp.memory_rows[:, 0][milp.memory_rows[:, 0] >= 0]  # U[t, 0] rows hold the constant
    rows.append(first_rows)
    colsA.append(np.full(first_rows.size, b_col))
    vals.append(np.full(first_rows.size, -one.input_memory / milp.memory_scale))
    row_lb[first_rows] -= one.input_memory / milp.memory_scale
    row_ub[first_rows] -= one.input_memory / milp.memory_scale
    # Linearisation rows for z = B x.
    base = A.shape[0]
    k = np.arange(Z)
    link_rows = [
        (base + k, z_of[cols], 1.0, cols, -float(b_max), -np.inf, 0.0),  # z - Bmax x <= 0
        (base + Z + k, z_of[cols], 1.0, None, None, -np.inf, 0.0),  # z - B <= 0
        (base + 2 * Z + k, z_of[cols], 1.0, cols, -float(b_max), -float(b_max), np.inf),  # z - B - Bmax x >= -Bmax
    ]
    lbs, ubs = [row_lb], [row_ub]
    for r, zc, zv, xc, xv, lo, up in link_rows:
        rows += [r]
        colsA += [zc]
        vals += [np.full(Z, zv)]
        if xc is not None:
            rows.append(r)
            colsA.append(xc)
            vals.append(np.full(Z, xv))
        lbs.append(np.full(Z, lo))
        ubs.append(np.full(Z, up))
    for r in (base + Z + k, base + 2 * Z + k):
        rows.append(r)
        colsA.append(np.full(Z, b_col))
        vals.append(np.full(Z, -1.0))
    total_rows = base + 3 * Z
    A_new = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(colsA))),
                          shape=(total_rows, N + Z + 1))
    c = np.zeros(N + Z + 1)
    c[b_col] = -1.0
    lb = np.concatenate([p.lb, np.zeros(Z), [1.0]])
    ub = np.concatenate([p.ub, np.full(Z, float(b_max)), [float(b_max)]])
    ub[milp.U[milp.U >= 0]] = budget / milp.memory_scale
    # z = B x is a whole number at every feasible point; saying so lets CP-SAT prove optimality.
    integrality = np.concatenate([p.integrality, np.ones(Z, bool), [True]])
    return MilpProblem(c, A_new, np.concatenate(lbs), np.concatenate(ubs), lb, ub, integrality)
