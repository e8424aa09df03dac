"""MILP backends behind one interface: ``solve_milp(problem, backend, options)``.

:mod:`remat.solvers.problem` holds the matrix-form problem and the types every
backend shares; each backend (``highs``, ``gurobi``, ``cpsat``) is one module
that imports only those, and is imported here only when asked for.
"""

from __future__ import annotations

import numpy as np

from remat.solvers.problem import MilpProblem, RowBuilder, SolverError, SolverOptions, SolverOutput

BACKENDS = ("highs", "gurobi", "cpsat")


def solve_milp(
    problem: MilpProblem,
    backend: str = "highs",
    options: SolverOptions | None = None,
    warm_start: np.ndarray | None = None,
) -> SolverOutput:
    """Solve ``problem`` with the named backend."""
    options = options or SolverOptions()
    if options.time_limit is not None and not options.time_limit > 0:
        raise ValueError(f"time limit must be positive seconds, got {options.time_limit!r}; omit it for no limit")
    if int(options.threads) < 1:
        raise ValueError(f"threads must be >= 1, got {options.threads!r}")
    if backend == "highs":
        from remat.solvers.highs import solve_highs

        return solve_highs(problem, options, warm_start)
    if backend == "gurobi":
        from remat.solvers.gurobi import solve_gurobi

        return solve_gurobi(problem, options, warm_start)
    if backend == "cpsat":
        from remat.solvers.cpsat import solve_cpsat

        return solve_cpsat(problem, options, warm_start)
    raise ValueError(f"unknown solver backend {backend!r}; choose one of {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "MilpProblem", "RowBuilder", "SolverError", "SolverOptions", "SolverOutput", "solve_milp"]
