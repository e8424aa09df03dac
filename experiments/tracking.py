"""MLflow logging for run.py and the experiments (the library itself never imports MLflow).

Runs go to a SQLite store inside the project (``sqlite:///<project>/mlruns.db``)
with artifacts under ``<project>/mlartifacts``; ``mlflow ui --backend-store-uri
sqlite:///mlruns.db`` shows them.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Any

from experiments.common import PROJECT_ROOT, project_path

PARAMS = ("experiment", "model", "graph", "batch_size", "strategy", "solver", "time_limit", "budget_spec", "budget",
          "cost_model", "seed", "platform")
METRICS = ("cost", "overhead", "peak_memory", "solve_time", "gap", "lower_bound", "max_batch")


def default_uri() -> str:
    return f"sqlite:///{PROJECT_ROOT / 'mlruns.db'}"


class Tracker:
    """Logs one MLflow run per result row; a disabled tracker does nothing."""

    def __init__(self, cfg: Any | None) -> None:
        cfg = cfg or {}
        self.enabled = bool(cfg.get("enabled", True))
        self.uri = cfg.get("uri") or default_uri()
        self.artifacts = str(project_path(cfg.get("artifacts") or _beside_store(self.uri)))
        self._experiments: dict[str, str] = {}
        self._mlflow: Any = None

    def _client(self) -> Any:
        if self._mlflow is None:
            os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
            os.environ.setdefault("DO_NOT_TRACK", "true")
            import mlflow

            logging.getLogger("alembic").setLevel(logging.WARNING)
            mlflow.set_tracking_uri(self.uri)
            self._mlflow = mlflow
        return self._mlflow

    def _experiment_id(self, name: str) -> str:
        if name not in self._experiments:
            mlflow = self._client()
            exp = mlflow.get_experiment_by_name(name)
            if exp is None:
                try:
                    exp_id = mlflow.create_experiment(name, artifact_location=Path(self.artifacts, name).as_uri())
                except Exception:  # another parallel job created it first
                    exp_id = mlflow.get_experiment_by_name(name).experiment_id
            else:
                exp_id = exp.experiment_id
            self._experiments[name] = exp_id
        return self._experiments[name]

    def log(self, experiment: str, row: dict[str, Any], artifacts: list[Path] | None = None,
            run_name: str | None = None, history: list[dict[str, float]] | None = None) -> None:
        """One run for ``row``; ``history`` (improving schedules and bounds as they came) becomes metric series
        ``incumbent_cost``, ``incumbent_bound`` and ``incumbent_gap`` stamped with the time each was found."""
        if not self.enabled:
            return
        for attempt in range(5):
            try:
                self._log_once(experiment, row, artifacts or [], run_name, history or [])
                return
            except Exception as exc:  # SQLite "database is locked" under parallel jobs: retry
                if "locked" not in str(exc).lower() or attempt == 4:
                    raise
                time.sleep(0.5 * (attempt + 1))

    def _log_once(self, experiment: str, row: dict[str, Any], artifacts: list[Path], run_name: str | None,
                  history: list[dict[str, float]]) -> None:
        mlflow = self._client()
        with mlflow.start_run(experiment_id=self._experiment_id(experiment), run_name=run_name):
            mlflow.log_params({k: _param(row.get(k)) for k in PARAMS if k in row})
            metrics = {k: float(row[k]) for k in METRICS if _finite(row.get(k))}
            if metrics:
                mlflow.log_metrics(metrics)
            for step, event in enumerate(history):
                stamp = int(1000 * event["time"])
                for key in ("cost", "lower_bound", "gap"):
                    if _finite(event.get(key)):
                        name = {"cost": "incumbent_cost", "lower_bound": "incumbent_bound", "gap": "incumbent_gap"}[key]
                        mlflow.log_metric(name, float(event[key]), step=step, timestamp=stamp)
            mlflow.set_tags({"status": str(row.get("status", "")), "remat_version": str(row.get("remat_version", "")),
                             "solver_version": str(row.get("solver_version", "")),
                             "torch_version": str(row.get("torch_version", ""))})
            for path in artifacts:
                if Path(path).is_file():
                    mlflow.log_artifact(str(path))


def _beside_store(uri: str) -> str:
    """Artifacts default to ``mlartifacts/`` next to a SQLite store (the project's: ``<project>/mlartifacts``)."""
    if uri.startswith("sqlite:///"):
        return str(Path(uri[len("sqlite:///"):]).parent / "mlartifacts")
    return "mlartifacts"


def _param(value: Any) -> str:
    return "" if value is None else str(value)


def _finite(value: Any) -> bool:
    try:
        return value is not None and value != "" and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
