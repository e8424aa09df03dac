"""The figures and tables of ``python -m analysis`` as artifacts of one MLflow run each.

They go to the project's store (``sqlite:///<project>/mlruns.db``, artifacts in
``<project>/mlartifacts``: the layout of ``experiments/tracking.py``, which logs the
runs that produced their data), under the experiment ``analysis``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def log_outputs(target: str, paths: list[Path], params: dict[str, Any], uri: str | None = None) -> None:
    """One run named ``target`` in the ``analysis`` experiment, holding ``paths`` as artifacts."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    import mlflow

    uri = uri or f"sqlite:///{ROOT / 'mlruns.db'}"
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.get_experiment_by_name("analysis")
    if experiment is None:
        store = Path(uri.removeprefix("sqlite:///")).parent if uri.startswith("sqlite:///") else Path.cwd()
        experiment_id = mlflow.create_experiment("analysis", artifact_location=(store / "mlartifacts" / "analysis")
                                                 .as_uri())
    else:
        experiment_id = experiment.experiment_id
    with mlflow.start_run(experiment_id=experiment_id, run_name=target):
        mlflow.log_params({k: str(v) for k, v in params.items()})
        for path in paths:
            if path.is_file():
                mlflow.log_artifact(str(path))
