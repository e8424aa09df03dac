"""Our quick-profile numbers next to the paper's (Checkmate, MLSys 2020), for the README.

The paper's values are quoted from ``shared/seeds/checkmate-paper.txt``: Table 2
(approximation ratios, geometric mean over feasible budgets), §6.4 / Fig. 6 (max
batch-size ratios) and Fig. 5's caption (U-Net speed-ups at the 16 GB V100 budget).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.data import MissingResults, latest_cells, read, with_schedule
from analysis.figures import SWEEP_KEY
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
# §6.4: Checkmate's max batch over checkpoint-all (MobileNet) and over the best baseline (U-Net).
PAPER_MAX_BATCH = {("mobilenet", "checkpoint_all"): 5.1, ("vgg_unet", "best baseline"): 1.73}
# Fig. 5 caption: U-Net at the 16 GB budget, baseline overhead / Checkmate overhead.
PAPER_UNET_SPEEDUP = {"linearized_greedy": 1.20, "linearized_sqrtn": 1.38}


def paper_comparison(results: Path, out: Path) -> pd.DataFrame:
    rows: list[dict[str, object]] = []
    notes: list[str] = []
    for section in (_table2_rows, _max_batch_rows, _speedup_rows):
        try:
            rows.extend(section(results, out))
        except MissingResults as exc:
            notes.append(str(exc))
    if not rows:
        raise MissingResults("; ".join(notes) or f"no graph of the paper's tables in {results}: run the quick "
                             f"profile's approx_ratio, max_batch and budget_sweep stages first")
    table = pd.DataFrame(rows).set_index("metric")
    write(table, out, "paper_comparison", "Quick-profile numbers next to the paper's (Checkmate, MLSys 2020)")
    return table


def _table2_rows(results: Path, out: Path) -> list[dict[str, object]]:
    ours = table2_approx_ratio(results, out)
    from analysis.style import label

    rows = []
    for (graph, strategy), paper in PAPER_TABLE2.items():
        value = ours.loc[label(strategy), graph] if label(strategy) in ours.index and graph in ours.columns else None
        if value is not None and np.isfinite(value):
            rows.append({"metric": f"Table 2 ratio to ILP, {strategy}", "graph": graph, "ours": value, "paper": paper})
    return rows


def _max_batch_rows(results: Path, out: Path) -> list[dict[str, object]]:
    frame = latest_cells(read(results, "max_batch"), ["graph", "strategy", "solver", "time_limit", "platform"])
    best = frame.pivot_table(index="graph", columns="strategy", values="max_batch", aggfunc="max")
    rows = []
    for (graph, versus), paper in PAPER_MAX_BATCH.items():
        if graph not in best.index or "ilp" not in best.columns:
            continue
        others = best.loc[graph].drop(["ilp", "checkpoint_all"], errors="ignore")
        base = best.loc[graph, "checkpoint_all"] if versus == "checkpoint_all" else others.max()
        if pd.notna(base) and base > 0:
            rows.append({"metric": f"max batch, ILP / {versus}", "graph": graph,
                         "ours": float(best.loc[graph, "ilp"]) / float(base), "paper": paper})
    return rows


def _speedup_rows(results: Path, out: Path) -> list[dict[str, object]]:
    frame = with_schedule(latest_cells(read(results, "budget_sweep"), SWEEP_KEY))
    unet = frame[(frame["graph"] == "vgg_unet") & (frame["budget"] <= frame["platform_memory"])]
    best = unet.groupby("strategy")["overhead"].min()
    rows = []
    for strategy, paper in PAPER_UNET_SPEEDUP.items():
        if strategy in best.index and "ilp" in best.index:
            rows.append({"metric": f"U-Net overhead at platform memory, {strategy} / ILP", "graph": "vgg_unet",
                         "ours": float(best[strategy] / best["ilp"]), "paper": paper})
    return rows
