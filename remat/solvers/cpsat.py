"""OR-Tools CP-SAT backend: the MILP turned into an exactly equivalent integer program.

CP-SAT takes integer variables and integer coefficients only. We do the
conversion ourselves rather than through OR-Tools' MIP importer, whose scaling
is approximate (``mip_wanted_precision``): an answer called optimal here must be
optimal for the model that was given.

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

CP-SAT itself runs in a child process: OR-Tools and highspy each bundle a
different ``libhighs.so.1`` under the same soname, so whichever is imported
second in a process fails to load, and the default HiGHS backend must keep
working here. The child costs about a second to start.

When any step is not exact (a coefficient with no small denominator, a
continuous column not implied integral, an infinite bound clipped), the model is
solved as a rounded/restricted approximation: its solutions are reported as
``feasible`` without a bound and "infeasible" becomes ``error``, since neither
proves anything about the given model. The objective may be scaled
approximately without that penalty: ``x`` is returned and its objective is
recomputed from the given ``c``; the bound is widened by the largest rounding
error, and ``optimal`` is kept only while that certified gap is within ``mip_gap``.
"""

from __future__ import annotations

import importlib.util
import math
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from remat.solvers.problem import MilpProblem, SolverError, SolverOptions, SolverOutput

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


# Run in a child process: OR-Tools and highspy cannot share one (see the module docstring).
_WORKER = "from remat.solvers.cpsat import _worker; _worker()"


def _worker() -> None:
    """Child-process entry: read a job from stdin, solve it with CP-SAT, stream pickled frames to stdout."""
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever the solver prints goes to stderr and cannot corrupt the frames

    def send(*frame: object) -> None:
        pickle.dump(frame, channel)
        channel.flush()

    job = pickle.load(sys.stdin.buffer)
    try:
        from ortools.sat.python import cp_model
    except ImportError as exc:
        send("missing", str(exc))
        return
    model = cp_model.CpModel()
    proto = model.proto
    for lo, hi in zip(job["lb"], job["ub"]):
        proto.variables.add().domain.extend([lo, hi])
    indptr, indices, data = job["indptr"], job["indices"], job["data"]
    for i, (lo, hi) in enumerate(zip(job["row_lb"], job["row_ub"])):
        if lo is None and hi is None:
            continue
        linear = proto.constraints.add().linear
        linear.vars.extend(indices[indptr[i]:indptr[i + 1]])
        linear.coeffs.extend(data[indptr[i]:indptr[i + 1]])
        linear.domain.extend([cp_model.INT_MIN if lo is None else lo, cp_model.INT_MAX if hi is None else hi])
    proto.objective.vars.extend(job["objective_vars"])
    proto.objective.coeffs.extend(job["objective_coeffs"])
    proto.objective.offset = job["objective_offset"]
    if job["hint"] is not None:
        proto.solution_hint.vars.extend(range(len(job["hint"])))
        proto.solution_hint.values.extend(job["hint"])
    invalid = model.validate()
    if invalid:
        send("invalid", invalid)
        return
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.num_workers = job["threads"]
    params.relative_gap_limit = job["mip_gap"]
    # The log also goes into the response, where the worker count actually used is read back.
    params.log_search_progress = True
    params.log_to_response = True
    params.log_to_stdout = job["verbose"]  # stdout is stderr here
    if job["time_limit"] is not None:
        params.max_time_in_seconds = job["time_limit"]
    for key, value in job["extra"].items():
        try:
            setattr(params, key, value)
        except (AttributeError, TypeError, ValueError) as exc:
            send("parameter", f"CP-SAT rejected parameter {key}={value!r} ({exc}); see OR-Tools' sat_parameters.proto")
            return

    class Incumbents(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self) -> None:
            send("incumbent", self.objective_value, self.best_objective_bound)

    status = solver.solve(model, Incumbents() if job["incumbents"] else None)
    response = solver.response_proto
    workers = re.search(r"Starting search at .* with (\d+) workers", response.solve_log)
    send("done", solver.status_name(status), list(response.solution), response.best_objective_bound,
         {"cpsat_time": solver.wall_time, "branches": solver.num_branches, "conflicts": solver.num_conflicts,
          "threads": int(workers.group(1)) if workers else None})


def solve_cpsat(problem: MilpProblem, options: SolverOptions, warm_start: np.ndarray | None = None) -> SolverOutput:
    """Solve with CP-SAT (in a child process) on the integral model of :func:`integral_model`."""
    if importlib.util.find_spec("ortools") is None:
        raise SolverError("the cpsat backend needs OR-Tools, which is not installed: pip install ortools "
                          "(or use solver=highs)")
    start = time.perf_counter()
    im = integral_model(problem)
    objective_vars = np.flatnonzero(im.objective)
    job = {"lb": im.lb.tolist(), "ub": im.ub.tolist(), "indptr": im.A.indptr.tolist(),
           "indices": im.A.indices.tolist(), "data": im.A.data.tolist(), "row_lb": im.row_lb, "row_ub": im.row_ub,
           "objective_vars": objective_vars.tolist(), "objective_coeffs": im.objective[objective_vars].tolist(),
           "objective_offset": float(problem.offset * im.objective_scale),
           "hint": im.y(warm_start).tolist() if warm_start is not None else None,
           "threads": int(options.threads), "mip_gap": float(options.mip_gap), "verbose": bool(options.verbose),
           "time_limit": None if options.time_limit is None else float(options.time_limit),
           "incumbents": options.on_incumbent is not None, "extra": dict(getattr(options, "extra", {}))}
    stats = {"exact": im.exact, "conversion_time": time.perf_counter() - start,
             "objective_scale": im.objective_scale, "objective_error": im.objective_error,
             "max_row_scale": float(im.row_scale.max(initial=1.0)),
             "max_column_scale": float(im.col_scale.max(initial=1.0)), "notes": im.notes}

    def to_bound(scaled: float) -> float | None:
        return scaled / im.objective_scale - im.objective_error if im.exact and math.isfinite(scaled) else None

    def report(objective: float, bound: float) -> None:
        if options.on_incumbent is not None:
            proved = to_bound(bound)
            options.on_incumbent(time.perf_counter() - start, objective / im.objective_scale,
                                 proved if proved is not None else -math.inf)

    done = _run_worker(job, options.verbose, report)
    elapsed = time.perf_counter() - start
    if done[0] == "parameter":
        raise ValueError(done[1])
    if done[0] == "missing":
        raise SolverError(f"the cpsat backend could not import OR-Tools: pip install ortools [{done[1]}]")
    if done[0] in ("invalid", "crashed"):
        return SolverOutput("error", time=elapsed, message=f"CP-SAT {done[0]}: {done[1]}", stats=stats)
    name, y, bound, solver_stats = done[1:]
    stats.update(cpsat_status=name, **solver_stats)
    return _output(problem, im, name, y, to_bound(bound), options, elapsed, stats)


def _run_worker(job: dict, verbose: bool, report: Callable[[float, float], None]) -> tuple:
    """Run :func:`_worker` on ``job``, relaying incumbents to ``report``; returns the final frame."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=None if verbose else errors, env=env)
        try:
            pickle.dump(job, proc.stdin)
            proc.stdin.close()
            while True:
                try:
                    frame = pickle.load(proc.stdout)
                except EOFError:
                    break
                if frame[0] == "incumbent":
                    report(frame[1], frame[2])
                else:
                    return frame
            proc.wait()
            errors.seek(0)
            tail = errors.read().decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
            return ("crashed", tail[0])
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _output(problem: MilpProblem, im: IntegralModel, name: str, y: list[int], bound: float | None,
            options: SolverOptions, elapsed: float, stats: dict) -> SolverOutput:
    note = "; ".join(im.notes)
    if name in ("OPTIMAL", "FEASIBLE"):
        x = im.x(np.asarray(y, dtype=np.int64))
        objective = float(problem.c @ x + problem.offset)
        bound = None if bound is None else min(bound, objective)
        certified = SolverOutput("optimal", x, objective, bound).gap
        if name == "OPTIMAL" and certified is not None and certified <= options.mip_gap + 1e-12:
            return SolverOutput("optimal", x, objective, bound, elapsed, "", stats)
        message = "stopped by a limit" if name == "FEASIBLE" else "optimal for the rounded model only"
        return SolverOutput("feasible", x, objective, bound, elapsed, f"{message}{'; ' + note if note else ''}",
                            stats)
    if name == "INFEASIBLE":
        if im.exact:
            return SolverOutput("infeasible", None, None, None, elapsed, "proved infeasible", stats)
        return SolverOutput("error", None, None, None, elapsed,
                            f"CP-SAT proved its rounded integer model infeasible, which says nothing about the "
                            f"given model ({note}); use solver=highs", stats)
    if name == "UNKNOWN":
        return SolverOutput("time_limit", None, None, bound, elapsed, "no solution before the time limit", stats)
    return SolverOutput("error", None, None, None, elapsed, f"CP-SAT ended with {name}", stats)
