"""A MILP rescaled to an exactly equivalent integer program (what CP-SAT takes); see :mod:`remat.solvers.cpsat`.

* Every coefficient is recovered as a fraction with denominator <= 2**26
  (accepted only when it equals the float to within two ulps) and each row is
  multiplied by the least common multiple of its denominators; failing that, by
  ``k / (a small coefficient)`` when that makes every coefficient integral to
  float precision (memory rows with a tiny tensor, see :func:`_anchored_scale`).
  "Exact" thus means exact for the data read as those ratios - which is what
  Checkmate's coefficients (integer byte counts over the largest) are. Rows holding
  continuous columns share one multiplier ``L`` so that a continuous column
  ``x_j`` can become an integer ``y_j = L g_j x_j`` (``g_j`` the rational gcd of
  its coefficients). For Checkmate's memory rows (``M_k = bytes_k / max bytes``)
  ``L`` is the largest tensor over the gcd of all tensor sizes, ``y`` is memory
  in units of that gcd, and the conversion is exact.
* That substitution loses nothing when every continuous column is *implied
  integral*: it has coefficient +-1 in an equality row whose other columns are
  integers or continuous columns already shown implied integral (Checkmate's
  ``U[t,k] = U[t,k-1] + ...`` chain). This is checked, not assumed.
* Inequality bounds are rounded inward (the scaled left side is an integer),
  equality bounds must come out integral.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import scipy.sparse as sp

from remat.solvers.problem import MilpProblem

MAX_DENOMINATOR = 2**26


# Largest scaled coefficient we accept; row activities stay far inside int64.
MAX_COEFFICIENT = 2.0**40


# Finite stand-in for an infinite column bound (the model then counts as a restriction).
CLIP = 2.0**40


@dataclass(eq=False)
class IntegralModel:
    """``problem`` as integers: ``x = y / col_scale``, row ``i`` multiplied by ``row_scale[i]``."""

    A: sp.csr_matrix  # int64 coefficients
    row_lb: list[int | None]
    row_ub: list[int | None]
    lb: np.ndarray  # int64
    ub: np.ndarray
    col_scale: np.ndarray
    row_scale: np.ndarray
    objective: np.ndarray  # int64, objective = (objective @ y) / objective_scale + offset (approximately)
    objective_scale: float
    objective_error: float  # |c @ x - objective @ y / objective_scale| <= this, for every y in the box
    exact: bool
    notes: list[str] = field(default_factory=list)

    def x(self, y: np.ndarray) -> np.ndarray:
        return np.asarray(y, float) / self.col_scale

    def y(self, x: np.ndarray) -> np.ndarray:
        return np.clip(np.round(np.asarray(x, float) * self.col_scale), self.lb, self.ub).astype(np.int64)


def _denominators(values: np.ndarray) -> np.ndarray:
    """Denominator of each value as a small fraction; 0 where none is within two ulps."""
    out = np.zeros(values.shape, np.int64)
    unique, inverse = np.unique(values, return_inverse=True)
    dens = np.zeros(unique.shape, np.int64)
    for i, v in enumerate(unique.tolist()):
        if v == int(v):
            dens[i] = 1
            continue
        f = Fraction(v).limit_denominator(MAX_DENOMINATOR)
        dens[i] = f.denominator if abs(Fraction(v) - f) <= 2 * math.ulp(v) else 0
    out[...] = dens[inverse.reshape(values.shape)]
    return out


def _common_scale(values: np.ndarray) -> tuple[float, bool]:
    """The least multiplier making every value integral (exact), else a power of two (rounded)."""
    unique = np.unique(np.abs(values[values != 0]))
    if unique.size == 0:
        return 1.0, True
    biggest = float(unique[-1])
    dens = _denominators(unique)
    if (dens > 0).all():
        L = math.lcm(*np.unique(dens).tolist())
        if L * biggest <= MAX_COEFFICIENT:
            return float(L), True
    L = _anchored_scale(unique)
    if L is not None:
        return L, True
    return 2.0 ** math.floor(math.log2(MAX_COEFFICIENT / biggest)), False


def _anchored_scale(unique: np.ndarray) -> float | None:
    """A multiplier found from a small value, for common denominators above ``MAX_DENOMINATOR``.

    Memory coefficients are sizes over the largest size; with a tiny tensor (a scalar loss of 4 bytes)
    their common denominator (largest size / gcd of sizes) is too large to recover value by value, but
    it is ``k / smallest value`` for a small ``k``. Accepted only if it makes every value integral to
    within float error, which a wrong multiplier does by chance with negligible probability.
    """
    for anchor in unique[:4].tolist():
        for k in range(1, 65):
            L = round(k / anchor)
            if L * unique[-1] > MAX_COEFFICIENT:
                break
            if L < 1:
                continue
            scaled = L * unique
            if np.all(np.abs(scaled - np.round(scaled)) <= 1e-9 + 16 * np.spacing(scaled)):
                return float(L)
    return None


def _rational_gcd(values: np.ndarray) -> float | None:
    fracs = [Fraction(v).limit_denominator(MAX_DENOMINATOR) for v in np.unique(np.abs(values)).tolist()]
    if any(abs(Fraction(v) - f) > 2 * math.ulp(v) for v, f in zip(np.unique(np.abs(values)).tolist(), fracs)):
        return None
    den = math.lcm(*(f.denominator for f in fracs))
    return math.gcd(*(int(f * den) for f in fracs)) / den


def _round_bounds(values: np.ndarray, inward: int, exact_rows: np.ndarray, equality: np.ndarray) -> list:
    """Round scaled bounds: inward (+1 = ceil for lower bounds, -1 = floor for upper) with float slack.

    Approximate (rounded) equality rows round to the nearest integer instead, so they stay satisfiable.
    """
    with np.errstate(invalid="ignore"):  # infinite bounds become None below
        slack = 1e-9 + 8 * np.spacing(np.abs(values))
        rounded = np.ceil(values - slack) if inward > 0 else np.floor(values + slack)
    nearest = equality & ~exact_rows
    rounded[nearest] = np.round(values[nearest])
    return [int(v) if math.isfinite(v) else None for v in rounded]


def integral_model(problem: MilpProblem) -> IntegralModel:
    """Scale ``problem`` to integers, exactly when the data allow (see the module docstring)."""
    notes: list[str] = []
    A = problem.A.tocsr().astype(float)
    A.sum_duplicates()
    A.eliminate_zeros()
    n_rows, n = A.shape
    integral = np.asarray(problem.integrality, bool)
    continuous = ~integral
    row_of = np.repeat(np.arange(n_rows), np.diff(A.indptr))
    cont_nz = continuous[A.indices]
    in_g = np.zeros(n_rows, bool)
    in_g[row_of[cont_nz]] = True
    lo, hi = np.asarray(problem.row_lb, float), np.asarray(problem.row_ub, float)
    equality = np.isfinite(lo) & (lo == hi)

    # Continuous columns: divide by the rational gcd of their coefficients, so they become +-1 where equal.
    g = np.ones(n)
    exact = True
    Ac = A.tocsc()
    counts = np.diff(Ac.indptr)
    cols = np.flatnonzero(continuous & (counts > 0))
    if cols.size:
        mags = np.abs(Ac.data)
        lo_mag = np.minimum.reduceat(mags, Ac.indptr[cols])
        hi_mag = np.maximum.reduceat(mags, Ac.indptr[cols])
        g[cols] = lo_mag
        for j in cols[lo_mag != hi_mag]:
            gj = _rational_gcd(Ac.data[Ac.indptr[j]:Ac.indptr[j + 1]])
            exact &= gj is not None
            g[j] = gj if gj is not None else g[j]
    B = A.copy()
    B.data = A.data / g[A.indices]

    # Row multipliers: one shared L for rows with continuous columns, one per row otherwise.
    row_scale = np.ones(n_rows)
    exact_rows = np.ones(n_rows, bool)
    g_nz = in_g[row_of]
    if in_g.any():
        eq_g = np.flatnonzero(in_g & equality)
        # g_j joins the denominators so that L g_j is a whole number: the lattice of x_j contains the integers.
        L, ok = _common_scale(np.concatenate([B.data[g_nz & ~cont_nz], lo[eq_g], g[continuous]]))
        row_scale[in_g] = L
        exact_rows[in_g] = ok
        if not ok:
            notes.append("rows with continuous columns have no common integral scale; rounded")
    other = ~g_nz
    dens = _denominators(B.data[other])
    for i in np.unique(row_of[other][dens != 1]):
        scale, ok = _common_scale(B.data[B.indptr[i]:B.indptr[i + 1]])
        row_scale[i], exact_rows[i] = scale, ok
    if not exact_rows.all():
        notes.append(f"{int((~exact_rows).sum())} rows rounded to integers (no small common denominator)")
    exact &= bool(exact_rows.all())

    # A continuous column's multiplier L is absorbed by its column scale L g_j: its coefficient stays a / g_j.
    scaled = np.where(cont_nz, B.data, B.data * row_scale[row_of])
    data = np.round(scaled)
    if exact and np.any(np.abs(scaled - data) > 1e-9 + 8 * np.spacing(np.abs(scaled))):
        exact = False
        notes.append("scaled coefficients not integral")
    A_int = sp.csr_matrix((data.astype(np.int64), A.indices.copy(), A.indptr.copy()), shape=A.shape)

    L_of_col = np.ones(n)
    if continuous.any():
        # Every row holding a continuous column shares the multiplier, so any of them names it.
        L_of_col[continuous] = row_scale[in_g][0] if in_g.any() else 1.0
    col_scale = np.where(continuous, L_of_col * g, 1.0)
    lb_s, ub_s = problem.lb * col_scale, problem.ub * col_scale
    if np.any(np.abs(lb_s) > CLIP) or np.any(np.abs(ub_s) > CLIP):
        exact = False
        notes.append(f"infinite column bounds clipped to +-{CLIP:.0e}")
    lb_s, ub_s = np.clip(lb_s, -CLIP, CLIP), np.clip(ub_s, -CLIP, CLIP)
    ones = np.ones(n, bool)
    lb_i = np.array(_round_bounds(lb_s, +1, ones, ~ones), dtype=np.int64)
    ub_i = np.array(_round_bounds(ub_s, -1, ones, ~ones), dtype=np.int64)

    if continuous.any() and exact and not _implied_integral(A_int, equality & in_g, continuous):
        exact = False
        notes.append("continuous columns not implied integral; solved on a lattice (a restriction)")

    row_lb = _round_bounds(lo * row_scale, +1, exact_rows, equality)
    row_ub = _round_bounds(hi * row_scale, -1, exact_rows, equality)

    v = problem.c / col_scale
    K, exact_objective = _common_scale(v)
    objective = np.round(v * K)
    extent = np.maximum(np.abs(lb_i), np.abs(ub_i)).astype(float)
    # With an exact K the residuals are float noise of the coefficients themselves, not rounding.
    error = 0.0 if exact_objective else float(np.sum(np.abs(v * K - objective) * extent) / K)
    return IntegralModel(A_int, row_lb, row_ub, lb_i, ub_i, col_scale, row_scale, objective.astype(np.int64), K,
                         error, bool(exact), notes)


def _implied_integral(A: sp.csr_matrix, equality: np.ndarray, continuous: np.ndarray) -> bool:
    """Whether every continuous column is fixed to an integer by equality rows (peeling, as in the docstring)."""
    E = A[np.flatnonzero(equality)][:, np.flatnonzero(continuous)].tocsr()
    if E.shape[1] == 0:
        return True
    Ec = E.tocsc()
    implied = np.zeros(E.shape[1], bool)
    pending = np.diff(E.indptr).copy()
    queue = list(np.flatnonzero(pending == 1))
    while queue:
        r = queue.pop()
        cols = E.indices[E.indptr[r]:E.indptr[r + 1]]
        vals = E.data[E.indptr[r]:E.indptr[r + 1]]
        open_ = ~implied[cols]
        if open_.sum() != 1 or abs(vals[open_][0]) != 1:
            continue
        j = cols[open_][0]
        implied[j] = True
        for r2 in Ec.indices[Ec.indptr[j]:Ec.indptr[j + 1]]:
            pending[r2] -= 1
            if pending[r2] == 1:
                queue.append(r2)
    return bool(implied.all())
