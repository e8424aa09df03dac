"""One look for every figure: a fixed colour per strategy, axis units, PNG + PDF output."""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

GIB = 2**30

# Fixed across figures so a strategy is recognisable everywhere (tab20-like, colour-blind-safe pairs).
STRATEGY_COLORS = {
    "checkpoint_all": "#000000",
    "checkpoint_last": "#7f7f7f",
    "chen_sqrtn": "#1f77b4",
    "chen_greedy": "#aec7e8",
    "griewank_logn": "#8c564b",
    "ap_sqrtn": "#2ca02c",
    "ap_greedy": "#98df8a",
    "linearized_sqrtn": "#9467bd",
    "linearized_greedy": "#c5b0d5",
    "approx_lp_deterministic": "#ff7f0e",
    "approx_lp_randomized": "#ffbb78",
    "eviction_greedy": "#bcbd22",
    "ilp_plain": "#e377c2",
    "ilp": "#d62728",
}
STRATEGY_LABELS = {
    "checkpoint_all": "Checkpoint all",
    "checkpoint_last": "Checkpoint last",
    "chen_sqrtn": "Chen et al. √n",
    "chen_greedy": "Chen et al. greedy",
    "griewank_logn": "Griewank & Walther log n",
    "ap_sqrtn": "AP √n",
    "ap_greedy": "AP greedy",
    "linearized_sqrtn": "Linearized √n",
    "linearized_greedy": "Linearized greedy",
    "approx_lp_deterministic": "Checkmate LP rounding (det.)",
    "approx_lp_randomized": "Checkmate LP rounding (rand.)",
    "eviction_greedy": "Greedy eviction",
    "ilp_plain": "Checkmate ILP (plain MILP)",
    "ilp": "Checkmate ILP",
}
STRATEGY_ORDER = list(STRATEGY_COLORS)
PLATFORM_STYLE = {"color": "#555555", "linestyle": "--", "linewidth": 1.0}


def color(strategy: str) -> str:
    return STRATEGY_COLORS.get(strategy, "#17becf")


def label(strategy: str) -> str:
    return STRATEGY_LABELS.get(strategy, strategy)


def ordered(strategies: Any) -> list[str]:
    names = list(dict.fromkeys(strategies))
    return sorted(names, key=lambda s: (STRATEGY_ORDER.index(s) if s in STRATEGY_ORDER else len(STRATEGY_ORDER), s))


# How each reference graph's cost unit reads in a panel title (remat.graph.nodelink.REFERENCE_COST_UNITS).
COST_UNIT_LABELS = {
    "v100_time": "V100 profile",
    "flop": "FLOPs (multiply-accumulates)",
    "flops": "FLOPs (multiply-accumulates)",
    "profiled_time_unrecorded_device": "profiled time, device not recorded",
    "seconds": "seconds (profiled here)",
}


def platform_label(name: str, memory: float) -> str:
    if abs(memory / 1e9 - round(memory / 1e9)) < 1e-9 and abs(memory / GIB - round(memory / GIB)) > 1e-6:
        return f"{name} memory ({memory / 1e9:.0f} GB)"
    return f"{name} memory ({memory / GIB:.0f} GiB)"


def cost_unit_label(unit: Any) -> str:
    return COST_UNIT_LABELS.get(str(unit), str(unit))


@cache
def code_commit() -> str:
    """The checkout's commit, ``+changes`` when the code that draws (analysis/, remat/) differs from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "analysis", "remat"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown commit"
    return (head or "unknown commit") + ("+changes" if dirty else "")


def caption(command: str, inputs: str) -> str:
    """What a figure says about itself: the command and commit that drew it, and from which results."""
    return f"Drawn by `{command}` at commit {code_commit()} from {inputs}."


def save(fig: Any, out_dir: Path, name: str, note: str | None = None) -> list[Path]:
    """Write ``name.png`` and ``name.pdf`` (with ``note``, the figure's caption, along its bottom); returns both."""
    if note:
        fig.text(0.0, -0.01, note, ha="left", va="top", fontsize=7, color="#444444", wrap=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    return paths
