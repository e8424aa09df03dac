"""The benchmarks count only what they re-checked, and the README's numbers are the ones their raw rows give."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.budget import memory_lower_bound, no_recompute_peak
from remat.generators import linear_chain, random_training_graph
from remat.milp.certified import solve_ilp_certified
from remat.milp.plain import solve_ilp
from remat.result import SolveResult, Status, result_from_schedule
from remat.schedule import Schedule, simulate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import report  # noqa: E402
import solve_reference_graphs as srg  # noqa: E402
from common import recheck  # noqa: E402


def rows_of(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_the_readme_shows_what_the_committed_rows_say():
    lines = report.report(ROOT / "results" / "benchmarks")
    assert lines, "no benchmark rows committed under results/benchmarks/"
    readme = (ROOT / "README.md").read_text()
    assert report.with_block(readme, lines) == readme, (
        "README's benchmark lines differ from results/benchmarks/: run python benchmarks/report.py --write-readme "
        "README.md")


def test_a_short_benchmark_run_writes_rows_and_command_and_counts_only_agreeing_cells(tmp_path):
    out = tmp_path / "solve_reference_graphs_tiny.csv"
    cmd = [sys.executable, "benchmarks/solve_reference_graphs.py", "--graphs", "linear8", "--fractions", "0.9", "0.3",
           "0.1", "--time-limit", "30", "--output", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {float(r["budget"]): r for r in rows_of(out)}
    assert rows[0.9]["outcome"] == rows[0.3]["outcome"] == "both"
    assert rows[0.9]["certified"] == rows[0.9]["plain_certified"] == "optimal"
    assert float(rows[0.3]["plain_obj"]) == pytest.approx(float(rows[0.3]["overhead"]), rel=1e-4)
    # Both run the memory-bound check, so the infeasible cell is a tie, not a 1000x win.
    assert rows[0.1]["outcome"] == "tie" and float(rows[0.1]["speedup"]) == 1.0
    assert rows[0.1]["proof"] == rows[0.1]["plain_proof"] == srg.MEMORY_BOUND
    assert all(r["incumbents_wrong"] == "0" for r in rows.values())
    meta = report.read_run(out)[1]
    assert meta["command"] == "python benchmarks/solve_reference_graphs.py " + " ".join(cmd[2:]) and meta["finished"]
    line = " ".join(report.report(tmp_path)[0].split())  # the report wraps its lines
    assert "3 of 3 cells certified by the pipeline" in line and "2 both certify and agree" in line
    assert "1 decided by the memory-bound check both run" in line and "0 disagree" in line


def test_ilp_scaling_times_the_milp_alone(tmp_path):
    out = tmp_path / "ilp_scaling.csv"
    proc = subprocess.run([sys.executable, "benchmarks/ilp_scaling.py", "--graphs", "linear8", "--fractions", "0.9",
                           "0.1", "--time-limit", "30", "--output", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    high, low = rows_of(out)
    assert high["certified"] == "optimal" and high["memory_bound_infeasible"] == "False"
    # Below the memory bound the MILP itself proves infeasibility (no shortcut), and the row says so.
    assert low["certified"] == "infeasible" and low["memory_bound_infeasible"] == "True" and low["variables"]


# ---------------------------------------------------------------------- what counts as certified
def test_an_infeasible_answer_needs_a_proof():
    g = linear_chain(6)
    over = result_from_schedule("ilp_plain", g, checkpoint_all_schedule(g), 0.5 * no_recompute_peak(g),
                                status=Status.OPTIMAL)
    assert over.status == Status.INFEASIBLE and over.min_feasible_budget is not None  # an over-budget incumbent
    assert srg.plain_proof(over) == ""
    assert recheck(g, over.budget, over, 1e-4, srg.plain_proof(over))[0] == ""
    proved = solve_ilp(g, 1.0)
    assert srg.plain_proof(proved) == srg.MEMORY_BOUND and recheck(g, 1.0, proved, 1e-4, srg.MEMORY_BOUND)[0]


def test_an_optimal_claim_is_simulated_again():
    g = random_training_graph(4, 1)
    budget = 35  # between the least budget (28) and the no-recomputation peak (42)
    good = solve_ilp_certified(g, budget, mip_gap=1e-4)
    assert good.status == Status.OPTIMAL and recheck(g, budget, good, 1e-4, "") == ("optimal", "")
    # The same schedule with a bound far below its cost is not "optimal", whatever its status says.
    loose = SolveResult("x", Status.OPTIMAL, budget, good.schedule, good.simulation, lower_bound=0.5 * good.cost)
    verdict, note = recheck(g, budget, loose, 1e-4, "")
    assert verdict == "" and "above the bound" in note
    # A reported cost that is not the schedule's is caught.
    other = simulate(g, checkpoint_all_schedule(g))
    wrong = SolveResult("x", Status.OPTIMAL, budget, good.schedule, other, lower_bound=other.cost)
    assert "simulate() gives" in recheck(g, budget, wrong, 1e-4, "")[1]


def test_answers_that_contradict_each_other_are_a_disagreement():
    g = random_training_graph(4, 1)
    budget = no_recompute_peak(g) - 1
    pipe = solve_ilp_certified(g, budget, mip_gap=1e-4)
    plain = solve_ilp(g, budget, mip_gap=1e-4)
    assert srg.agreement(plain, "optimal", pipe, "optimal") == ""
    infeasible = SolveResult("ilp", Status.INFEASIBLE, budget, stats={"proof": "test"})
    assert "proves infeasible" in srg.agreement(plain, "optimal", infeasible, "infeasible")
    dearer = result_from_schedule("ilp", g, checkpoint_all_schedule(g), 1e12, status=Status.OPTIMAL)
    dearer.lower_bound = dearer.cost
    assert "bound" in srg.agreement(plain, "optimal", dearer, "optimal")


def test_incumbents_taken_on_a_claimed_cost_are_recorded_and_checked():
    g = random_training_graph(5, 2)
    lo, hi = memory_lower_bound(g)[0], no_recompute_peak(g)
    budget = lo + 0.3 * (hi - lo)
    import remat.milp.certified as certified

    with srg.recorded_incumbents() as claims:
        result = certified.solve_ilp_certified(g, budget, mip_gap=1e-4)
    assert certified.Incumbent is srg.Incumbent  # restored
    assert result.has_schedule and claims and srg.wrong_claims(g, budget, claims) == []
    schedule = claims[0][0]
    cost = simulate(g, schedule, plan=False).cost
    assert srg.wrong_claims(g, budget, [(schedule, cost - 1, "test")])  # a claim cheaper than simulate() says
    tiny = Schedule(np.eye(g.n, dtype=bool), np.tril(np.ones((g.n, g.n), bool), -1))  # checkpoint-all
    assert srg.wrong_claims(g, 1.0, [(tiny, simulate(g, tiny).cost, "test")])  # over the budget
