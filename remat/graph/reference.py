"""The paper's reference training graphs (networkx node-link JSON), read in place.

The directory comes from one setting: the ``REMAT_GRAPHS_DIR`` environment
variable, defaulting to ``../shared/data/graphs`` beside the project checkout.
Short names (``vgg16``, ``vgg_unet``, ...) resolve to files there.
"""

from __future__ import annotations

import os
from pathlib import Path

from remat.graph.dfgraph import DFGraph, GraphError
from remat.graph.formats import load_graph
from remat.graph.nodelink import reference_short_name

PROJECT_ROOT = Path(__file__).resolve().parents[2]
REFERENCE_GRAPHS = ("vgg16", "vgg19", "mobilenet", "resnet50", "fcn8_vgg", "segnet", "vgg_unet")


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
    matches = sorted(p for p in d.glob("*.json") if reference_short_name(p.stem) == short_name)
    if not matches:
        known = ", ".join(sorted(reference_short_name(p.stem) for p in d.glob("*.json")))
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

