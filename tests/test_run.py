"""run.py end to end on a generated graph (never on ../shared): summary, saved schedule, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from remat.budget import no_recompute_peak
from remat.generators import random_training_graph
from remat.schedule import Schedule, simulate

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run.py's experiments/ package lives beside remat/, outside the installed package
    sys.path.insert(0, str(ROOT))


def run_py(*args: str, out: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(ROOT / "run.py"), *args, f"hydra.run.dir={out}", "mlflow.enabled=false"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("graph") / "random7.json"
    random_training_graph(7, seed=3).save(path)
    return path


def test_checkpoint_all_summary_and_schedule(graph_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_py(f"graph={graph_file}", "strategy=checkpoint_all", "budget=1.0", out=out)
    assert proc.returncode == 0, proc.stderr
    graph = random_training_graph(7, seed=3)
    for field in ("strategy", "status", "cost", "overhead vs checkpoint_all", "peak memory", "solve time", "gap"):
        assert field in proc.stdout
    row = json.loads((out / "summary.json").read_text())
    assert row["status"] == "optimal" and row["overhead"] == pytest.approx(1.0)
    assert row["budget"] == pytest.approx(no_recompute_peak(graph))
    sim = simulate(graph, Schedule.load(out / "schedule.json"))
    assert sim.valid and sim.cost == pytest.approx(graph.total_cost) and sim.peak_memory == row["peak_memory"]
    assert (out / "summary.csv").read_text().count("\n") == 2


def test_ilp_meets_budget_in_bytes_and_beats_checkpoint_last(graph_file: Path, tmp_path: Path) -> None:
    graph = random_training_graph(7, seed=3)
    from experiments.common import resolve_budget

    budget = int(resolve_budget("span:0.5", graph))
    rows = {}
    for strategy in ("ilp", "checkpoint_last"):
        out = tmp_path / strategy
        proc = run_py(f"graph={graph_file}", f"strategy={strategy}", f"budget={budget}", out=out)
        assert proc.returncode == 0, proc.stderr
        rows[strategy] = json.loads((out / "summary.json").read_text())
    ilp = rows["ilp"]
    assert ilp["status"] == "optimal" and ilp["solver"] == "highs"
    assert ilp["budget"] == budget and ilp["peak_memory"] <= budget
    sim = simulate(graph, Schedule.load(tmp_path / "ilp" / "schedule.json"))
    assert sim.cost == pytest.approx(ilp["cost"]) and sim.peak_memory <= budget
    assert graph.total_cost <= ilp["cost"]
    if rows["checkpoint_last"]["cost"] is not None:
        assert ilp["cost"] <= rows["checkpoint_last"]["cost"] + 1e-9


def test_budget_units_are_parsed(graph_file: Path, tmp_path: Path) -> None:
    proc = run_py(f"graph={graph_file}", "strategy=checkpoint_all", "budget=1KiB", out=tmp_path / "r")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["budget"] == 1024


def _cyclic(path: Path) -> Path:
    data = random_training_graph(3, seed=0).to_dict()
    data["edges"].append([5, 1])
    path.write_text(json.dumps(data))
    return path


def _with_constant(path: Path) -> Path:
    random_training_graph(3, seed=0).with_constant_memory(10**6).save(path)
    return path


BAD = {
    "unknown strategy": (lambda p, t: ["strategy=nope"], "unknown strategy 'nope'"),
    "unregistered strategy name": (lambda p, t: ["strategy.name=nope"], "unknown strategy 'nope'"),
    "non-numeric budget": (lambda p, t: ["budget=lots"], "not numeric"),
    "budget with unknown unit": (lambda p, t: ["budget=12parsecs"], "unknown unit"),
    "fractional bytes": (lambda p, t: ["budget=1.5"], "neither a fraction"),
    "negative budget": (lambda p, t: ["budget=-3"], "positive"),
    "budget below constant overhead": (lambda p, t: [f"graph={_with_constant(t / 'c.json')}", "budget=1000"],
                                       "constant overhead"),
    "cyclic graph": (lambda p, t: [f"graph={_cyclic(t / 'cyc.json')}"], "not a DAG"),
    "malformed graph file": (lambda p, t: [f"graph={_write(t / 'bad.json', '{nodes: [')}"], "not valid JSON"),
    "missing graph file": (lambda p, t: [f"graph={t / 'absent.json'}"], "does not exist"),
    "no graph at all": (lambda p, t: ["graph=null"], "no graph given"),
    "unknown platform": (lambda p, t: ["platform=tpu"], "unknown platform 'tpu'"),
    "training a graph file": (lambda p, t: ["strategy=checkpoint_all", "train.steps=2"], "needs model="),
}
BAD["training on the Keras reference graph"] = (
    lambda p, t: ["graph=null", "model=mobilenet", "cost_model=reference", "train.steps=2"], "use frontend=torch")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def bad_runs(graph_file: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, tuple]]:
    """Start every bad-input run at once (each is a separate Python start-up) and collect the results."""
    procs = {}
    for case, (make, _) in BAD.items():
        tmp = tmp_path_factory.mktemp(case.replace(" ", "_"))
        args = make(graph_file, tmp)
        if not any(a.startswith("graph=") for a in args):
            args = [f"graph={graph_file}", *args]
        out = tmp / "out"
        cmd = [sys.executable, str(ROOT / "run.py"), *args, f"hydra.run.dir={out}", "mlflow.enabled=false"]
        procs[case] = (out, subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return {case: (out, (p.wait(timeout=120), *p.communicate())) for case, (out, p) in procs.items()}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_one_line_nonzero_nothing_written(case: str, bad_runs: dict) -> None:
    expected = BAD[case][1]
    out, (code, _stdout, stderr) = bad_runs[case]
    assert code != 0
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ") and "Traceback" not in stderr
    if expected:
        assert expected in lines[0]
    assert not out.exists(), f"{case}: left {list(out.rglob('*'))}"


def test_summary_row_matches_simulation_for_every_strategy_in_process(graph_file: Path) -> None:
    # In-process (fast): the adapter passes solver options only where accepted and rows agree with simulate().
    from experiments.solving import result_row, solve_cell

    graph = random_training_graph(7, seed=3)
    budget = 10.0 * no_recompute_peak(graph)  # room for checkpoint_last's peak too
    solver = {"backend": "highs", "time_limit": 20, "mip_gap": 0.0, "threads": 1}
    for name in ("checkpoint_all", "checkpoint_last", "ilp"):
        result = solve_cell(graph, name, budget, solver)
        row = result_row(graph, result, budget_spec=1.0, solver=solver, seed=0, context={})
        assert row["status"] in ("optimal", "feasible")
        sim = simulate(graph, result.schedule)
        assert row["cost"] == pytest.approx(sim.cost) and row["peak_memory"] == pytest.approx(sim.peak_memory)
        assert np.isclose(row["overhead"], sim.cost / graph.total_cost)
        assert (row["solver"] == "highs") == (name == "ilp")
