"""Fig. 5 (§6.3): computational overhead versus memory budget for every strategy.

Each cell solves one graph at one budget with one strategy; overhead is the cost
relative to checkpoint_all. Grid: ``params.yaml[<profile>].budget_sweep``.
Figure: ``python -m analysis fig5``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.sweep import run_grid


def main(cfg: Any, output_dir: Path) -> Path:
    return run_grid(cfg)
