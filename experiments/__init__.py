"""The experiment suite: one module per paper experiment, all run through ``python run.py experiment=<name>``.

Experiments import the library lazily so that a missing part of it (a strategy,
the model zoo, a front end) fails only the experiments that need it, with a
message naming what is missing.
"""

from __future__ import annotations

import importlib
from typing import Any

EXPERIMENTS = {
    "solve": "experiments.solve",
    "budget_sweep": "experiments.budget_sweep",
    "max_batch": "experiments.max_batch",
    "approx_ratio": "experiments.approx_ratio",
    "integrality_gap": "experiments.integrality_gap",
    "schedules": "experiments.schedules",
    "activation_memory": "experiments.activation_memory",
    "rounding": "experiments.rounding",
    "profile": "experiments.profile",
}


def get_experiment(name: str) -> Any:
    """The module implementing experiment ``name`` (it has ``main(cfg, output_dir)``)."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; pick one of {', '.join(EXPERIMENTS)}")
    return importlib.import_module(EXPERIMENTS[name])
