"""Graph files: our own JSON format and the node-link JSON of the paper's reference graphs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from remat.graph.dfgraph import FORMAT, DFGraph, GraphError


def from_dict(data: dict[str, Any]) -> DFGraph:
    """Inverse of :meth:`DFGraph.to_dict`."""
    if data.get("format") != FORMAT:
        raise GraphError(f"not a {FORMAT} file (format={data.get('format')!r}); for node-link JSON use load_node_link")
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
    """Load a graph file: our own JSON format or networkx node-link JSON (the reference graphs)."""
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


# Cost units per file, from the data README: profiled V100 time for four of them.
_COST_UNITS = {
    "vgg16": "v100_time",
    "resnet50": "v100_time",
    "mobilenet": "v100_time",
    "vgg_unet": "v100_time",
    "fcn8_vgg": "flops",
    "vgg19": "unknown",
    "segnet": "unknown",
}


def node_link_to_graph(data: dict[str, Any], name: str = "graph") -> DFGraph:
    """Convert a Checkmate node-link export (see ``shared/data/graphs/README.md``).

    ``cost_cpu`` becomes the cost, ``cost_ram`` the memory; the node named
    ``Loss`` (or else the first node flagged ``backward``) is the loss. The files
    carry no parameter memory, so the constant overhead is 0.
    """
    try:
        nodes = sorted(data["nodes"], key=lambda d: int(d["id"]))
        ids = [int(d["id"]) for d in nodes]
        if ids != list(range(len(nodes))):
            raise GraphError(f"node-link graph {name!r}: node ids must be exactly 0..n-1")
        names = [str(d.get("name", d["id"])) for d in nodes]
        cost = [d.get("cost_cpu", d.get("cost", 1)) for d in nodes]
        memory = [d.get("cost_ram", d.get("memory", 1)) for d in nodes]
        edges = [(int(e["source"]), int(e["target"])) for e in data["links"]]
    except KeyError as exc:
        raise GraphError(f"node-link graph {name!r} lacks the field {exc}") from None
    loss = next((i for i, s in enumerate(names) if s == "Loss"), None)
    if loss is None:
        loss = next((i for i, d in enumerate(nodes) if d.get("backward")), None)
    match = re.search(r"_b(\d+)_", name)
    short = re.sub(r"_b\d+_\d+x\d+$", "", name)
    return DFGraph(
        names=names,
        cost=cost,
        memory=memory,
        edges=edges,
        loss=loss,
        batch_size=int(match.group(1)) if match else None,
        cost_unit=_COST_UNITS.get(short, "unknown"),
        name=short,
        metadata={"source": "checkmate-keras-export", "title": data.get("graph", {}).get("name", "")},
    )
