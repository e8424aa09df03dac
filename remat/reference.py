"""The paper's reference training graphs (networkx node-link JSON), read in place.

The directory comes from one setting: the ``REMAT_GRAPHS_DIR`` environment
variable, defaulting to ``../shared/data/graphs`` beside the project checkout.
Short names (``vgg16``, ``vgg_unet``, ...) resolve to files there.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from remat.graph import DFGraph, GraphError, load_graph

PROJECT_ROOT = Path(__file__).resolve().parent.parent
REFERENCE_GRAPHS = ("vgg16", "vgg19", "mobilenet", "resnet50", "fcn8_vgg", "segnet", "vgg_unet")
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


def reference_graph_dir() -> Path:
    """Where the reference graphs live: ``$REMAT_GRAPHS_DIR`` or ``../shared/data/graphs``."""
    env = os.environ.get("REMAT_GRAPHS_DIR")
    return Path(env) if env else (PROJECT_ROOT.parent / "shared" / "data" / "graphs")


def reference_graphs_available() -> bool:
    d = reference_graph_dir()
    return d.is_dir() and any(d.glob("*.json"))


def reference_graph_path(short_name: str) -> Path:
    d = reference_graph_dir()
    if not d.is_dir():
        raise GraphError(
            f"reference graph directory {str(d)!r} does not exist: set REMAT_GRAPHS_DIR to the folder "
            f"holding the Checkmate node-link graphs"
        )
    matches = sorted(p for p in d.glob("*.json") if _short_name(p) == short_name)
    if not matches:
        known = ", ".join(sorted(_short_name(p) for p in d.glob("*.json")))
        raise GraphError(f"no reference graph named {short_name!r} in {d}; known: {known}")
    return matches[0]


def load_reference_graph(short_name: str) -> DFGraph:
    """Load a reference graph by short name (e.g. ``vgg_unet``)."""
    return load_graph(reference_graph_path(short_name))


def resolve_graph(spec: str | Path) -> DFGraph:
    """A graph from a reference short name or a path to a graph file."""
    spec_str = str(spec)
    if spec_str.endswith(".json") or os.sep in spec_str or Path(spec_str).is_file():
        return load_graph(spec_str)
    return load_reference_graph(spec_str)


def _short_name(path: Path) -> str:
    return re.sub(r"_b\d+_\d+x\d+$", "", path.stem)


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
