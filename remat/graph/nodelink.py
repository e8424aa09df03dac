"""networkx node-link graph files: Checkmate's Keras export and MOCCASIN's published graphs, in and out.

Two flavours of node-link JSON carry the rematerialization benchmark graphs:

* **Checkmate's export** (the reference graphs, and MOCCASIN's ``* (MLSys)`` files):
  nodes ``{"id", "name", "backward", "cost_cpu", "cost_ram"}``, links
  ``{"source", "target"}``, ids ``0..n-1`` already in topological order.
* **MOCCASIN's random layered graphs** (Bartan et al., ICML 2023, its ``data/``):
  nodes without ``id`` (networkx then numbers them by position) carrying
  ``out_cost`` (bytes), ``duration``, ``param_cost`` and ``name``; links keyed
  ``"0"`` (source) and ``"1"`` (target); ``graph`` holds ``name``, drawing
  positions and ``order``, a topological order - the ids themselves are not one.

:func:`node_link_to_graph` reads both (and links given as ``[source, target]``
pairs), renumbering the nodes along ``graph["order"]`` when there is one, else
along a stable topological sort, so any of these files loads as a
:class:`DFGraph`. :func:`graph_to_node_link` writes Checkmate's flavour and
:func:`graph_to_moccasin` MOCCASIN's: a file MOCCASIN's ``main.py`` reads under
any file name, since it picks its field names (``cost_ram``/``out_cost``,
``source``/``"0"``) from the file's name, so both spellings are written. Either
writer stores what node-link has no field for (loss, constant memory, batch
size, cost unit, per-node batch scaling) under ``graph["remat"]``, so every
format round-trips exactly.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from remat.graph.dfgraph import DFGraph, GraphError, topological_order

# Cost units of the reference graphs, by short name. The four "v100_time" files hold the artifact's V100 profile
# (multiples of 5: its CostModel quantised the measured times to 5 units); fcn8's costs equal the Keras extractor's
# multiply-accumulates (correlation 0.99996 with remat.keras's FLOP model); VGG19's and SegNet's are profiled times
# quantised the same way but from an unrecorded device: not FLOPs (correlation 0.24 / 0.25 with the MACs),
# forward slower than backward, and 43x to 5600x the VGG16 V100 figures layer by layer.
REFERENCE_COST_UNITS = {
    "vgg16": "v100_time",
    "resnet50": "v100_time",
    "mobilenet": "v100_time",
    "vgg_unet": "v100_time",
    "fcn8_vgg": "flop",
    "vgg19": "profiled_time_unrecorded_device",
    "segnet": "profiled_time_unrecorded_device",
}
COST_KEYS = ("cost_cpu", "duration", "cost")
MEMORY_KEYS = ("cost_ram", "out_cost", "memory")


def reference_short_name(stem: str) -> str:
    """``vgg19_b256_224x224`` -> ``vgg19`` (the reference files' naming)."""
    return re.sub(r"_b\d+_\d+x\d+$", "", stem)


def node_link_to_graph(data: dict[str, Any], name: str = "graph") -> DFGraph:
    """A :class:`DFGraph` from node-link JSON of either flavour (see the module docstring).

    Cost is the first of ``cost_cpu``, ``duration``, ``cost``; memory the first of
    ``cost_ram``, ``out_cost``, ``memory``. The loss is the node named ``Loss``,
    else the first node flagged ``backward``, else none (a plain DAG such as
    MOCCASIN's random graphs). ``param_cost`` is summed into
    ``metadata["parameter_bytes"]``; like MOCCASIN, the constant overhead stays 0
    unless the file's ``graph["remat"]`` says otherwise.
    """
    if not isinstance(data.get("nodes"), list) or not isinstance(data.get("links"), list):
        raise GraphError(f"node-link graph {name!r} needs lists 'nodes' and 'links'")
    attrs = data.get("graph") or {}
    extra = attrs.get("remat") or {}
    nodes = data["nodes"]
    ids = [d.get("id", pos) for pos, d in enumerate(nodes)]
    index = {node_id: pos for pos, node_id in enumerate(ids)}
    if len(index) != len(ids):
        raise GraphError(f"node-link graph {name!r} repeats a node id")
    try:
        cost = [_first(d, COST_KEYS, pos, name) for pos, d in enumerate(nodes)]
        memory = [_first(d, MEMORY_KEYS, pos, name) for pos, d in enumerate(nodes)]
        edges = [(index[s], index[t]) for s, t in (_endpoints(link, name) for link in data["links"])]
    except KeyError as exc:
        raise GraphError(f"node-link graph {name!r} has a link to the unknown node {exc}") from None
    names = [str(d.get("name", ids[pos])) for pos, d in enumerate(nodes)]
    loss = extra.get("loss")
    loss = index[_id_like(loss, ids)] if loss is not None else _loss_node(nodes, names)
    order = _order(attrs.get("order"), ids, index, edges, name)
    short = reference_short_name(name)
    metadata = {"source": "moccasin" if any("out_cost" in d for d in nodes) else "checkmate-keras-export",
                "title": str(attrs.get("name", "")), **extra.get("metadata", {})}
    if any("param_cost" in d for d in nodes):
        metadata["parameter_bytes"] = int(sum(float(d.get("param_cost") or 0) for d in nodes))
    if order != list(range(len(ids))):
        metadata["original_ids"] = [ids[p] for p in order]
    match = re.search(r"_b(\d+)_", name)
    fields = {
        "constant_memory": extra.get("constant_memory", 0),
        "input_memory": extra.get("input_memory", 0),
        "batch_size": extra.get("batch_size", int(match.group(1)) if match else None),
        "batch_scaled": extra.get("batch_scaled"),
        "cost_unit": extra.get("cost_unit", REFERENCE_COST_UNITS.get(short, "unknown")),
        "name": extra.get("name", short),
        "metadata": metadata,
    }
    new_id = np.empty(len(ids), np.int64)
    new_id[order] = np.arange(len(ids))
    if fields["batch_scaled"] is not None:
        fields["batch_scaled"] = [fields["batch_scaled"][p] for p in order]
    return DFGraph(names=[names[p] for p in order], cost=[cost[p] for p in order],
                   memory=[memory[p] for p in order], edges=[(int(new_id[s]), int(new_id[t])) for s, t in edges],
                   loss=None if loss is None else int(new_id[loss]), **fields)


def graph_to_node_link(graph: DFGraph) -> dict[str, Any]:
    """Checkmate's export flavour (what ``../shared/data/graphs`` holds), plus ``graph["order"]`` and ``"remat"``."""
    backward = _backward_flags(graph)
    nodes = [{"id": i, "name": graph.names[i], "backward": bool(backward[i]), "cost_cpu": _number(graph.cost[i]),
              "cost_ram": int(graph.memory[i])} for i in range(graph.n)]
    links = [{"source": int(s), "target": int(t)} for s, t in graph.edges]
    return _document(graph, nodes, links)


def graph_to_moccasin(graph: DFGraph) -> dict[str, Any]:
    """MOCCASIN's flavour: ``out_cost``, ``duration``, ``param_cost``, links keyed ``"0"``/``"1"``, an ``order``.

    MOCCASIN's ``main.py`` reads a random-layered file (its path contains
    ``random_layered``) with links keyed ``"0"``/``"1"`` and renames ``out_cost``
    and ``duration`` when the graph's name starts so, and any other file with
    ``source``/``target`` links and ``cost_ram``/``cost_cpu``; every node and link
    here carries both spellings, so it runs on the file whatever it is called.
    Its CP model divides durations by their GCD, so durations must be whole
    numbers (:class:`GraphError` otherwise: rescale the costs first).
    """
    if np.any(graph.cost != np.round(graph.cost)):
        raise GraphError(f"graph {graph.name!r} has fractional costs, but MOCCASIN needs whole-number durations "
                         f"(it divides them by their GCD): scale the costs to integers first")
    backward = _backward_flags(graph)
    nodes = []
    for i in range(graph.n):
        cost, memory = int(graph.cost[i]), int(graph.memory[i])
        nodes.append({"id": i, "name": graph.names[i], "out_cost": memory, "duration": cost, "param_cost": 0,
                      "cost_ram": memory, "cost_cpu": cost, "backward": bool(backward[i])})
    links = [{"0": int(s), "1": int(t), "source": int(s), "target": int(t)} for s, t in graph.edges]
    return _document(graph, nodes, links)


# ---------------------------------------------------------------------- helpers
def _document(graph: DFGraph, nodes: list[dict[str, Any]], links: list[dict[str, Any]]) -> dict[str, Any]:
    extra = {"name": graph.name, "loss": graph.loss, "constant_memory": graph.constant_memory,
             "input_memory": graph.input_memory, "batch_size": graph.batch_size, "cost_unit": graph.cost_unit,
             "metadata": _plain(graph.metadata)}
    if not graph.batch_scaled.all():
        extra["batch_scaled"] = graph.batch_scaled.tolist()
    title = graph.metadata.get("title") or graph.name
    return {"directed": True, "multigraph": False,
            "graph": {"name": title, "order": list(range(graph.n)), "remat": extra},
            "nodes": nodes, "links": links}


def _backward_flags(graph: DFGraph) -> np.ndarray:
    return np.arange(graph.n) >= graph.loss if graph.loss is not None else np.zeros(graph.n, bool)


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def _plain(value: Any) -> Any:
    """Metadata made JSON-safe (numpy scalars and arrays to Python)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _first(node: dict[str, Any], keys: tuple[str, ...], pos: int, name: str) -> Any:
    for key in keys:
        if key in node:
            return node[key]
    raise GraphError(f"node-link graph {name!r}: node {node.get('id', pos)} has none of the fields "
                     f"{', '.join(keys)}")


def _endpoints(link: Any, name: str) -> tuple[Any, Any]:
    if isinstance(link, (list, tuple)) and len(link) == 2:
        return link[0], link[1]
    if isinstance(link, dict):
        for s, t in (("source", "target"), ("0", "1")):
            if s in link and t in link:
                return link[s], link[t]
    raise GraphError(f"node-link graph {name!r}: link {link!r} names no endpoints; give "
                     f"'source'/'target', '0'/'1' or a [source, target] pair")


def _id_like(value: Any, ids: list[Any]) -> Any:
    """A node id read back from JSON: ids may be ints while a stored reference is its string, or the reverse."""
    if value in ids:
        return value
    for other in ids:
        if str(other) == str(value):
            return other
    raise GraphError(f"graph['remat']['loss'] = {value!r} is not a node id")


def _loss_node(nodes: list[dict[str, Any]], names: list[str]) -> int | None:
    loss = next((i for i, s in enumerate(names) if s == "Loss"), None)
    if loss is None:
        loss = next((i for i, d in enumerate(nodes) if d.get("backward")), None)
    return loss


def _order(order: Any, ids: list[Any], index: dict[Any, int], edges: list[tuple[int, int]],
           name: str) -> list[int]:
    """Positions in execution order: the file's ``order`` if it gives one, else a stable topological sort."""
    n = len(ids)
    arr = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    if order is not None:
        try:
            positions = [index[_id_like(v, ids)] for v in order]
        except GraphError:
            raise GraphError(f"node-link graph {name!r}: graph['order'] names a node that does not exist") from None
        if sorted(positions) != list(range(n)):
            raise GraphError(f"node-link graph {name!r}: graph['order'] must list every node exactly once")
        rank = np.empty(n, np.int64)
        rank[positions] = np.arange(n)
        if len(arr) and np.any(rank[arr[:, 0]] >= rank[arr[:, 1]]):
            s, t = arr[np.flatnonzero(rank[arr[:, 0]] >= rank[arr[:, 1]])[0]]
            raise GraphError(f"node-link graph {name!r}: graph['order'] is not topological (edge {ids[s]!r} -> "
                             f"{ids[t]!r} runs against it); fix the order or drop it")
        return positions
    try:
        return topological_order(n, arr)
    except GraphError as exc:
        raise GraphError(f"node-link graph {name!r}: {exc}") from None
