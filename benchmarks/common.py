"""Shared helpers for the benchmark scripts: graph selection and Markdown tables."""

from __future__ import annotations

import math
from collections.abc import Sequence

from remat.generators import linear_chain
from remat.graph import DFGraph
from remat.graph.reference import REFERENCE_GRAPHS, load_reference_graph, reference_graphs_available


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
