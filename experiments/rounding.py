"""Appendix D: deterministic versus randomized two-phase LP rounding.

Runs ``approx_lp_deterministic`` once and ``approx_lp_randomized`` once per seed
at each budget, next to the ILP; ``python -m analysis rounding`` tabulates cost
ratios to the ILP and the share of budgets where each rounding stays feasible.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.sweep import run_grid


def main(cfg: Any, output_dir: Path) -> Path:
    return run_grid(cfg)
