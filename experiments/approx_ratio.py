"""Table 2 (§6.5): each strategy's cost over the ILP optimum, geometric mean over feasible budgets.

The sweep runs the ILP next to the heuristics and LP-rounding strategies; the
ratio is formed by ``python -m analysis table2`` from the rows alone, over the
budgets where both the strategy and the ILP found a schedule (the ILP only where
proved optimal).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.common import InputError, as_list
from experiments.sweep import run_grid, settings


def main(cfg: Any, output_dir: Path) -> Path:
    grid = settings(cfg)
    if "ilp" not in [str(s) for s in as_list(grid.get("strategies"))]:
        raise InputError("approx_ratio compares against the ILP optimum: include ilp in experiment.strategies")
    return run_grid(cfg, grid)
