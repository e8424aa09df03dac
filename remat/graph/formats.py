"""Graph files: our own JSON format, and node-link JSON (Checkmate's export, MOCCASIN's graphs) via ``nodelink``.

``load_graph`` reads any of them; ``save_graph`` writes a graph in the format
named by ``fmt`` (one of :data:`FORMATS`); ``python -m remat.graph convert``
is the command line for both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from remat.graph.dfgraph import FORMAT, DFGraph, GraphError
from remat.graph.nodelink import graph_to_moccasin, graph_to_node_link, node_link_to_graph

# Writers by format name: ours, Checkmate's node-link export, MOCCASIN's graph JSON.
FORMATS = {"remat": DFGraph.to_dict, "node-link": graph_to_node_link, "moccasin": graph_to_moccasin}


def from_dict(data: dict[str, Any]) -> DFGraph:
    """Inverse of :meth:`DFGraph.to_dict`."""
    if data.get("format") != FORMAT:
        raise GraphError(f"not a {FORMAT} file (format={data.get('format')!r}); for node-link JSON use load_graph")
    try:
        nodes = sorted(data["nodes"], key=lambda d: d["id"])
        if [d["id"] for d in nodes] != list(range(len(nodes))):
            raise GraphError("node ids must be exactly 0..n-1")
        return DFGraph(
            names=[d["name"] for d in nodes],
            cost=[d["cost"] for d in nodes],
            memory=[d["memory"] for d in nodes],
            edges=data["edges"],
            loss=data.get("loss"),
            constant_memory=data.get("constant_memory", 0),
            input_memory=data.get("input_memory", 0),
            batch_size=data.get("batch_size"),
            batch_scaled=[d.get("batch_scaled", True) for d in nodes],
            cost_unit=data.get("cost_unit", "unit"),
            name=data.get("name", "graph"),
            metadata=data.get("metadata", {}),
        )
    except KeyError as exc:
        raise GraphError(f"graph file lacks the field {exc}: save graphs with DFGraph.save") from None


def load_graph(path: str | Path) -> DFGraph:
    """Load a graph file: our own JSON format, or node-link JSON (the reference graphs, MOCCASIN's graphs)."""
    path = Path(path)
    if not path.is_file():
        raise GraphError(f"graph file {str(path)!r} does not exist")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise GraphError(f"graph file {str(path)!r} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise GraphError(f"graph file {str(path)!r} holds a {type(data).__name__}, not a graph object")
    if "links" in data and "nodes" in data:
        return node_link_to_graph(data, name=path.stem)
    return from_dict(data)


def save_graph(graph: DFGraph, path: str | Path, fmt: str = "remat") -> Path:
    """Write ``graph`` to ``path`` in format ``fmt`` (``remat``, ``node-link`` or ``moccasin``); returns the path."""
    if fmt not in FORMATS:
        raise GraphError(f"unknown graph format {fmt!r}: pick one of {', '.join(FORMATS)}")
    path = Path(path)
    path.write_text(json.dumps(FORMATS[fmt](graph), indent=1))
    return path
