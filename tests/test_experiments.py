"""The experiment suite: budgets, tidy CSV rows, resume, MLflow, Hydra multirun, and each experiment's output."""

from __future__ import annotations

import csv
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from brute_force import BruteForce

from remat.budget import no_recompute_peak
from remat.generators import linear_chain, random_training_graph
from remat.graph.reference import reference_graphs_available
from remat.schedule import simulate

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the experiments/ package sits beside remat/, outside the installed package
    sys.path.insert(0, str(ROOT))

from experiments.common import (  # noqa: E402
    InputError,
    append_row,
    done_keys,
    parse_budget_spec,
    read_rows,
    resolve_budget,
    row_key,
)
from experiments.solving import CELL_KEY  # noqa: E402

needs_reference = pytest.mark.skipif(
    not reference_graphs_available(), reason="reference graphs absent (set REMAT_GRAPHS_DIR or ../shared/data/graphs)"
)


@pytest.fixture(scope="module")
def mlflow_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty MLflow SQLite store, created once: its schema migrations take seconds, a file copy does not."""
    import mlflow

    path = tmp_path_factory.mktemp("mlflow") / "template.db"
    mlflow.set_tracking_uri(f"sqlite:///{path}")
    mlflow.search_experiments()
    return path


def fresh_store(template: Path, results: Path) -> None:
    results.mkdir(parents=True, exist_ok=True)
    shutil.copy(template, results / "m.db")


def compose(results: Path, *overrides: str):  # type: ignore[no-untyped-def]
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose("config", overrides=[f"paths.results={results}", f"mlflow.uri=sqlite:///{results}/m.db",
                                                  f"mlflow.artifacts={results}/mla", *overrides])


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("g") / "rand6.json"
    random_training_graph(6, seed=5).save(path)
    return path


# ---------------------------------------------------------------------- budgets
@pytest.mark.parametrize("spec, expected", [
    (0.7, ("fraction", 0.7)), ("1", ("fraction", 1.0)), ("12GB", ("bytes", 12e9)), ("500MiB", ("bytes", 500 * 2**20)),
    ("1.5 GiB", ("bytes", 1.5 * 2**30)), (12000000000, ("bytes", 12e9)), ("2e9", ("bytes", 2e9)),
    ("span:0.25", ("span", 0.25)),
])
def test_parse_budget_spec(spec: object, expected: tuple[str, float]) -> None:
    assert parse_budget_spec(spec) == expected


@pytest.mark.parametrize("spec", ["abc", "", "-1", 0, 1.5, "12 parsecs", "span:2", "span:x", None, True, "nan"])
def test_parse_budget_spec_rejects(spec: object) -> None:
    with pytest.raises(InputError, match="budget"):
        parse_budget_spec(spec)


def test_resolve_budget_fraction_span_and_constant_overhead() -> None:
    from remat.budget import memory_lower_bound

    g = random_training_graph(5, seed=1).with_constant_memory(7)
    peak = no_recompute_peak(g)
    assert resolve_budget(0.5, g) == pytest.approx(0.5 * peak)
    assert resolve_budget("span:0", g) == memory_lower_bound(g)[0]
    assert resolve_budget("span:1", g) == peak
    with pytest.raises(InputError, match="constant overhead"):
        resolve_budget(6, g)


# ---------------------------------------------------------------------- CSV helpers
def test_append_row_and_done_keys_retry_errors(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    cols = ["graph", "budget_spec", "seed", "status", "cost"]
    append_row(path, {"graph": "g", "budget_spec": 0.5, "seed": 0, "status": "optimal", "cost": 3.0}, cols)
    append_row(path, {"graph": "g", "budget_spec": "0.7", "seed": 0, "status": "error", "cost": None}, cols)
    append_row(path, {"graph": "g", "budget_spec": "span:0.1", "seed": 1.0, "status": "time_limit"}, cols)
    rows = read_rows(path)
    assert [r["status"] for r in rows] == ["optimal", "error", "time_limit"] and rows[1]["cost"] == ""
    # Floats and their text compare equal; an "error" cell is not done (it is retried on a re-run).
    assert done_keys(path, ["graph", "budget_spec", "seed"]) == {("g", "0.5", "0"), ("g", "span:0.1", "1")}


def test_append_row_replaces_a_retried_cell(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    cols, key = ["graph", "budget_spec", "status", "cost"], ["graph", "budget_spec"]
    append_row(path, {"graph": "g", "budget_spec": 0.5, "status": "optimal", "cost": 3.0}, cols, replace_key=key)
    append_row(path, {"graph": "g", "budget_spec": 0.7, "status": "error"}, cols, replace_key=key)
    append_row(path, {"graph": "h", "budget_spec": 0.7, "status": "error"}, cols, replace_key=key)
    append_row(path, {"graph": "g", "budget_spec": "0.7", "status": "feasible", "cost": 5.0}, cols, replace_key=key)
    rows = read_rows(path)
    assert [(r["graph"], r["budget_spec"], r["status"]) for r in rows] == [
        ("g", "0.5", "optimal"), ("h", "0.7", "error"), ("g", "0.7", "feasible")]
    assert path.read_text().count("graph,budget_spec") == 1


# ---------------------------------------------------------------------- sweeps
def test_sweep_rows_resume_and_mlflow(graph_file: Path, tmp_path: Path, mlflow_template: Path) -> None:
    from experiments.sweep import run_grid

    fresh_store(mlflow_template, tmp_path)
    cfg = compose(tmp_path, "experiment=budget_sweep", "experiment.profile=null", f"experiment.graphs=[{graph_file}]",
                  "experiment.strategies=[checkpoint_all,checkpoint_last,chen_greedy,ilp]",
                  "experiment.budgets=[span:0.4,'1.0']", "experiment.time_limit=20")
    out = run_grid(cfg)
    rows = read_rows(out)
    assert len(rows) == 8
    by = {(r["strategy"], r["budget_spec"]): r for r in rows}
    graph = random_training_graph(6, seed=5)
    # checkpoint_all fits only at the full peak; chen_greedy refuses a DAG with skip connections: recorded, not fatal.
    assert by[("checkpoint_all", "1.0")]["status"] == "optimal"
    assert by[("checkpoint_all", "span:0.4")]["status"] == "infeasible"
    assert {by[("chen_greedy", b)]["status"] for b in ("1.0", "span:0.4")} <= {"error", "feasible", "infeasible"}
    for b in ("span:0.4", "1.0"):
        ilp = by[("ilp", b)]
        assert ilp["status"] == "optimal" and ilp["solver"] == "highs" and ilp["time_limit"] == "20"
        assert float(ilp["peak_memory"]) <= float(ilp["budget"]) * (1 + 1e-9)
        assert float(ilp["cost"]) >= graph.total_cost - 1e-9
        assert float(ilp["overhead"]) == pytest.approx(float(ilp["cost"]) / graph.total_cost)
        assert ilp["remat_version"] and ilp["solver_version"] and ilp["torch_version"]
        if by[("checkpoint_last", b)]["status"] == "feasible":
            assert float(ilp["cost"]) <= float(by[("checkpoint_last", b)]["cost"]) + 1e-9
    # Re-run: every finished cell is skipped; an error cell is retried and its row replaced, not duplicated.
    run_grid(cfg)
    errors = sum(r["status"] == "error" for r in rows)
    assert errors >= 1
    rerun = read_rows(out)
    assert len(rerun) == 8 and sorted(row_key(r, CELL_KEY) for r in rerun) == sorted(row_key(r, CELL_KEY) for r in rows)
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/m.db")
    runs = mlflow.search_runs(experiment_names=["budget_sweep"])
    assert len(runs) == 8 + errors
    ilp_runs = runs[runs["params.strategy"] == "ilp"]
    assert len(ilp_runs) == 2 and ilp_runs["metrics.cost"].notna().all() and ilp_runs["metrics.overhead"].ge(1).all()
    assert {"params.budget", "params.cost_model", "params.solver", "metrics.solve_time"} <= set(runs.columns)
    artifacts = list((tmp_path / "mla").rglob("schedule.json"))
    assert len(artifacts) >= 4  # one per cell with a schedule


def test_missing_strategy_fails_clearly_unless_skipped(graph_file: Path, tmp_path: Path) -> None:
    from experiments.common import MissingAPIError
    from experiments.sweep import run_grid

    args = ["experiment=budget_sweep", "experiment.profile=null", f"experiment.graphs=[{graph_file}]",
            "experiment.strategies=[checkpoint_all,no_such_strategy]", "experiment.budgets=['1.0']",
            "mlflow.enabled=false"]
    with pytest.raises(MissingAPIError, match="no_such_strategy"):
        run_grid(compose(tmp_path, *args))
    assert not (tmp_path / "budget_sweep.csv").exists()
    out = run_grid(compose(tmp_path, *args, "experiment.skip_missing=true"))
    assert [r["strategy"] for r in read_rows(out)] == ["checkpoint_all"]


def test_multirun_joblib_appends_one_csv(graph_file: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, str(ROOT / "run.py"), "-m", "hydra/launcher=local", "hydra.launcher.n_jobs=2",
           f"hydra.sweep.dir={tmp_path / 'sweep'}", "experiment=budget_sweep", "experiment.profile=null",
           f"experiment.graphs={graph_file}", "experiment.strategies=checkpoint_all,checkpoint_last",
           "experiment.budgets=['1.0']", f"paths.results={tmp_path}", "mlflow.enabled=false"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_rows(tmp_path / "budget_sweep.csv")
    assert sorted(r["strategy"] for r in rows) == ["checkpoint_all", "checkpoint_last"]


@needs_reference
def test_quick_sweep_on_a_reference_graph_end_to_end(tmp_path: Path, mlflow_template: Path) -> None:
    """2 strategies x 2 budgets on vgg16 through run.py: CSV rows, MLflow runs and a figure with content."""
    fresh_store(mlflow_template, tmp_path)
    cmd = [sys.executable, str(ROOT / "run.py"), "experiment=budget_sweep", "experiment.profile=null",
           "experiment.graphs=[vgg16]", "experiment.strategies=[checkpoint_all,ilp]",
           "experiment.budgets=[span:0.5,span:1.0]", "experiment.time_limit=30", f"paths.results={tmp_path}",
           f"mlflow.uri=sqlite:///{tmp_path}/m.db", f"mlflow.artifacts={tmp_path}/mla",
           f"hydra.run.dir={tmp_path}/run"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {(r["strategy"], r["budget_spec"]): r for r in read_rows(tmp_path / "budget_sweep.csv")}
    assert len(rows) == 4
    assert rows[("checkpoint_all", "span:1.0")]["status"] == "optimal"
    assert rows[("checkpoint_all", "span:0.5")]["status"] == "infeasible"
    assert rows[("ilp", "span:0.5")]["status"] in ("optimal", "feasible")
    assert 1.0 <= float(rows[("ilp", "span:0.5")]["overhead"]) < 1.5
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/m.db")
    assert len(mlflow.search_runs(experiment_names=["budget_sweep"])) == 4
    proc = subprocess.run([sys.executable, "-m", "analysis", "fig5", "--results", str(tmp_path),
                           "--mlflow-uri", f"sqlite:///{tmp_path}/m.db"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "figures" / "fig5_budget_sweep.png").stat().st_size > 10_000
    figure_runs = mlflow.search_runs(experiment_names=["analysis"])
    assert len(figure_runs) == 1 and len(list(tmp_path.rglob("mlartifacts/**/fig5_budget_sweep.pdf"))) == 1
    from analysis.figures import fig5_budget_sweep

    ax = fig5_budget_sweep(tmp_path, tmp_path / "figs").axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert 2 <= len(lines["Checkmate ILP"].get_xdata()) <= 3  # its two schedules' peaks (if both lower it) + edge
    assert len(lines["Checkpoint all"].get_xdata()) == 2  # one point, then flat


# ---------------------------------------------------------------------- other experiments
def test_integrality_gap_partitioned_vs_unpartitioned(tmp_path: Path) -> None:
    from experiments.integrality_gap import main

    cfg = compose(tmp_path, "experiment=integrality_gap", "experiment.profile=null", "experiment.layers=3",
                  "experiment.budgets=[3,4]", "experiment.time_limit=5", "mlflow.enabled=false")
    rows = read_rows(main(cfg, tmp_path))
    assert [(r["variant"], r["budget"]) for r in rows] == [("partitioned", "3.0"), ("unpartitioned", "3.0"),
                                                            ("partitioned", "4.0"), ("unpartitioned", "4.0")]
    oracle = BruteForce(linear_chain(3))
    for r in rows:
        if r["ilp_status"] == "optimal":
            assert float(r["lp_value"]) <= float(r["ilp_cost"]) + 1e-6
        # Every row's optimum is proved here, equals brute force's (on this chain dropping the partition does
        # not lower it), and the gap printed is that optimum over the LP bound.
        assert r["optimum_proof"] != "open" and r["lp_status"] == "optimal", r
        assert float(r["optimum"]) == pytest.approx(oracle.solve(float(r["budget"]))[0])
        assert float(r["integrality_gap"]) == pytest.approx(float(r["optimum"]) / float(r["lp_value"]))
        assert float(r["pebbling_bound"]) <= float(r["optimum"]) + 1e-9
    for a, b in zip(rows[::2], rows[1::2]):  # dropping frontier-advancing can only lower the optimum
        if a["ilp_status"] == b["ilp_status"] == "optimal":
            assert float(b["ilp_cost"]) <= float(a["ilp_cost"]) + 1e-6
        assert int(b["variables"]) > int(a["variables"])
        assert float(b["lp_value"]) < float(a["lp_value"])  # the unpartitioned LP is far weaker (App. A)
        # On the linear chain the pebble game meets the partitioned optimum: both variants' optima are proved equal.
        assert a["optimum_proof"] == "milp" and b["optimum"] == a["optimum"]


def readme_integrality_gaps() -> tuple[int, float, float, float]:
    """The README's line: layers, budget, partitioned gap, unpartitioned gap."""
    import re

    line = re.search(r"Integrality gap on the (\d+)-layer chain at budget ([\d.]+): ([\d.]+) partitioned vs "
                     r"([\d.]+) unpartitioned", (ROOT / "README.md").read_text())
    assert line, "README's integrality-gap line not found"
    return int(line[1]), float(line[2]), float(line[3]), float(line[4])


def test_readme_partitioned_integrality_gap_is_the_milp_optimum_over_its_lp() -> None:
    from remat.milp.plain import solve_ilp, solve_lp_relaxation

    layers, budget, partitioned, _ = readme_integrality_gaps()
    g = linear_chain(layers)
    ilp = solve_ilp(g, budget, mip_gap=1e-6)
    milp, lp = solve_lp_relaxation(g, budget)
    assert ilp.status == "optimal" and lp.status == "optimal"
    assert partitioned == round(ilp.cost / milp.cost(lp.objective), 2)  # 26 / 22 on the 8-layer chain


def test_readme_unpartitioned_integrality_gap_is_at_most_the_partitioned_optimum_over_its_lp() -> None:
    from remat.milp.plain import solve_ilp, solve_lp_relaxation

    layers, budget, _, unpartitioned = readme_integrality_gaps()
    g = linear_chain(layers)
    # Every frontier-advancing schedule is a schedule of the unpartitioned model: its optimum is at most this.
    partitioned = solve_ilp(g, budget, mip_gap=1e-6)
    milp, lp = solve_lp_relaxation(g, budget, partitioned=False)
    assert partitioned.status == "optimal" and lp.status == "optimal"
    assert unpartitioned <= partitioned.cost / milp.cost(lp.objective) + 0.005
    quoted = [r for r in read_rows(ROOT / "results" / "integrality_gap.csv")
              if r["variant"] == "unpartitioned" and float(r["budget"]) == budget]
    # A ratio only against a proved optimum, and the README's is the committed row's.
    assert quoted and all(r["optimum_proof"] != "open" for r in quoted)
    assert unpartitioned == round(float(quoted[0]["integrality_gap"]), 2)


def test_schedules_saves_matrices_and_memory_timeline(graph_file: Path, tmp_path: Path) -> None:
    from experiments.schedules import main

    cfg = compose(tmp_path, "experiment=schedules", "experiment.profile=null", f"experiment.graphs=[{graph_file}]",
                  "experiment.strategies=[checkpoint_all,ilp]", "experiment.budgets=[span:0.5]",
                  "experiment.time_limit=20", "mlflow.enabled=false")
    rows = read_rows(main(cfg, tmp_path))
    graph = random_training_graph(6, seed=5)
    files = sorted((tmp_path / "schedules").glob("*.npz"))
    assert len(files) == 2
    for path in files:
        data = np.load(path)
        from remat.schedule import Schedule

        sim = simulate(graph, Schedule(data["R"], data["S"]))
        strategy = path.stem.split("__")[1]
        timeline = [r for r in rows if r["strategy"] == strategy]
        assert len(timeline) == int(data["R"].sum())  # one step per computed node
        assert max(float(r["memory"]) for r in timeline) == pytest.approx(sim.peak_memory)
        assert float(timeline[-1]["cost_cum"]) == pytest.approx(sim.cost)
    peak = {s: max(float(r["memory"]) for r in rows if r["strategy"] == s) for s in ("checkpoint_all", "ilp")}
    assert peak["ilp"] <= float(rows[0]["budget"]) < peak["checkpoint_all"]


def test_max_batch_runs_or_names_the_missing_api(graph_file: Path, tmp_path: Path) -> None:
    from experiments.common import MissingAPIError
    from experiments.max_batch import main

    cfg = compose(tmp_path, "experiment=max_batch", "experiment.profile=null", f"experiment.graphs=[{graph_file}]",
                  "experiment.strategies=[checkpoint_all]", "experiment.platforms=[cpu]", "mlflow.enabled=false")
    try:
        import remat.maxbatch.search  # noqa: F401
    except ImportError:
        with pytest.raises(MissingAPIError, match="max_batch_size"):
            main(cfg, tmp_path)
        return
    rows = read_rows(main(cfg, tmp_path))
    assert rows and rows[0]["status"] in ("optimal", "feasible", "infeasible") and rows[0]["platform"] == "cpu"


def test_max_batch_total_time_limit_records_an_open_search_as_time_limit(graph_file: Path, tmp_path: Path) -> None:
    from experiments.max_batch import main

    cfg = compose(tmp_path, "experiment=max_batch", "experiment.profile=null", f"experiment.graphs=[{graph_file}]",
                  "experiment.strategies=[checkpoint_all]", "experiment.platforms=[cpu]", "mlflow.enabled=false",
                  "experiment.total_time_limit=1e-9")
    row = read_rows(main(cfg, tmp_path))[0]
    assert row["status"] == "time_limit" and "total time limit" in row["message"] and int(row["max_batch"]) >= 1


@pytest.mark.slow
def test_activation_memory_table_written(tmp_path: Path) -> None:
    from experiments.activation_memory import main

    cfg = compose(tmp_path, "experiment=activation_memory", "experiment.profile=null", "experiment.models=[mobilenet]")
    with open(main(cfg, tmp_path)) as f:
        rows = list(csv.DictReader(f))
    assert [r["model"] for r in rows] == ["mobilenet"]
    assert int(rows[0]["activation_bytes"]) > 10 * int(rows[0]["parameter_bytes"]) > 0  # Fig. 3's point
    assert math.isclose(float(rows[0]["platform_memory"]), 16 * 2**30)


@pytest.mark.slow
def test_submitit_local_launcher_runs_each_sweep_point(graph_file: Path, tmp_path: Path) -> None:
    """The cluster launcher's local mode (same code path as hydra/launcher=slurm, minus SLURM)."""
    cmd = [sys.executable, str(ROOT / "run.py"), "-m", "hydra/launcher=submitit_local", f"graph={graph_file}",
           "strategy=checkpoint_all,ilp", "budget=1.0", "record=sub", f"paths.results={tmp_path}",
           f"hydra.sweep.dir={tmp_path / 'sweep'}", "mlflow.enabled=false"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = read_rows(tmp_path / "sub.csv")
    assert sorted((r["strategy"], r["status"]) for r in rows) == [("checkpoint_all", "optimal"), ("ilp", "optimal")]
    assert len(list((tmp_path / "sweep").rglob("schedule.json"))) == 2


def test_a_crashing_strategy_is_recorded_and_the_sweep_carries_on(graph_file: Path, tmp_path: Path) -> None:
    from experiments.sweep import run_grid
    from remat.strategies import STRATEGIES, register

    def crash(graph, budget, **_):  # type: ignore[no-untyped-def]
        raise TypeError("a bug inside a strategy")

    register("crash_for_test", crash)
    try:
        cfg = compose(tmp_path, "experiment=budget_sweep", "experiment.profile=null",
                      f"experiment.graphs=[{graph_file}]", "experiment.strategies=[crash_for_test,checkpoint_all]",
                      "experiment.budgets=['1.0']", "mlflow.enabled=false")
        rows = read_rows(run_grid(cfg))
    finally:
        STRATEGIES.pop("crash_for_test")
    assert [(r["strategy"], r["status"]) for r in rows] == [("crash_for_test", "error"), ("checkpoint_all", "optimal")]
    assert "TypeError: a bug inside a strategy" in rows[0]["message"]
