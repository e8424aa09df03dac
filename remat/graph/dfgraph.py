"""The training data-flow graph (paper §4.1): nodes, costs, memory, edges.

A :class:`DFGraph` holds nodes ``0..n-1`` numbered in a topological order. Node
``i`` costs ``cost[i]`` to compute (FLOPs, seconds or another unit named by
``cost_unit``) and its output occupies ``memory[i]`` bytes. An edge ``(i, j)``
means node ``j`` reads node ``i``'s output. A training graph additionally names its
``loss`` node: nodes before it are the forward pass, nodes after it the backward
pass. A plain DAG (``loss=None``) is valid input for the MILP and LP rounding;
strategies that need the forward/backward split call
:meth:`DFGraph.require_training_structure`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "remat.dfgraph"
FORMAT_VERSION = 1


class GraphError(ValueError):
    """A graph that cannot be used: the message names the problem and the fix."""


@dataclass(frozen=True, eq=False)
class DFGraph:
    """A training data-flow graph; see the module docstring.

    ``constant_memory`` is the paper's constant overhead of eq. (2): bytes that
    stay resident for the whole step (inputs, parameters, parameter gradients).
    ``input_memory`` is the part of it that scales with the batch (the inputs);
    ``batch_scaled[i]`` says whether ``memory[i]`` and ``cost[i]`` grow linearly
    with the batch size, which :meth:`with_batch_size` relies on.
    """

    names: tuple[str, ...]
    cost: np.ndarray
    memory: np.ndarray
    edges: np.ndarray
    loss: int | None = None
    constant_memory: int = 0
    input_memory: int = 0
    batch_size: int | None = None
    batch_scaled: np.ndarray | None = None
    cost_unit: str = "unit"
    name: str = "graph"
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.names)
        object.__setattr__(self, "names", tuple(str(s) for s in self.names))
        cost = _as_vector(self.cost, n, "cost", float)
        memory = _as_vector(self.memory, n, "memory", float)
        for label, values in (("cost", cost), ("memory", memory)):
            bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
            if bad.size:
                i = int(bad[0])
                raise GraphError(
                    f"node {i} ({self.names[i]!r}) has {label} {float(values[i])}: "
                    f"{label} must be finite and non-negative"
                )
        if np.any(memory != np.round(memory)):
            i = int(np.flatnonzero(memory != np.round(memory))[0])
            raise GraphError(f"node {i} ({self.names[i]!r}) has fractional memory {float(memory[i])}: give whole bytes")
        object.__setattr__(self, "cost", cost)
        object.__setattr__(self, "memory", memory.astype(np.int64))
        object.__setattr__(self, "edges", _validated_edges(self.edges, self.names))
        if self.loss is not None:
            if not 0 <= int(self.loss) < n:
                raise GraphError(f"loss node {self.loss} is not a node id (0..{n - 1})")
            object.__setattr__(self, "loss", int(self.loss))
        for label in ("constant_memory", "input_memory"):
            value = getattr(self, label)
            if not (math.isfinite(value) and value >= 0):
                raise GraphError(f"{label} is {value!r}: it must be a finite, non-negative byte count")
            object.__setattr__(self, label, int(value))
        if self.input_memory > self.constant_memory:
            raise GraphError("input_memory exceeds constant_memory: inputs are part of the constant overhead")
        scaled = np.ones(n, bool) if self.batch_scaled is None else np.asarray(self.batch_scaled, bool)
        if scaled.shape != (n,):
            raise GraphError(f"batch_scaled has shape {scaled.shape}, expected ({n},)")
        object.__setattr__(self, "batch_scaled", scaled)
        if n == 0:
            raise GraphError("the graph has no nodes")

    # ------------------------------------------------------------------ structure
    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def m(self) -> int:
        return int(self.edges.shape[0])

    @cached_property
    def deps(self) -> tuple[np.ndarray, ...]:
        """``deps[k]``: the nodes ``k`` reads (the paper's Deps[k]), ascending."""
        return _group(self.edges[:, 1], self.edges[:, 0], self.n)

    @cached_property
    def users(self) -> tuple[np.ndarray, ...]:
        """``users[i]``: the nodes that read ``i`` (the paper's Users[i]), ascending."""
        return _group(self.edges[:, 0], self.edges[:, 1], self.n)

    @property
    def has_training_structure(self) -> bool:
        return self.loss is not None

    def require_training_structure(self, who: str) -> None:
        """Raise a clear error if this graph lacks the forward/loss/backward split."""
        if self.loss is None:
            raise GraphError(
                f"{who} needs a training graph with a loss node separating forward and backward "
                f"nodes, but graph {self.name!r} is a plain DAG; use strategy=ilp or an approx_lp "
                f"strategy, or give the graph a 'loss' node id"
            )

    @property
    def forward_nodes(self) -> np.ndarray:
        self.require_training_structure("forward_nodes")
        return np.arange(self.loss)

    @property
    def backward_nodes(self) -> np.ndarray:
        self.require_training_structure("backward_nodes")
        return np.arange(self.loss + 1, self.n)

    @property
    def is_backward(self) -> np.ndarray:
        """Boolean mask of backward nodes (the loss counts as backward, as in the reference files)."""
        self.require_training_structure("is_backward")
        return np.arange(self.n) >= self.loss

    @property
    def forward_cost(self) -> float:
        """Sum of forward-node costs (the left term of eq. 10)."""
        return float(self.cost[: self.loss].sum()) if self.loss is not None else float("nan")

    @property
    def total_cost(self) -> float:
        """Cost of computing every node once: checkpoint-all's cost."""
        return float(self.cost.sum())

    @property
    def parameter_memory(self) -> int:
        """The batch-independent part of the constant overhead (parameters and their gradients)."""
        return self.constant_memory - self.input_memory

    # ------------------------------------------------------------------ transforms
    def with_batch_size(self, batch_size: int) -> DFGraph:
        """The same graph at another batch size, without re-extraction.

        Every batch-scaled node's memory and cost, and the input memory, grow
        linearly with the batch; parameter memory does not. Memory is rounded to
        whole bytes (exact when the per-sample size is whole, as for real tensors).
        """
        if self.batch_size is None:
            raise GraphError(f"graph {self.name!r} does not record its batch size, so it cannot be rescaled")
        if int(batch_size) != batch_size or batch_size < 1:
            raise GraphError(f"batch size must be a positive integer, got {batch_size!r}")
        factor = int(batch_size) / self.batch_size
        scaled = self.batch_scaled
        memory = np.where(scaled, np.round(self.memory * factor), self.memory)
        cost = np.where(scaled, self.cost * factor, self.cost)
        inputs = round(self.input_memory * factor)
        return replace(
            self,
            memory=memory,
            cost=cost,
            input_memory=inputs,
            constant_memory=self.parameter_memory + inputs,
            batch_size=int(batch_size),
            metadata=dict(self.metadata),
        )

    def with_constant_memory(self, constant_memory: int, input_memory: int = 0) -> DFGraph:
        return replace(self, constant_memory=constant_memory, input_memory=input_memory)

    # ------------------------------------------------------------------ I/O
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "name": self.name,
            "cost_unit": self.cost_unit,
            "batch_size": self.batch_size,
            "loss": self.loss,
            "constant_memory": self.constant_memory,
            "input_memory": self.input_memory,
            "metadata": self.metadata,
            "nodes": [
                {"id": i, "name": s, "cost": float(c), "memory": int(mm), "batch_scaled": bool(b)}
                for i, (s, c, mm, b) in enumerate(zip(self.names, self.cost, self.memory, self.batch_scaled))
            ],
            "edges": self.edges.tolist(),
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))

    def __repr__(self) -> str:
        kind = "training graph" if self.loss is not None else "DAG"
        return f"DFGraph({self.name!r}: {kind}, n={self.n}, m={self.m}, cost_unit={self.cost_unit!r})"


# ---------------------------------------------------------------------- helpers
def _as_vector(values: Any, n: int, label: str, dtype: type) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise GraphError(f"{label} must be numbers, one per node: {exc}") from None
    if arr.ndim == 0:
        arr = np.full(n, arr, dtype=dtype)
    if arr.shape != (n,):
        raise GraphError(f"{label} has {arr.size} entries for {n} nodes: give one per node")
    return arr


def _validated_edges(edges: Any, names: Sequence[str]) -> np.ndarray:
    n = len(names)
    arr = np.asarray(edges if len(edges) else np.zeros((0, 2)), dtype=float)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise GraphError(f"edges must be (source, target) pairs, got an array of shape {arr.shape}")
    if np.any(arr != np.round(arr)):
        raise GraphError("edge endpoints must be integer node ids")
    arr = arr.astype(np.int64)
    out_of_range = np.flatnonzero((arr < 0).any(1) | (arr >= n).any(1))
    if out_of_range.size:
        s, t = arr[out_of_range[0]]
        raise GraphError(f"dangling edge {s} -> {t}: node ids run from 0 to {n - 1}")
    self_loops = np.flatnonzero(arr[:, 0] == arr[:, 1])
    if self_loops.size:
        i = arr[self_loops[0], 0]
        raise GraphError(f"not a DAG: node {i} ({names[i]!r}) has an edge to itself")
    backwards = np.flatnonzero(arr[:, 0] > arr[:, 1])
    if backwards.size:
        cycle = find_cycle(n, arr)
        if cycle:
            path = " -> ".join(f"{i} ({names[i]!r})" for i in cycle + cycle[:1])
            raise GraphError(f"not a DAG: cycle {path}; remove an edge of the cycle")
        s, t = arr[backwards[0]]
        raise GraphError(
            f"node ids are not in topological order: edge {s} -> {t} points backwards; "
            f"renumber the nodes with remat.graph.topologically_sorted(...)"
        )
    arr = np.unique(arr, axis=0)
    return arr.reshape(-1, 2)


def _group(keys: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    order = np.lexsort((values, keys))
    keys, values = keys[order], values[order]
    bounds = np.searchsorted(keys, np.arange(n + 1))
    return tuple(values[bounds[i] : bounds[i + 1]] for i in range(n))


def find_cycle(n: int, edges: np.ndarray) -> list[int]:
    """One directed cycle of the graph as a node list, or ``[]`` if it is acyclic."""
    adj: list[list[int]] = [[] for _ in range(n)]
    for s, t in edges:
        adj[int(s)].append(int(t))
    state = [0] * n  # 0 unseen, 1 on stack, 2 done
    for root in range(n):
        if state[root]:
            continue
        stack = [(root, iter(adj[root]))]
        path = [root]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                path.pop()
                state[node] = 2
            elif state[nxt] == 1:
                return path[path.index(nxt) :]
            elif state[nxt] == 0:
                state[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(adj[nxt])))
    return []


def topological_order(n: int, edges: np.ndarray) -> list[int]:
    """Kahn's algorithm taking the smallest ready id first: ids already in topological order come back unchanged.

    Raises GraphError naming a cycle if there is one.
    """
    arr = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    cycle = find_cycle(n, arr)
    if cycle:
        raise GraphError(f"not a DAG: cycle through nodes {cycle}; remove an edge of the cycle")
    indeg = np.zeros(n, int)
    np.add.at(indeg, arr[:, 1], 1)
    adj: list[list[int]] = [[] for _ in range(n)]
    for s, t in arr:
        adj[s].append(t)
    import heapq

    ready = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in adj[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, j)
    return order


def topologically_sorted(
    names: Sequence[str],
    cost: Sequence[float],
    memory: Sequence[float],
    edges: Sequence[tuple[int, int]],
    **kwargs: Any,
) -> DFGraph:
    """Build a DFGraph from a DAG whose ids are not in topological order, renumbering them.

    Ties keep the original id order, so an already-sorted graph is unchanged.
    """
    n = len(names)
    arr = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    order = topological_order(n, arr)
    new_id = np.empty(n, np.int64)
    new_id[order] = np.arange(n)
    loss = kwargs.pop("loss", None)
    return DFGraph(
        names=[names[i] for i in order],
        cost=np.asarray(cost, float)[order],
        memory=np.asarray(memory, float)[order],
        edges=new_id[arr],
        loss=None if loss is None else int(new_id[loss]),
        **kwargs,
    )
