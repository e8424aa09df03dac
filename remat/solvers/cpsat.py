"""OR-Tools CP-SAT backend: the MILP turned into an exactly equivalent integer program.

CP-SAT takes integer variables and integer coefficients only. We do the
conversion ourselves rather than through OR-Tools' MIP importer, whose scaling
is approximate (``mip_wanted_precision``): an answer called optimal here must be
optimal for the model that was given.

The conversion is :func:`remat.solvers.integral.integral_model`'s (exact, or flagged as not).

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
from pathlib import Path

import numpy as np

from remat.solvers.integral import IntegralModel, integral_model
from remat.solvers.problem import MilpProblem, SolverError, SolverOptions, SolverOutput

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
