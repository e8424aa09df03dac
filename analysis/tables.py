"""The paper's tables from results/, written as Markdown and LaTeX.

* ``table2`` (Table 2): each strategy's cost over the ILP optimum, geometric mean
  over the budgets where both have a schedule and the ILP is proved optimal.
* ``overhead``: best overhead within the platform memory per graph and strategy
  (the README's "overhead at the V100 budget").
* ``max_batch``: maximum batch size and its ratio to checkpoint-all.
* ``rounding`` (App. D) and ``integrality`` (§4.6, App. A).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.data import MissingResults, latest_cells, read, with_schedule
from analysis.figures import SWEEP_KEY, ours
from analysis.style import label, ordered


def write(table: pd.DataFrame, out: Path, name: str, caption: str) -> list[Path]:
    """``name.md`` and ``name.tex`` (plain tabular, no extra dependencies)."""
    out.mkdir(parents=True, exist_ok=True)
    cells = table.reset_index().astype(object).where(table.reset_index().notna(), "-")
    cols = [str(c) for c in cells.columns]
    text = [str(v) if not isinstance(v, float) else f"{v:.3f}" for v in cells.to_numpy().ravel()]
    rows = [text[i:i + len(cols)] for i in range(0, len(text), len(cols))]
    md = [f"**{caption}**", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    tex = [r"\begin{table}[t]", r"\centering", rf"\caption{{{caption}}}", r"\begin{tabular}{l" + "r" * (len(cols) - 1)
           + "}", r"\toprule", " & ".join(_tex(c) for c in cols) + r" \\", r"\midrule"]
    tex += [" & ".join(_tex(v) for v in r) + r" \\" for r in rows]
    tex += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    paths = [out / f"{name}.md", out / f"{name}.tex"]
    paths[0].write_text("\n".join(md) + "\n")
    paths[1].write_text("\n".join(tex) + "\n")
    return paths


def _tex(value: str) -> str:
    return value.replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")


def table2_approx_ratio(results: Path, out: Path) -> pd.DataFrame:
    frame = ours(latest_cells(read(results, "approx_ratio"), SWEEP_KEY))
    ok = with_schedule(frame)
    ilp = ok[(ok["strategy"] == "ilp") & (ok["status"] == "optimal")][["graph", "budget_spec", "cost"]]
    if ilp.empty:
        raise MissingResults(f"{results / 'approx_ratio.csv'} has no proved-optimal ILP cell: run the approx_ratio "
                             f"stage with a longer experiment.time_limit")
    merged = ok[ok["strategy"] != "ilp"].merge(ilp, on=["graph", "budget_spec"], suffixes=("", "_ilp"))
    merged["ratio"] = merged["cost"] / merged["cost_ilp"]
    geo = merged.groupby(["strategy", "graph"])["ratio"].apply(lambda r: float(np.exp(np.log(r).mean())))
    table = geo.unstack("graph")
    table = table.loc[ordered(table.index)]
    table.index = [label(s) for s in table.index]
    table.index.name = "strategy"
    write(table, out, "table2_approx_ratio",
          "Cost / ILP optimum, geometric mean over budgets feasible for both (Table 2)")
    return table


def overhead_at_platform(results: Path, out: Path) -> pd.DataFrame:
    frame = ours(latest_cells(read(results, "budget_sweep"), SWEEP_KEY))
    ok = with_schedule(frame)
    ok = ok[ok["budget"] <= ok["platform_memory"]]
    table = ok.groupby(["strategy", "graph"])["overhead"].min().unstack("graph")
    table = table.loc[ordered(table.index)]
    table.index = [label(s) for s in table.index]
    table.index.name = "strategy"
    platform = frame["platform"].dropna().iloc[0] if "platform" in frame else "platform"
    write(table, out, "overhead_at_platform",
          f"Lowest overhead (x checkpoint-all cost) with a budget within the {platform} memory")
    return table


def max_batch_table(results: Path, out: Path) -> pd.DataFrame:
    frame = ours(latest_cells(read(results, "max_batch"), ["graph", "strategy", "solver", "time_limit", "platform",
                                                            "accounting"]))
    table = frame.pivot_table(index="strategy", columns="graph", values="max_batch", aggfunc="max")
    # A search that ran out of time proved only a lower end: mark those values rather than pass them off as exact.
    best = frame.sort_values("max_batch").drop_duplicates(["strategy", "graph"], keep="last")
    statuses = best["status"] if "status" in best else [""] * len(best)
    open_ended = {(s, g) for s, g, status in zip(best["strategy"], best["graph"], statuses, strict=True)
                  if status == "time_limit"}
    ratio = table / table.loc["checkpoint_all"] if "checkpoint_all" in table.index else table * np.nan
    table = table.astype(object)
    for s in table.index:
        for g in table.columns:
            v, r = table.loc[s, g], ratio.loc[s, g]
            mark = "+" if (s, g) in open_ended else ""
            table.loc[s, g] = "-" if pd.isna(v) else f"{v:.0f}{mark}" + (f" ({r:.2f}x)" if pd.notna(r) else "")
    table = table.loc[ordered(table.index)]
    table.index = [label(s) for s in table.index]
    table.index.name = "strategy"
    write(table, out, "max_batch", "Maximum batch size (ratio to checkpoint-all) at the platform memory; "
          "n+: at least n, the search's time limit ended it before a proof")
    return table


def rounding_table(results: Path, out: Path) -> pd.DataFrame:
    frame = ours(latest_cells(read(results, "rounding"), SWEEP_KEY))
    ilp = with_schedule(frame[frame["strategy"] == "ilp"])[["graph", "budget_spec", "cost"]]
    rows = []
    for (graph, budget), cell in frame[frame["strategy"] != "ilp"].groupby(["graph", "budget_spec"]):
        ref = ilp[(ilp["graph"] == graph) & (ilp["budget_spec"] == budget)]["cost"]
        ref_cost = float(ref.iloc[0]) if len(ref) else np.nan
        row = {"graph": graph, "budget": budget, "ILP cost": ref_cost}
        for strategy, runs in cell.groupby("strategy"):
            solved = with_schedule(runs)
            ratios = solved["cost"] / ref_cost
            name = "det." if "deterministic" in strategy else "rand."
            row[f"{name} feasible"] = f"{len(solved)}/{len(runs)}"
            row[f"{name} mean ratio"] = float(ratios.mean()) if len(solved) else np.nan
            row[f"{name} best ratio"] = float(ratios.min()) if len(solved) else np.nan
        rows.append(row)
    table = pd.DataFrame(rows).set_index("graph")
    write(table, out, "rounding", "Two-phase LP rounding: deterministic vs randomized, cost / ILP optimum (App. D)")
    return table


def integrality_table(results: Path, out: Path) -> pd.DataFrame:
    """App. A: each MILP's optimum with how it was proved, its LP bound, and the integrality gap against the proof.

    A time-limited incumbent is shown as such (``ilp_status``, ``ilp_cost``); the gap column is filled only where the
    optimum is proved, and ``gap interval`` gives ``[low, high]`` from the bounds otherwise.
    """
    frame = read(results, "integrality_gap")
    if "optimum_proof" not in frame.columns:
        raise MissingResults(f"{results / 'integrality_gap.csv'} predates the proved optima: re-run the "
                             f"integrality_gap stage (`dvc repro integrality_gap`)")
    table = frame.set_index("variant")[["budget", "ilp_status", "ilp_cost", "ilp_time", "pebbling_bound", "optimum",
                                        "optimum_proof", "lp_value", "integrality_gap", "variables",
                                        "constraints"]].copy()
    table.insert(table.columns.get_loc("integrality_gap") + 1, "gap interval",
                 [f"[{lo:.2f}, {hi:.2f}]" if pd.notna(lo) and pd.notna(hi) else "-"
                  for lo, hi in zip(frame["gap_low"], frame["gap_high"], strict=True)])
    table = table.rename(columns={"ilp_status": "solver status", "ilp_cost": "incumbent", "ilp_time": "solver s",
                                  "pebbling_bound": "pebble-game bound"})
    write(table, out, "integrality_gap",
          f"Partitioned vs unpartitioned MILP on the {int(frame['layers'].iloc[0])}-layer linear net (§4.6, App. A): "
          f"integrality gap = proved optimum / LP optimum")
    return table


TABLES = {"table2": table2_approx_ratio, "overhead": overhead_at_platform, "max_batch_table": max_batch_table,
          "rounding": rounding_table, "integrality": integrality_table}
