"""Our numbers next to the paper's (Checkmate, MLSys 2020), each difference with its measured cause.

The paper's values are quoted from ``shared/seeds/checkmate-paper.txt``: Table 2
(approximation ratios), §6.4 and the captions of Fig. 6 and Fig. 7 (maximum batch
sizes), Fig. 5's caption (U-Net at the 16 GB V100 budget) and App. A (integrality
gaps). Values the paper states only through a ratio are marked "implied". Three
columns of ours: ``ours`` (our accounting), ``paper accounting`` (the same
experiment under ``accounting=paper``: :mod:`remat.paper`), and ``cause``: why
``ours`` differs from the paper (more than 3 %), found by measurement (README,
"Reproducing the paper"), and whether the paper's accounting reproduces it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.data import MissingResults, latest_cells, read, with_schedule
from analysis.figures import SWEEP_KEY, ours
from analysis.style import label
from analysis.tables import table2_approx_ratio, write

# Table 2, by reference-graph short name and strategy.
PAPER_TABLE2 = {
    ("mobilenet", "ap_sqrtn"): 1.14, ("mobilenet", "ap_greedy"): 1.07, ("mobilenet", "griewank_logn"): 7.07,
    ("mobilenet", "approx_lp_deterministic"): 1.06,
    ("vgg16", "ap_sqrtn"): 1.28, ("vgg16", "ap_greedy"): 1.06, ("vgg16", "griewank_logn"): 1.44,
    ("vgg16", "approx_lp_deterministic"): 1.01,
    ("vgg19", "ap_sqrtn"): 1.54, ("vgg19", "ap_greedy"): 1.39, ("vgg19", "griewank_logn"): 1.75,
    ("vgg19", "approx_lp_deterministic"): 1.00,
    ("vgg_unet", "ap_sqrtn"): 1.27, ("vgg_unet", "ap_greedy"): 1.23, ("vgg_unet", "approx_lp_deterministic"): 1.03,
    ("resnet50", "ap_sqrtn"): 1.20, ("resnet50", "ap_greedy"): 1.25, ("resnet50", "approx_lp_deterministic"): 1.05,
}
# The artifact's Table 2 "AP greedy" ran Chen's greedy over every forward node (its CHEN_GREEDY sweep); on the VGG
# chains that is our chen_greedy, which the paper-accounting grid runs.
PAPER_GRID_STRATEGY = {"ap_sqrtn": "ap_sqrtn", "ap_greedy": "chen_greedy", "griewank_logn": "griewank_logn"}
# §6.4 / Fig. 6 / Fig. 7: (graph, what) -> (paper value, where it is stated).
PAPER_MAX_BATCH = {
    ("mobilenet", "ilp / checkpoint_all"): (5.1, "§6.4, Fig. 6 caption"),
    ("mobilenet", "ilp / best baseline"): (1.73, "§6.4 (a greedy heuristic)"),
    ("vgg_unet", "ilp / best baseline"): (1.73, "Fig. 6 caption"),
    ("vgg19", "checkpoint_all"): (167, "Fig. 7 caption"),
    ("vgg19", "chen_sqrtn"): (197, "Fig. 7 caption"),
    ("vgg19", "chen_greedy"): (266, "artifact README"),
    ("vgg19", "ilp"): (289, "Fig. 7 caption"),
    ("vgg_unet", "ilp"): (61, "§6.4"),
    ("mobilenet", "ilp"): (1105, "§6.4 (a lower bound: one-day limit)"),
    ("mobilenet", "checkpoint_all"): (1105 / 5.1, "implied: 1105 / 5.1"),
    ("mobilenet", "linearized_greedy"): (1105 / 1.73, "implied: 1105 / 1.73"),
}
# Fig. 5 caption: U-Net at the 16 GB budget, baseline overhead / Checkmate overhead.
PAPER_UNET_SPEEDUP = {"linearized_greedy": 1.20, "linearized_sqrtn": 1.38}
# App. A: the 8-layer chain at budget 4.
PAPER_INTEGRALITY = {"unpartitioned": 21.56, "partitioned": 1.18}

GB_PARAMS = ("16 GiB vs the artifact's 16e9 B, and the artifact kept parameter memory out of U and took 2P off the "
             "budget (4P for its max-batch baselines)")
ARTIFACT_S = ("the artifact's baselines keep every checkpoint to the end of the schedule and a segment's values and "
              "gradients through its backward pass (ours: until the last reader)")
# Why our number differs from the paper's, by (metric key, graph): what the runs of README "Reproducing the paper" show.
CAUSES = {
    ("table2", "vgg19", "ap_greedy"): "not reproduced: VGG19's costs. With the artifact's baselines and ratio "
    "(paper accounting) VGG16 reproduces but VGG19 gives 1.15 to 1.26 by budget grid (its own grid: 1.15), FLOP "
    "costs 1.10; the reference file's VGG19 costs are an unlabelled profile (forward slower than backward, "
    "block1_conv1 23 % of the step), not the V100 profile the paper used, which left with the artifact's S3 bucket",
    ("table2", "vgg19", "griewank_logn"): "not reproduced: VGG19's costs, as for AP greedy (artifact method 1.47 to "
    "1.58 by grid, FLOP costs 1.34); the artifact's revolve tables are gone too",
    ("max_batch", "mobilenet", "ilp / checkpoint_all"): "matches by accident: " + GB_PARAMS + "; under the paper's "
    "accounting checkpoint all is 215 (paper 1105 / 5.1 = 217) but our ILP proves 1231, above the paper's "
    "time-limited 1105",
    ("max_batch", "mobilenet", "ilp / best baseline"): GB_PARAMS + "; " + ARTIFACT_S + ". Paper accounting: greedy "
    "640 = 1105 / 1.73, reproduced; the "
    "ratio is higher because our ILP proves 1231 where the paper's one-day search reached 1105",
    ("max_batch", "vgg_unet", "ilp / best baseline"): GB_PARAMS + "; " + ARTIFACT_S + ": reproduced under the "
    "paper's accounting (61 / 35)",
    ("max_batch", "vgg19", "checkpoint_all"): GB_PARAMS + "; " + ARTIFACT_S + ": reproduced",
    ("max_batch", "vgg19", "chen_sqrtn"): GB_PARAMS + "; " + ARTIFACT_S + ": reproduced",
    ("max_batch", "vgg19", "chen_greedy"): GB_PARAMS + "; " + ARTIFACT_S + ": reproduced",
    ("max_batch", "vgg19", "ilp"): "16 GiB vs 16e9 B less 2P of parameter memory: reproduced",
    ("max_batch", "vgg_unet", "ilp"): "16 GiB vs 16e9 B less 2P of parameter memory: reproduced",
    ("max_batch", "mobilenet", "ilp"): "not reproducible: the paper's 1105 is a one-day incumbent (its text says "
    "a lower bound); under its accounting our search proves 1231 optimal (1232 infeasible)",
    ("max_batch", "mobilenet", "checkpoint_all"): GB_PARAMS + "; " + ARTIFACT_S + ": reproduced",
    ("max_batch", "mobilenet", "linearized_greedy"): GB_PARAMS + "; " + ARTIFACT_S + ": reproduced",
    ("speedup", "vgg_unet", "linearized_greedy"): ARTIFACT_S + "; its reporting simulator freed unread values at "
    "stage start (a schedule transform here): reproduced at 16 GB - 2P",
    ("speedup", "vgg_unet", "linearized_sqrtn"): ARTIFACT_S + ": reproduced at 16 GB - 2P",
    ("integrality", "linear8", "unpartitioned"): "",
}


def paper_comparison(results: Path, out: Path) -> pd.DataFrame:
    rows: list[dict[str, object]] = []
    notes: list[str] = []
    sections: list[Callable[[Path, Path], list[dict[str, object]]]] = [_table2_rows, _max_batch_rows,
                                                                       _speedup_rows, _integrality_rows]
    for section in sections:
        try:
            rows.extend(section(results, out))
        except MissingResults as exc:
            notes.append(str(exc))
    if not rows:
        raise MissingResults("; ".join(notes) or f"no graph of the paper's tables in {results}: run the quick "
                             f"profile's approx_ratio, max_batch and budget_sweep stages first")
    table = pd.DataFrame(rows)
    table["ours vs paper"] = [_diff(o, p) for o, p in zip(table["ours"], table["paper"], strict=True)]
    if "paper accounting" in table:
        table["paper accounting vs paper"] = [_diff(o, p) for o, p in
                                              zip(table["paper accounting"], table["paper"], strict=True)]
    table["cause"] = [_cause(r) for r in table.to_dict("records")]
    table = table.drop(columns=["key"]).set_index("metric")
    write(table, out, "paper_comparison", "Our numbers next to the paper's (Checkmate, MLSys 2020): differences "
          "over 3 % with their measured cause; 'paper accounting' = the same run under accounting=paper")
    return table


def _diff(ours_value: object, paper: object) -> str:
    if ours_value is None or paper is None or not np.isfinite(float(ours_value)):  # type: ignore[arg-type]
        return "-"
    return f"{100 * (float(ours_value) / float(paper) - 1):+.1f} %"  # type: ignore[arg-type]


def _cause(row: dict[str, object]) -> str:
    cause = CAUSES.get(row["key"], "")  # type: ignore[call-overload]
    within = row["ours vs paper"] != "-" and abs(float(str(row["ours vs paper"]).split()[0])) <= 3
    if within and not cause.startswith("matches"):
        return "within 3 %"
    return cause or "(no cause recorded: investigate)"


def _table2_rows(results: Path, out: Path) -> list[dict[str, object]]:
    table = table2_approx_ratio(results, out)
    artifact = _artifact_ratios(results)
    rows = []
    for (graph, strategy), paper in PAPER_TABLE2.items():
        value = table.loc[label(strategy), graph] if label(strategy) in table.index and graph in table.columns else None
        if value is not None and np.isfinite(value):
            rows.append({"metric": f"Table 2 ratio to ILP, {strategy}", "graph": graph, "ours": float(value),
                         "paper accounting": artifact.get((graph, PAPER_GRID_STRATEGY.get(strategy, ""))),
                         "paper": paper, "key": ("table2", graph, strategy)})
    return rows


def artifact_ratio(ilp: pd.DataFrame, other: pd.DataFrame) -> tuple[float, int] | None:
    """Table 2 as the artifact computed it: step curves of least cost within each peak, compared at every point of
    the ILP's curve where the baseline has a schedule (geometric mean, and how many points)."""
    def curve(points: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        by_peak = points.groupby("peak_memory")["cost"].min().sort_index()
        return by_peak.index.to_numpy(float), np.minimum.accumulate(by_peak.to_numpy(float))

    if ilp.empty or other.empty:
        return None
    ix, iy = curve(ilp)
    bx, by = curve(other)
    ratios = [by[bx <= x].min() / y for x, y in zip(ix, iy, strict=True) if (bx <= x).any()]
    return (float(np.exp(np.mean(np.log(ratios)))), len(ratios)) if ratios else None


def _artifact_ratios(results: Path) -> dict[tuple[str, str], float]:
    try:
        frame = with_schedule(latest_cells(read(results, "approx_ratio_paper"), SWEEP_KEY))
    except MissingResults:
        return {}
    out = {}
    for graph, sub in frame.groupby("graph"):
        ilp = sub[(sub["strategy"] == "ilp") & (sub["status"] == "optimal")]
        for strategy, rows in sub[sub["strategy"] != "ilp"].groupby("strategy"):
            found = artifact_ratio(ilp, rows)
            if found:
                out[(str(graph), str(strategy))] = found[0]
    return out


def _max_batch_rows(results: Path, out: Path) -> list[dict[str, object]]:
    frame = read(results, "max_batch")
    if "accounting" not in frame.columns:
        frame["accounting"] = "ours"
    frame["accounting"] = frame["accounting"].fillna("ours")
    frame = latest_cells(frame, ["graph", "strategy", "solver", "time_limit", "platform", "accounting"])
    best = frame.pivot_table(index=["accounting", "graph"], columns="strategy", values="max_batch", aggfunc="max")
    rows = []
    for (graph, what), (paper, where) in PAPER_MAX_BATCH.items():
        values = {a: _batch_value(best, a, graph, what) for a in ("ours", "paper")}
        if values["ours"] is None and values["paper"] is None:
            continue
        rows.append({"metric": f"max batch, {what} ({where})", "graph": graph, "ours": values["ours"],
                     "paper accounting": values["paper"], "paper": paper, "key": ("max_batch", graph, what)})
    return rows


def _batch_value(best: pd.DataFrame, accounting: str, graph: str, what: str) -> float | None:
    if (accounting, graph) not in best.index:
        return None
    row = best.loc[(accounting, graph)].dropna()
    if " / " not in what:
        return float(row[what]) if what in row.index else None
    if "ilp" not in row.index:
        return None
    others = row.drop(["ilp", "checkpoint_all"], errors="ignore")
    base = row.get("checkpoint_all") if what.endswith("checkpoint_all") else (others.max() if len(others) else None)
    return float(row["ilp"]) / float(base) if base is not None and base > 0 else None


def _speedup_rows(results: Path, out: Path) -> list[dict[str, object]]:
    values: dict[str, dict[str, float]] = {}
    for accounting, name in (("ours", "budget_sweep"), ("paper", "budget_sweep_paper")):
        try:
            frame = with_schedule(latest_cells(read(results, name), SWEEP_KEY))
        except MissingResults:
            continue
        frame = ours(frame) if accounting == "ours" else frame
        cell = frame[(frame["graph"] == "vgg_unet") & (frame["budget_spec"] == "16GB")].set_index("strategy")
        if "ilp" in cell.index:
            values[accounting] = {s: float(cell.loc[s, "cost"] / cell.loc["ilp", "cost"])
                                  for s in PAPER_UNET_SPEEDUP if s in cell.index}
    rows = []
    for strategy, paper in PAPER_UNET_SPEEDUP.items():
        ours_value, paper_value = (values.get(a, {}).get(strategy) for a in ("ours", "paper"))
        if ours_value is not None or paper_value is not None:
            rows.append({"metric": f"U-Net at 16 GB (Fig. 5 caption), {strategy} / ILP", "graph": "vgg_unet",
                         "ours": ours_value, "paper accounting": paper_value, "paper": paper,
                         "key": ("speedup", "vgg_unet", strategy)})
    return rows


def _integrality_rows(results: Path, out: Path) -> list[dict[str, object]]:
    frame = read(results, "integrality_gap")
    if "optimum_proof" not in frame.columns:
        raise MissingResults("integrality_gap.csv predates the proved optima: re-run the integrality_gap stage")
    rows = []
    for variant, paper in PAPER_INTEGRALITY.items():
        cell = frame[(frame["variant"] == variant) & (frame["budget"] == 4)]
        if len(cell) and pd.notna(cell["integrality_gap"].iloc[0]):
            rows.append({"metric": f"App. A integrality gap, {variant}, budget 4 (proved optimum / LP)",
                         "graph": f"linear{int(cell['layers'].iloc[0])}",
                         "ours": float(cell["integrality_gap"].iloc[0]),
                         "paper accounting": None, "paper": paper, "key": ("integrality", "linear8", variant)})
    return rows
