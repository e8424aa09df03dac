"""Synthetic training graphs: the paper's linear chain and seeded random training DAGs."""

from __future__ import annotations

import numpy as np

from remat.graph import DFGraph


def linear_chain(layers: int, cost: float = 1.0, memory: int = 1) -> DFGraph:
    """The paper's linear training graph of ``layers`` layers (§4.6, App. A).

    Nodes ``0..2L``: forward ``0..L-1``, loss ``L``, backward ``L+1..2L``; edges
    ``i -> i+1`` and, for each forward node ``i``, ``i -> 2L-i`` (its backward
    node). Unit cost and memory by default; ``layers=8`` is the ``n = 17`` net.
    """
    if int(layers) != layers or layers < 1:
        raise ValueError(f"layers must be a positive integer, got {layers!r}")
    n = 2 * layers + 1
    chain = [(i, i + 1) for i in range(n - 1)]
    skips = [(i, 2 * layers - i) for i in range(layers)]
    names = [f"fwd{i}" for i in range(layers)] + ["loss"] + [f"bwd{layers - 1 - j}" for j in range(layers)]
    return DFGraph(
        names=names,
        cost=np.full(n, float(cost)),
        memory=np.full(n, memory),
        edges=chain + skips,
        loss=layers,
        cost_unit="unit",
        name=f"linear{layers}",
        batch_size=1,
    )


def random_training_graph(
    forward_nodes: int,
    seed: int,
    skip_probability: float = 0.3,
    max_cost: int = 10,
    max_memory: int = 10,
) -> DFGraph:
    """A seeded random training DAG with ``2 * forward_nodes + 1`` nodes.

    Forward node ``i`` reads ``i-1`` and, with ``skip_probability``, each earlier
    node (skip connections). The loss reads the last forward node. Backward node
    ``b(u) = 2L - u`` computes the vector-Jacobian product of forward node ``u``:
    it reads the gradient of each user ``v`` of ``u`` (node ``b(v)``, or the loss
    for the last forward node) and what autograd saves for ``u`` - its output,
    its inputs, or both, drawn at random per node. Integer costs and memories
    are drawn from ``1..max_cost`` and ``1..max_memory``.
    """
    L = int(forward_nodes)
    if L < 1:
        raise ValueError(f"forward_nodes must be >= 1, got {forward_nodes!r}")
    rng = np.random.default_rng(seed)
    n = 2 * L + 1

    def b(u: int) -> int:
        return 2 * L - u

    fwd = [(i - 1, i) for i in range(1, L)]
    fwd += [(p, i) for i in range(2, L) for p in range(i - 1) if rng.random() < skip_probability]
    edges = list(fwd) + [(L - 1, L), (L, b(L - 1))]
    deps = {i: [p for p, c in fwd if c == i] for i in range(L)}
    for p, c in fwd:
        edges.append((b(c), b(p)))
    for u in range(L):
        saves = rng.integers(3)  # 0: output, 1: inputs, 2: both
        if saves in (0, 2) or not deps[u]:
            edges.append((u, b(u)))
        if saves in (1, 2):
            edges.extend((p, b(u)) for p in deps[u])
    names = [f"f{i}" for i in range(L)] + ["loss"] + [f"b{L - 1 - j}" for j in range(L)]
    return DFGraph(
        names=names,
        cost=rng.integers(1, max_cost + 1, n).astype(float),
        memory=rng.integers(1, max_memory + 1, n),
        edges=edges,
        loss=L,
        cost_unit="unit",
        name=f"random{L}_s{seed}",
        batch_size=1,
    )


def random_dag(
    nodes: int, seed: int, edge_probability: float = 0.3, max_cost: int = 10, max_memory: int = 10
) -> DFGraph:
    """A seeded random plain DAG (no loss, no forward/backward labels), connected as a chain plus random edges."""
    rng = np.random.default_rng(seed)
    edges = [(i - 1, i) for i in range(1, nodes)]
    edges += [(p, i) for i in range(2, nodes) for p in range(i - 1) if rng.random() < edge_probability]
    return DFGraph(
        names=[f"v{i}" for i in range(nodes)],
        cost=rng.integers(1, max_cost + 1, nodes).astype(float),
        memory=rng.integers(1, max_memory + 1, nodes),
        edges=edges,
        name=f"dag{nodes}_s{seed}",
    )
