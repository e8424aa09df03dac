"""A MILP in matrix form and the one interface every backend implements.

Problems are stated as ``scipy.optimize.milp`` takes them: minimise ``c @ x``
subject to ``row_lb <= A @ x <= row_ub``, ``lb <= x <= ub`` and integrality of
the flagged columns. Backends (``highs``, ``gurobi``, ``cpsat``) turn this into
their own model, honour a time limit, relative MIP gap and thread count, accept a
warm start, and answer with a :class:`SolverOutput` whose status is one of
optimal / feasible / infeasible / time_limit / error - never an exception for
those outcomes.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp


class SolverError(RuntimeError):
    """A backend that cannot start (missing package, licence that will not start); the message says what to do."""


@dataclass(eq=False)
class MilpProblem:
    c: np.ndarray
    A: sp.csr_matrix
    row_lb: np.ndarray
    row_ub: np.ndarray
    lb: np.ndarray
    ub: np.ndarray
    integrality: np.ndarray
    offset: float = 0.0

    @property
    def num_vars(self) -> int:
        return int(self.c.size)

    @property
    def num_rows(self) -> int:
        return int(self.A.shape[0])

    def relaxed(self) -> MilpProblem:
        return MilpProblem(self.c, self.A, self.row_lb, self.row_ub, self.lb, self.ub, np.zeros_like(self.integrality))


@dataclass
class SolverOptions:
    time_limit: float | None = None
    mip_gap: float = 1e-4
    threads: int = 1
    verbose: bool = False
    # Called with (seconds, objective, bound) whenever an improving solution is found.
    on_incumbent: Callable[[float, float, float], None] | None = None
    # Called with (seconds, x) for each improving solution's vector; a true return stops the solve, which then
    # answers as at a time limit (HiGHS and Gurobi; CP-SAT reports costs only).
    on_solution: Callable[[float, np.ndarray], bool | None] | None = None
    # Called with (seconds, bound) every few seconds while a MIP search runs (HiGHS; others report bounds only
    # with solutions).
    on_bound: Callable[[float, float], None] | None = None
    # Backend-specific settings by the backend's own names (e.g. HiGHS {"solver": "ipm"}).
    extra: dict = field(default_factory=dict)
    # Set from another thread to end a MIP search as at a time limit (HiGHS and Gurobi), e.g. when a
    # concurrent solve has already proved the answer.
    stop: threading.Event | None = None


@dataclass(eq=False)
class SolverOutput:
    status: str  # optimal | feasible | infeasible | time_limit | error
    x: np.ndarray | None = None
    objective: float | None = None
    bound: float | None = None
    time: float = 0.0
    message: str = ""
    stats: dict = field(default_factory=dict)

    @property
    def gap(self) -> float | None:
        if self.objective is None or self.bound is None or not math.isfinite(self.bound):
            return None
        if self.objective == 0:
            return 0.0
        return max(0.0, (self.objective - self.bound) / abs(self.objective))


class RowBuilder:
    """Collects constraint rows as vectorised (row, column, value) triplets.

    ``add(terms, lb, ub)`` appends ``len(lb)`` rows; each term is a pair of a
    column-index array (``-1`` = structurally absent variable, skipped) and a
    coefficient (scalar or array), all of the same length as ``lb``.
    """

    def __init__(self, num_vars: int) -> None:
        self.num_vars = num_vars
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.vals: list[np.ndarray] = []
        self.lbs: list[np.ndarray] = []
        self.ubs: list[np.ndarray] = []
        self.count = 0

    def add(
        self,
        terms: list[tuple[np.ndarray, float | np.ndarray]],
        lb: np.ndarray | float,
        ub: np.ndarray | float,
        size: int | None = None,
    ) -> np.ndarray:
        size = size if size is not None else len(terms[0][0])
        ids = np.arange(self.count, self.count + size)
        for cols, coef in terms:
            cols = np.asarray(cols)
            coef = np.broadcast_to(np.asarray(coef, float), cols.shape)
            keep = cols >= 0
            self.rows.append(ids[keep])
            self.cols.append(cols[keep])
            self.vals.append(coef[keep])
        self.lbs.append(np.broadcast_to(np.asarray(lb, float), (size,)))
        self.ubs.append(np.broadcast_to(np.asarray(ub, float), (size,)))
        self.count += size
        return ids

    def add_pairs(self, rows: np.ndarray, cols: np.ndarray, coef: float | np.ndarray) -> None:
        """Extra terms for rows already added (e.g. variable-length sums)."""
        cols = np.asarray(cols)
        coef = np.broadcast_to(np.asarray(coef, float), cols.shape)
        keep = cols >= 0
        self.rows.append(np.asarray(rows)[keep])
        self.cols.append(cols[keep])
        self.vals.append(coef[keep])

    def matrix(self) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
        cat = np.concatenate
        A = sp.csr_matrix(
            (
                cat(self.vals) if self.vals else [],
                (cat(self.rows) if self.rows else [], cat(self.cols) if self.cols else []),
            ),
            shape=(self.count, self.num_vars),
        )
        A.sum_duplicates()
        return A, cat(self.lbs) if self.lbs else np.zeros(0), cat(self.ubs) if self.ubs else np.zeros(0)
