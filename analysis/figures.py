"""The paper's figures from results/: Fig. 5, 6, 7, 1 and 3. Each returns the matplotlib Figure it saved."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.data import MissingResults, latest_cells, read, with_schedule
from analysis.style import (
    GIB,
    PLATFORM_STYLE,
    caption,
    color,
    cost_unit_label,
    label,
    ordered,
    platform_label,
    save,
)

SWEEP_KEY = ["graph", "cost_model", "batch_size", "strategy", "solver", "time_limit", "budget_spec", "seed",
             "accounting"]
# The paper's Fig. 5 panels (a) VGG16, (b) MobileNet, (c) U-Net come first; the other reference graphs follow.
PAPER_FIG5 = ("vgg16", "mobilenet", "vgg_unet")


def ours(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows run under our accounting (all rows of files that predate the accounting column)."""
    return frame[frame["accounting"].fillna("ours") == "ours"] if "accounting" in frame.columns else frame


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _grid(plt: Any, count: int, width: float = 4.4, height: float = 3.4) -> tuple[Any, np.ndarray]:
    cols = min(3, count)
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[count:]:
        ax.set_visible(False)
    return fig, axes.flat[:count]


def _legend(fig: Any, axes: Any) -> None:
    handles: dict[str, Any] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=min(4, len(handles)), frameon=False,
               bbox_to_anchor=(0.5, -0.02 - 0.035 * math.ceil(len(handles) / 4)))


def _platform(frame: pd.DataFrame) -> tuple[str, float] | None:
    if "platform_memory" not in frame or frame["platform_memory"].dropna().empty:
        return None
    row = frame.dropna(subset=["platform_memory"]).iloc[0]
    return str(row["platform"]), float(row["platform_memory"])


def _reference_line(ax: Any, axis: str, platform: tuple[str, float]) -> None:
    """The platform memory line; when it lies far outside the data it is named in a note instead of rescaling."""
    value = platform[1] / GIB
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    line = ax.axvline if axis == "x" else ax.axhline
    if (lo <= value <= hi) or (lo / 4 <= value <= hi * 4):
        line(value, label=platform_label(*platform), **PLATFORM_STYLE)
        return
    ax.text(0.98, 0.02, f"{platform_label(*platform)} off-scale", transform=ax.transAxes, ha="right",
            va="bottom", fontsize=7, color=PLATFORM_STYLE["color"])


def _clip_overhead(ax: Any, solved: pd.DataFrame) -> None:
    # Checkpoint-last's quadratic overhead would flatten every other curve: keep the informative range in view.
    others = solved[solved["strategy"] != "checkpoint_last"]["overhead"]
    if len(others) and solved["overhead"].max() > 3:
        top = max(1.5, 1.1 * float(others.max()))
        ax.set_ylim(0.95, top)
        ax.text(0.02, 0.98, "Checkpoint last above the plotted range" if top < solved["overhead"].max() else "",
                transform=ax.transAxes, ha="left", va="top", fontsize=7)


def best_within(points: pd.DataFrame, right: float) -> tuple[np.ndarray, np.ndarray]:
    """The least overhead a strategy reaches within each memory: a step curve over its schedules' peaks.

    ``points`` holds ``peak_memory`` and ``overhead`` of its schedules (any budgets); the curve steps down at each
    peak that lowers the least overhead so far and runs on to ``right`` (bytes).
    """
    by_peak = points.groupby("peak_memory")["overhead"].min().sort_index()
    x, y = by_peak.index.to_numpy(float), np.minimum.accumulate(by_peak.to_numpy(float))
    keep = np.r_[True, y[1:] < y[:-1] - 1e-12]
    x, y = x[keep], y[keep]
    return np.r_[x, max(right, x[-1])], np.r_[y, y[-1]]


def fig5_budget_sweep(results: Path, out: Path) -> Any:
    """Fig. 5: overhead versus memory, one panel per reference graph, one step curve per strategy.

    Each curve is the least overhead the strategy's schedules reach within the memory on the x axis (their
    simulated peaks, from every budget of the sweep), so a strategy with no knob - checkpoint all, sqrt(n) -
    shows as the one point its schedule needs and a flat line to its right. Rows of our accounting only.
    """
    plt = _plt()
    frame = ours(latest_cells(read(results, "budget_sweep"), SWEEP_KEY))
    ok = with_schedule(frame)
    graphs = sorted(dict.fromkeys(frame["graph"]), key=lambda g: (PAPER_FIG5.index(g) if g in PAPER_FIG5 else 9, g))
    fig, axes = _grid(plt, len(graphs))
    for ax, graph in zip(axes, graphs):
        sub = ok[ok["graph"] == graph]
        right = float(sub["peak_memory"].max()) if len(sub) else 0.0
        for strategy in ordered(sub["strategy"]):
            x, y = best_within(sub[sub["strategy"] == strategy], right)
            ax.plot(x / GIB, y, drawstyle="steps-post", markevery=list(range(len(x) - 1)), color=color(strategy),
                    label=label(strategy), **_curve_style(strategy, len(x) == 2))
        _clip_overhead(ax, sub)
        platform = _platform(frame[frame["graph"] == graph])
        if platform:
            _reference_line(ax, "x", platform)
        info = frame[frame["graph"] == graph].iloc[0]
        panel = f"({'abc'[PAPER_FIG5.index(graph)]}) " if graph in PAPER_FIG5 else ""
        ax.set_title(f"{panel}{graph} (batch {info['batch_size']:.0f}, cost: {cost_unit_label(info['cost_unit'])})",
                     fontsize=9)
        ax.set_xlabel("Memory: schedule peak (GiB)")
        ax.set_ylabel("Overhead (× checkpoint-all cost)")
        ax.grid(alpha=0.3)
    _legend(fig, axes)
    fig.suptitle("Computational overhead vs memory (Fig. 5): least overhead within each memory")
    fig.tight_layout()
    save(fig, out, "fig5_budget_sweep", caption("python -m analysis fig5", _inputs(frame, "budget_sweep.csv")))
    return fig


def _curve_style(strategy: str, single: bool) -> dict[str, Any]:
    """On a chain Chen's rules give the same schedules as their AP and linearized generalisations: draw them dashed
    on top so they stay visible; checkpoint all is a large star above everything."""
    if strategy == "checkpoint_all":
        return {"marker": "*", "markersize": 12, "linewidth": 1.2, "zorder": 6}
    if strategy.startswith("chen_"):
        return {"marker": "D", "markersize": 6 if single else 3, "linestyle": "--", "linewidth": 1.6, "zorder": 5}
    return {"marker": "o", "markersize": 7 if single else 3, "linewidth": 1.2, "zorder": 3}


def _inputs(frame: pd.DataFrame, name: str) -> str:
    profiles = sorted(set(frame["profile"].dropna().astype(str))) if "profile" in frame else []
    return f"results/{name}" + (f" (profile {', '.join(p for p in profiles if p)})" if any(profiles) else "")


ACCOUNTING_TITLES = {
    "ours": "our accounting: the budget is the whole device, simulate()",
    "paper": "the artifact's: 16 GB, MILP at 16 GB − 2P, its baselines at 16 GB − 4P",
}


def fig6_max_batch(results: Path, out: Path) -> Any:
    """Fig. 6: maximum batch size per graph and strategy at the platform's memory, one panel per accounting."""
    plt = _plt()
    frame = read(results, "max_batch")
    if "accounting" not in frame.columns:
        frame["accounting"] = "ours"
    frame["accounting"] = frame["accounting"].fillna("ours")
    frame = latest_cells(frame, ["graph", "strategy", "solver", "time_limit", "platform", "accounting"])
    frame = frame[frame["max_batch"].notna() & (frame["max_batch"] > 0)]
    if frame.empty:
        raise MissingResults(f"{results / 'max_batch.csv'} has no solved cells: run the max_batch stage first")
    graphs = list(dict.fromkeys(frame["graph"]))
    strategies = ordered(frame["strategy"])
    kinds = [a for a in ("ours", "paper") if a in set(frame["accounting"])]
    width_in = max(6.0, 1.3 * len(graphs) * max(1, len(strategies)) / 3)
    fig, axes = plt.subplots(len(kinds), 1, figsize=(width_in, 4.0 * len(kinds)), squeeze=False)
    width = 0.8 / len(strategies)
    for ax, kind in zip(axes[:, 0], kinds):
        part = frame[frame["accounting"] == kind]
        for j, strategy in enumerate(strategies):
            sub = part[part["strategy"] == strategy].set_index("graph")
            values = [float(sub.loc[g, "max_batch"]) if g in sub.index else 0.0 for g in graphs]
            bars = ax.bar(np.arange(len(graphs)) + (j - (len(strategies) - 1) / 2) * width, values, width,
                          color=color(strategy), label=label(strategy))
            # Values on the bars: U-Net's batches are tiny next to MobileNet's; "+" marks a search out of time.
            open_ended = [g in sub.index and sub.loc[g].get("status") == "time_limit" for g in graphs]
            ax.bar_label(bars, [f"{v:.0f}{'+' if o else ''}" if v else ""
                                for v, o in zip(values, open_ended, strict=True)], fontsize=6, padding=1)
        ax.set_xticks(np.arange(len(graphs)), graphs, rotation=20)
        ax.set_ylabel("Maximum batch size (samples)")
        platform = _platform(part)
        where = platform_label(*platform) if platform else "the platform memory"
        title = f"at {where}, cost ≤ one extra forward pass (Fig. 6)"
        ax.set_title(f"Maximum batch size {title}" + (f"\n{ACCOUNTING_TITLES[kind]}" if len(kinds) > 1 else ""),
                     fontsize=9)
        ax.legend(fontsize=7, ncol=2)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    save(fig, out, "fig6_max_batch", caption("python -m analysis fig6", _inputs(frame, "max_batch.csv")))
    return fig


def fig7_schedules(results: Path, out: Path) -> Any:
    """Fig. 7: R (computed) and S (checkpointed) matrices of each saved schedule."""
    plt = _plt()
    files = sorted((results / "schedules").glob("*.npz"))
    if not files:
        raise MissingResults(f"{results / 'schedules'} holds no schedules: run the schedules stage first "
                             f"(`dvc repro schedules`)")
    fig, axes = plt.subplots(len(files), 2, figsize=(8, 3.6 * len(files)), squeeze=False)
    for row, path in zip(axes, files):
        graph, strategy, budget = path.stem.split("__")
        data = np.load(path)
        for ax, key, what in zip(row, ("R", "S"), ("R: node computed in stage", "S: value kept into stage")):
            ax.imshow(data[key], cmap="Greys", interpolation="nearest", aspect="auto")
            ax.set_title(f"{graph}, {label(strategy)}, budget {budget}\n{what}", fontsize=8, color=color(strategy))
            ax.set_xlabel("Node (layer id, forward then backward)")
            ax.set_ylabel("Stage t")
    fig.suptitle("Schedules: R and S matrices (Fig. 7)")
    fig.tight_layout()
    save(fig, out, "fig7_schedules", caption("python -m analysis fig7", "results/schedules/*.npz"))
    return fig


def fig1_memory(results: Path, out: Path) -> Any:
    """Fig. 1: memory in use over the schedule, checkpoint-all against rematerialized schedules."""
    plt = _plt()
    frame = read(results, "schedules")
    frame = frame[frame["memory"].notna()]
    if frame.empty:
        raise MissingResults(f"{results / 'schedules.csv'} holds no timelines: run the schedules stage first")
    graphs = list(dict.fromkeys(frame["graph"]))
    fig, axes = _grid(plt, len(graphs), 6.0, 3.8)
    for ax, graph in zip(axes, graphs):
        sub = frame[frame["graph"] == graph]
        for strategy in ordered(sub["strategy"]):
            line = sub[sub["strategy"] == strategy].sort_values("step")
            ax.plot(line["cost_cum"], line["memory"] / GIB, color=color(strategy), linewidth=1.2,
                    label=f"{label(strategy)} (budget {line['budget_spec'].iloc[0]}"
                          + (", over it: no rematerialization)" if line["status"].iloc[0] == "infeasible" else ")"))
        budgets = sub["budget"].dropna().unique()
        for b in budgets:
            ax.axhline(b / GIB, color="#999999", linestyle=":", linewidth=1.0, label=f"budget ({b / GIB:.1f} GiB)")
        platform = _platform(sub)
        if platform:
            _reference_line(ax, "y", platform)
        ax.set_xlabel("Elapsed compute (cumulative cost, graph cost units)")
        ax.set_ylabel("Memory in use (GiB)")
        ax.set_title(f"{graph}: memory over the schedule (Fig. 1)", fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    save(fig, out, "fig1_memory", caption("python -m analysis fig1", _inputs(frame, "schedules.csv")))
    return fig


def fig3_activation_memory(results: Path, out: Path) -> Any:
    """Fig. 3: activation versus parameter memory per model, with the platform memory line."""
    plt = _plt()
    frame = read(results, "activation_memory")
    name_col = "model" if "model" in frame.columns else frame.columns[0]
    act = [c for c in frame.columns if "activation" in c.lower() and pd.api.types.is_numeric_dtype(frame[c])]
    par = [c for c in frame.columns if "param" in c.lower() and pd.api.types.is_numeric_dtype(frame[c])]
    if not act or not par:
        raise MissingResults(f"{results / 'activation_memory.csv'} lacks activation/parameter byte columns "
                             f"(has {', '.join(frame.columns)}): re-run the activation_memory stage")
    x = np.arange(len(frame))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(frame)), 4.0))
    ax.bar(x - 0.2, frame[act[0]] / GIB, 0.4, color="#1f77b4", label="Activations (forward outputs kept for backward)")
    ax.bar(x + 0.2, frame[par[0]] / GIB, 0.4, color="#ff7f0e", label="Parameters")
    platform = _platform(frame)
    if platform:
        ax.axhline(platform[1] / GIB, label=platform_label(*platform), **PLATFORM_STYLE)
    ax.set_xticks(x, frame[name_col], rotation=20)
    ax.set_ylabel("Memory (GiB)")
    ax.set_title("Activation vs parameter memory (Fig. 3)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    save(fig, out, "fig3_activation_memory",
         caption("python -m analysis fig3", _inputs(frame, "activation_memory.csv")))
    return fig


FIGURES = {"fig5": fig5_budget_sweep, "fig6": fig6_max_batch, "fig7": fig7_schedules, "fig1": fig1_memory,
           "fig3": fig3_activation_memory}
