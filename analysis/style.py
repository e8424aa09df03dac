"""One look for every figure: a fixed colour per strategy, axis units, PNG + PDF output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def platform_label(name: str, memory: float) -> str:
    return f"{name} memory ({memory / GIB:.0f} GiB)"


def save(fig: Any, out_dir: Path, name: str) -> list[Path]:
    """Write ``name.png`` and ``name.pdf``; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    return paths
