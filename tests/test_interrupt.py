"""Ctrl-C and SIGTERM end a real ilp solve within seconds, keeping the best schedule, its bound and the row."""

from __future__ import annotations

import csv
import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from remat.budget import no_recompute_peak
from remat.generators import random_dag
from remat.milp.certified import solve_ilp_certified
from remat.result import Status
from remat.schedule import simulate

ROOT = Path(__file__).resolve().parent.parent
# A plain DAG whose certificate takes minutes (a 2-core machine reaches an 11 % gap in 40 s) but whose first
# schedule comes within a second: the solve is surely still running when the signal arrives.
HARD = random_dag(120, 1, edge_probability=0.04)
FRACTION = 0.75
GRACE = 2.0  # seconds from the signal to the end of the solve (the target)


def test_a_stop_event_ends_the_pipeline_with_its_best_schedule_and_bound():
    budget = FRACTION * no_recompute_peak(HARD)
    stop = threading.Event()
    timer = threading.Timer(3.0, stop.set)
    timer.start()
    start = time.perf_counter()
    result = solve_ilp_certified(HARD, budget, time_limit=300, stop=stop)
    returned = time.perf_counter() - start
    timer.cancel()
    assert result.status == Status.INTERRUPTED
    assert returned < 3.0 + GRACE
    assert simulate(HARD, result.schedule, plan=False).within(budget)
    assert result.lower_bound <= result.cost and result.gap is not None


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_run_py_saves_the_schedule_and_records_an_interrupted_row(signum, tmp_path):
    graph_file = tmp_path / "hard.json"
    HARD.save(graph_file)
    out = tmp_path / "run"
    cmd = [sys.executable, str(ROOT / "run.py"), f"graph={graph_file}", "strategy=ilp", f"budget={FRACTION}",
           "solver.time_limit=300", f"hydra.run.dir={out}", "mlflow.enabled=false", "record=interrupted",
           f"paths.results={tmp_path / 'results'}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The first progress line ("  0.9 s  cost 1.2x ...") proves the solve has begun; its clock is the solve's.
        for line in proc.stdout:
            progress = re.match(r"\s+([\d.]+) s\s+cost", line)
            if progress:
                break
        else:
            pytest.fail(f"run.py printed no progress line: {proc.stderr.read()[-2000:]}")
        proc.send_signal(signum)
        rest, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert "interrupted" in rest
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert float(summary["solve_time"]) <= float(progress.group(1)) + GRACE
    assert float(summary["lower_bound"]) <= float(summary["cost"])
    assert (out / "schedule.json").is_file()
    rows = list(csv.DictReader((tmp_path / "results" / "interrupted.csv").open()))
    assert [r["status"] for r in rows] == ["interrupted"]
