"""Shared helpers for the benchmark scripts: graph selection, Markdown tables, raw rows with their command,
and the re-check of an answer by ``simulate()`` before a benchmark counts it."""

from __future__ import annotations

import csv
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from remat.generators import linear_chain
from remat.graph import DFGraph
from remat.graph.reference import REFERENCE_GRAPHS, load_reference_graph, reference_graphs_available
from remat.result import SolveResult, Status, relative_gap
from remat.schedule import simulate


def benchmark_graphs(names: Sequence[str]) -> list[DFGraph]:
    """Graphs by name: ``linearL`` for the paper's chain of L layers, else a reference graph."""
    graphs = []
    for name in names:
        if name.startswith("linear"):
            graphs.append(linear_chain(int(name[len("linear"):])))
        elif reference_graphs_available():
            graphs.append(load_reference_graph(name))
        else:
            print(f"skipping {name}: reference graphs not found (set REMAT_GRAPHS_DIR)")
    return graphs


DEFAULT_GRAPHS = ("linear8", "linear16", "linear32", "linear64", *REFERENCE_GRAPHS)


def fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.4e}"
    return str(value)


def markdown_table(rows: list[dict], columns: Sequence[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------- raw rows and the command that made them
RESULTS_DIR = Path(__file__).resolve().parent.parent / "results" / "benchmarks"


def command_line(script: str) -> str:
    """The exact command this process runs, as one would type it from the repository root."""
    return shlex.join(["python", f"benchmarks/{script}", *sys.argv[1:]])


def run_metadata(script: str) -> dict:
    """What a reader needs to trust a CSV: the command, the commit, the machine and its load."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                    capture_output=True, text=True, check=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = "unknown", False
    return {"command": command_line(script), "commit": commit + ("+dirty" if dirty else ""),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "cpus": os.cpu_count(),
            "load_average_start": [round(x, 2) for x in os.getloadavg()],
            "python": sys.version.split()[0]}


class RowWriter:
    """Writes ``rows`` to ``path`` (CSV) and the run's metadata beside it (``.json``) after every row.

    Rewriting the whole file after each cell keeps every finished cell of a run that is stopped part way.
    """

    def __init__(self, path: str | Path, columns: Sequence[str], script: str) -> None:
        self.path = Path(path)
        self.columns = list(columns)
        self.meta = run_metadata(script)
        self.rows: list[dict] = []
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._flush()

    def add(self, row: dict) -> None:
        self.rows.append(row)
        self._flush()

    def finish(self) -> None:
        self.meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
        self.meta["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        self._flush()

    def _flush(self) -> None:
        extra = sorted({k for r in self.rows for k in r} - set(self.columns))
        with self.path.open("w", newline="") as f:
            writer = csv.DictWriter(f, self.columns + extra)
            writer.writeheader()
            for row in self.rows:
                writer.writerow({k: _csv_value(v) for k, v in row.items()})
        self.meta["rows"] = len(self.rows)
        self.path.with_suffix(".json").write_text(json.dumps(self.meta, indent=1) + "\n")


def _csv_value(value: object) -> object:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return repr(value) if isinstance(value, float) else value


# ---------------------------------------------------------------------- re-checking an answer with simulate()
def recheck(graph: DFGraph, budget: float, result: SolveResult, mip_gap: float, proof: str) -> tuple[str, str]:
    """What ``result`` certifies once its schedule is simulated again: ``("optimal" | "infeasible" | "", note)``.

    "optimal" needs a schedule valid under ``simulate()``, within the budget, whose simulated cost is within
    ``mip_gap`` of the reported lower bound; "infeasible" needs a ``proof`` (a schedule over the budget, which
    is how a solver's slightly infeasible incumbent comes back, proves nothing). The note says why a claim
    failed the check.
    """
    if result.status == Status.INFEASIBLE:
        if proof:
            return "infeasible", ""
        return "", f"infeasible without a proof ({result.message})"
    if result.schedule is None:
        return "", ""
    sim = simulate(graph, result.schedule, plan=False)
    if not sim.valid:
        return "", f"schedule fails simulate(): {sim.violation}"
    if not sim.within(budget):
        return "", f"schedule needs {sim.peak_memory:.6g} B over the budget {budget:.6g} B"
    if not math.isclose(sim.cost, result.cost, rel_tol=1e-9, abs_tol=1e-9):
        return "", f"reported cost {result.cost:.9g} but simulate() gives {sim.cost:.9g}"
    if result.status != Status.OPTIMAL:
        return "", ""
    gap = relative_gap(sim.cost, result.lower_bound)
    if gap is None or gap > mip_gap + 1e-9:
        return "", f"'optimal' but the simulated cost is {gap} above the bound (gap asked: {mip_gap})"
    return "optimal", ""


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")
