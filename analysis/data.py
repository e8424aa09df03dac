"""Reading results/: a clear message naming the stage to run when an input is missing."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

SCHEDULE_STATUSES = ("optimal", "feasible")


class MissingResults(FileNotFoundError):
    """An analysis input that an experiment stage has not produced yet."""


def read(results: Path, name: str) -> pd.DataFrame:
    path = results / f"{name}.csv"
    if not path.is_file() or path.stat().st_size == 0:
        raise MissingResults(f"{path} is missing: run the {name} stage first (`dvc repro {name}` or "
                             f"`python run.py experiment={name}`)")
    frame = pd.read_csv(path)
    if frame.empty:
        raise MissingResults(f"{path} has no rows: run the {name} stage first (`dvc repro {name}`)")
    return frame


def latest_cells(frame: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    """One row per cell: the last one written (re-runs of a cell append after the old row)."""
    key = [k for k in key if k in frame.columns]
    return frame.drop_duplicates(subset=key, keep="last") if key else frame


def with_schedule(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["status"].isin(SCHEDULE_STATUSES) & frame["cost"].notna()]
