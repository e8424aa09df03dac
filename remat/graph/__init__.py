"""The training data-flow graph (paper §4.1), its file formats and the paper's reference graphs.

``dfgraph`` holds :class:`DFGraph` and its validation; ``formats`` reads and
writes graph files; ``reference`` finds the paper's graphs on disk.
"""

from remat.graph.dfgraph import DFGraph, GraphError, find_cycle, topologically_sorted
from remat.graph.formats import from_dict, load_graph, node_link_to_graph

__all__ = ["DFGraph", "GraphError", "find_cycle", "from_dict", "load_graph", "node_link_to_graph",
           "topologically_sorted"]
