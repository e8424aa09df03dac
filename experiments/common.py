"""Helpers shared by run.py and every experiment: budgets, paths, versions, tidy CSV rows.

Results are tidy CSV files under ``results/``: one row per cell (graph x strategy x
budget x seed), appended as soon as the cell finishes so a killed sweep keeps
everything it had done, and read back on a re-run to skip finished cells.
"""

from __future__ import annotations

import csv
import fcntl
import math
import os
import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class InputError(ValueError):
    """Bad user input to run.py or an experiment; the message names the problem and the fix."""


class MissingAPIError(RuntimeError):
    """An experiment needs a library function that does not exist (yet); the message names it."""


# ---------------------------------------------------------------------- budgets
_UNITS = {
    "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
}
_BUDGET_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
_BUDGET_HELP = (
    'give bytes (e.g. 12000000000), a size with a unit ("12GB", "500MiB"), a fraction in (0,1] of the '
    'no-recomputation peak (e.g. 0.7), or "span:f" (f in [0,1] of the way from the smallest computable budget '
    "to that peak)"
)


def parse_budget_spec(spec: Any) -> tuple[str, float]:
    """Split a budget spec into ``("fraction", f)`` or ``("bytes", b)``, without looking at a graph.

    A number in (0, 1] is a fraction of checkpoint_all's peak; a whole number
    above 1 or a size with a unit (decimal kB/MB/GB/TB, binary KiB/MiB/GiB/TiB)
    is bytes; ``span:f`` is ``("span", f)``, a point between the smallest budget
    any schedule could meet and the no-recomputation peak (sweeps use it so every
    graph's grid covers its own feasible range).
    """
    if isinstance(spec, bool) or spec is None:
        raise InputError(f"budget {spec!r} is not a number: {_BUDGET_HELP}")
    if isinstance(spec, str) and spec.strip().lower().startswith("span:"):
        try:
            value = float(spec.split(":", 1)[1])
        except ValueError:
            value = math.nan
        if not 0 <= value <= 1:
            raise InputError(f"budget {spec!r} needs a number in [0,1] after 'span:': {_BUDGET_HELP}")
        return "span", value
    if isinstance(spec, (int, float)):
        value, unit = float(spec), ""
    else:
        match = _BUDGET_RE.match(str(spec))
        if not match:
            raise InputError(f"budget {str(spec)!r} is not numeric: {_BUDGET_HELP}")
        value, unit = float(match.group(1)), match.group(2).lower()
        if unit and unit not in _UNITS:
            raise InputError(f"budget {str(spec)!r} has an unknown unit {match.group(2)!r}: {_BUDGET_HELP}")
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"budget {spec!r} must be positive: {_BUDGET_HELP}")
    if unit:
        return "bytes", float(round(value * _UNITS[unit]))
    if value <= 1:
        return "fraction", value
    if value != round(value):
        raise InputError(f"budget {spec!r} is neither a fraction in (0,1] nor a whole number of bytes: {_BUDGET_HELP}")
    return "bytes", value


def resolve_budget(spec: Any, graph: Any) -> float:
    """The budget in bytes for ``graph``; refuses budgets below the graph's constant overhead."""
    kind, value = parse_budget_spec(spec)
    if kind in ("fraction", "span"):
        from remat.budget import no_recompute_peak

        peak = no_recompute_peak(graph)
        budget = value * peak if kind == "fraction" else span_budget(graph, value, peak)
    else:
        budget = value
    if budget < graph.constant_memory:
        raise InputError(
            f"budget {spec!r} = {format_bytes(budget)} is below graph {graph.name!r}'s constant overhead "
            f"(inputs, parameters, gradients) of {format_bytes(graph.constant_memory)}: give a budget above it"
        )
    return budget


def span_budget(graph: Any, f: float, peak: float) -> float:
    """``lb + f (peak - lb)`` with ``lb`` the memory needed to compute the hungriest node (a hard lower bound)."""
    try:
        from remat.budget import memory_lower_bound
    except ImportError:
        raise MissingAPIError("span: budgets need remat.budget.memory_lower_bound (not there yet)") from None
    lower, _ = memory_lower_bound(graph)
    return float(round(lower + f * (peak - lower)))


def format_bytes(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= size:
            return f"{value / size:.3f} {unit}"
    return f"{value:.0f} B"


# ---------------------------------------------------------------------- paths, versions
def project_path(path: str | os.PathLike[str]) -> Path:
    """A config path made absolute against the project root (Hydra may change the cwd)."""
    p = Path(os.path.expanduser(str(path)))
    return p if p.is_absolute() else PROJECT_ROOT / p


@cache
def package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return ""


SOLVER_PACKAGES = {"highs": "highspy", "gurobi": "gurobipy", "cpsat": "ortools"}


def versions(backend: str | None) -> dict[str, str]:
    return {
        "remat_version": package_version("remat"),
        "solver_version": package_version(SOLVER_PACKAGES.get(backend or "", "")) if backend else "",
        "torch_version": package_version("torch"),
    }


# ---------------------------------------------------------------------- CSV rows
def key_str(value: Any) -> str:
    """Canonical text of a key field so values read back from CSV compare equal."""
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return str(int(value)) if value == int(value) else repr(value)
    text = str(value)
    try:
        number = float(text)
    except ValueError:
        return text
    return key_str(number) if math.isfinite(number) else text


def row_key(row: dict[str, Any], key_columns: Iterable[str]) -> tuple[str, ...]:
    return tuple(key_str(row.get(c)) for c in key_columns)


def append_row(path: Path, row: dict[str, Any], columns: list[str], replace_key: list[str] | None = None) -> None:
    """Append one row (header first if the file is new), flushed to disk before returning.

    Parallel joblib/submitit jobs append to one file: an exclusive lock on the
    file itself serialises them (appends land at the end whatever the offset).
    With ``replace_key``, earlier rows with the row's key are dropped first, so a
    retried cell (one that ended in ``error``) keeps one row, not one per re-run.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", newline="") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.seek(0)
            first = f.readline()
            header = next(csv.reader([first])) if first.strip() else None
            writer = csv.DictWriter(f, fieldnames=header or columns, extrasaction="ignore")
            if header is None:
                writer.writeheader()
            elif replace_key:
                f.seek(0)
                rows = list(csv.DictReader(f))
                kept = [r for r in rows if row_key(r, replace_key) != row_key(row, replace_key)]
                if len(kept) < len(rows):
                    f.seek(0)
                    f.truncate()
                    writer.writeheader()
                    writer.writerows(kept)
            writer.writerow({c: _cell(row.get(c)) for c in header or columns})
            f.flush()
            os.fsync(f.fileno())
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def write_rows(path: Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    """Write a whole CSV file (for outputs that are regenerated, not appended)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: _cell(row.get(c)) for c in columns})


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float) and math.isnan(value):
        return ""
    return value


def read_rows(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# Cells that ended in "error" are retried on a re-run: they usually mean a missing API or licence.
FINAL_STATUSES = frozenset({"optimal", "feasible", "infeasible", "time_limit"})


def done_keys(path: Path, key_columns: list[str]) -> set[tuple[str, ...]]:
    return {row_key(r, key_columns) for r in read_rows(path) if r.get("status") in FINAL_STATUSES}


def as_list(value: Any) -> list[Any]:
    """A config value that may be one item (a multirun sweep value) or a list."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    try:
        from omegaconf import ListConfig

        if isinstance(value, ListConfig):
            return list(value)
    except ImportError:  # pragma: no cover - omegaconf ships with hydra
        pass
    return [value]


def names(value: Any) -> list[str]:
    return [str(v) for v in as_list(value)]
