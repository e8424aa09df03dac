"""accounting=ours|paper in the experiments: which graph, budget and baselines a cell sees, and how rows say so."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from remat.generators import linear_chain
from remat.graph.reference import reference_graphs_available
from remat.paper import ARTIFACT_BASELINES, PAPER_PLATFORM_MEMORY, REFERENCE_PARAMETER_BYTES

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from experiments.common import InputError, read_rows, write_rows  # noqa: E402


def compose(results: Path, *overrides: str):  # type: ignore[no-untyped-def]
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose("config", overrides=[f"paths.results={results}", "mlflow.enabled=false", *overrides])


@pytest.fixture()
def chain_file(tmp_path: Path) -> Path:
    """A 6-layer chain in Checkmate's Keras layout with 40 bytes of parameters (+ gradients) and no inputs."""
    g = linear_chain(6)
    rng = np.random.default_rng(5)
    g = replace(g, memory=rng.integers(5, 20, g.n), cost=rng.integers(1, 9, g.n).astype(float), name="chain6",
                constant_memory=80, batch_size=4)
    path = tmp_path / "chain6.json"
    g.save(path)
    return path


def test_paper_cells_use_the_artifact_baselines_and_budgets(tmp_path: Path, chain_file: Path) -> None:
    from experiments.sweep import run_grid
    from remat.graph import load_graph

    cfg = compose(tmp_path, "experiment=budget_sweep", "experiment.profile=null", f"experiment.graphs=[{chain_file}]",
                  "experiment.strategies=[checkpoint_all,linearized_greedy,ilp]", "experiment.budgets=[300,span:0.5]",
                  "experiment.accountings=[ours,paper]", "experiment.time_limit=30")
    rows = {(r["accounting"], r["strategy"], r["budget_spec"]): r for r in read_rows(run_grid(cfg))}
    assert len(rows) == 12
    # 300 bytes of device: ours gives it all (the graph's 80 constant bytes inside U); the paper's gives 300 - 2 x 40
    # to a graph without constant overhead.
    assert float(rows[("ours", "ilp", "300")]["budget"]) == 300
    assert float(rows[("paper", "ilp", "300")]["budget"]) == 220
    assert rows[("paper", "ilp", "300")]["constant_memory"] == "0"
    paper_graph = load_graph(chain_file).with_constant_memory(0)
    for spec in ("300", "span:0.5"):
        row = rows[("paper", "linearized_greedy", spec)]
        expected = ARTIFACT_BASELINES["linearized_greedy"](paper_graph, float(row["budget"]))
        assert row["status"] == str(expected.status)
        if expected.has_schedule:
            assert float(row["cost"]) == expected.cost and float(row["peak_memory"]) == expected.peak_memory


def test_an_older_results_file_gains_the_accounting_column(tmp_path: Path, chain_file: Path) -> None:
    from experiments.sweep import run_grid

    old = tmp_path / "budget_sweep.csv"
    write_rows(old, [{"graph": "x", "strategy": "ilp", "status": "optimal"}], ["graph", "strategy", "status"])
    cfg = compose(tmp_path, "experiment=budget_sweep", "experiment.profile=null", f"experiment.graphs=[{chain_file}]",
                  "experiment.strategies=[checkpoint_all]", "experiment.budgets=[1.0]")
    rows = read_rows(run_grid(cfg))
    assert [r["accounting"] for r in rows] == ["ours", "ours"] and rows[1]["status"] == "optimal"


def test_grid_sections_and_accounting_names_are_checked(tmp_path: Path) -> None:
    from experiments.accounting import accounting_config
    from experiments.sweep import settings

    cfg = compose(tmp_path, "experiment=budget_sweep", "experiment.grid=budget_sweep_paper")
    grid = settings(cfg)
    assert grid["grid"] == "budget_sweep_paper" and grid["accountings"] == ["paper"]
    with pytest.raises(InputError, match="experiment.grid='nope' is not a section"):
        settings(compose(tmp_path, "experiment=budget_sweep", "experiment.grid=nope"))
    with pytest.raises(InputError, match="unknown accounting 'gpu'"):
        accounting_config("gpu")
    assert accounting_config("paper")["platform_memory"] == PAPER_PLATFORM_MEMORY


@pytest.mark.reference
@pytest.mark.skipif(not reference_graphs_available(), reason="reference graphs not found")
def test_max_batch_under_both_accountings(tmp_path: Path) -> None:
    from experiments.max_batch import main

    cfg = compose(tmp_path, "experiment=max_batch", "experiment.profile=null", "experiment.graphs=[vgg19]",
                  "experiment.strategies=[checkpoint_all,chen_sqrtn,ilp]", "experiment.accountings=[ours,paper]",
                  "experiment.time_limit=120")
    rows = {(r["accounting"], r["strategy"]): r for r in read_rows(main(cfg, tmp_path))}
    assert {k: int(r["max_batch"]) for k, r in rows.items()} == {
        ("ours", "checkpoint_all"): 257, ("ours", "chen_sqrtn"): 314, ("ours", "ilp"): 334,
        ("paper", "checkpoint_all"): 167, ("paper", "chen_sqrtn"): 197, ("paper", "ilp"): 289}
    P = REFERENCE_PARAMETER_BYTES["vgg19"]
    assert float(rows[("paper", "ilp")]["budget"]) == PAPER_PLATFORM_MEMORY - 2 * P
    assert float(rows[("paper", "chen_sqrtn")]["budget"]) == PAPER_PLATFORM_MEMORY - 4 * P
    assert float(rows[("ours", "ilp")]["budget"]) == 16 * 2**30
