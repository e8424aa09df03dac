"""The training data-flow graph (paper §4.1), its file formats and the paper's reference graphs.

``dfgraph`` holds :class:`DFGraph` and its validation; ``formats`` reads and
writes graph files (``nodelink``: Checkmate's and MOCCASIN's node-link JSON);
``reference`` finds the paper's graphs on disk; ``python -m remat.graph
convert IN OUT --to FORMAT`` converts between the formats.
"""

from remat.graph.dfgraph import DFGraph, GraphError, find_cycle, topological_order, topologically_sorted
from remat.graph.formats import FORMATS, from_dict, load_graph, save_graph
from remat.graph.nodelink import graph_to_moccasin, graph_to_node_link, node_link_to_graph

__all__ = ["FORMATS", "DFGraph", "GraphError", "find_cycle", "from_dict", "graph_to_moccasin", "graph_to_node_link",
           "load_graph", "node_link_to_graph", "save_graph", "topological_order", "topologically_sorted"]
