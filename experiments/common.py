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
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from remat.budget import BudgetError, format_bytes, parse_budget  # noqa: F401 (format_bytes: re-exported)
from remat.budget import resolve_budget as _resolve_budget

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class InputError(ValueError):
    """Bad user input to run.py or an experiment; the message names the problem and the fix."""


class MissingAPIError(RuntimeError):
    """An experiment needs a library function that does not exist (yet); the message names it."""


# ---------------------------------------------------------------------- budgets
# One home for budgets: remat.budget parses and resolves them; run.py and the experiments report its
# refusals as InputError (exit status 2, one line on stderr).
def parse_budget_spec(spec: Any) -> tuple[str, float]:
    """:func:`remat.budget.parse_budget`, with its refusal as an :class:`InputError`."""
    try:
        return parse_budget(spec)
    except BudgetError as exc:
        raise InputError(str(exc)) from None


def resolve_budget(spec: Any, graph: Any) -> float:
    """:func:`remat.budget.resolve_budget` (bytes for ``graph``), with its refusal as an :class:`InputError`."""
    try:
        return _resolve_budget(spec, graph)
    except BudgetError as exc:
        raise InputError(str(exc)) from None


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
