"""Synthetic training graphs: the paper's linear chain and seeded random training DAGs."""

from __future__ import annotations

import math

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


#: The widths MOCCASIN published its random layered graphs RL100 ... RL1000 with (its ``data/`` file names);
#: the other parameters were the same for all four: width variation 0.75, edge density 0.2, skip density 0.14.
MOCCASIN_RL_WIDTHS = {100: 0.27, 250: 0.43, 500: 0.36, 1000: 0.31}


def random_layered_dag(
    nodes: int,
    seed: int,
    width: float | None = None,
    width_variation: float = 0.75,
    edge_density: float = 0.2,
    skip_density: float = 0.14,
) -> DFGraph:
    """A seeded random layered DAG, the RL family of the MOCCASIN benchmark (Bartan et al. 2023).

    MOCCASIN's RL graphs follow the layered-graph generator of Gagrani et al.
    (2022, App. A) with five parameters: the node count, a width ``w``, the
    variation of layer widths, the density of edges between consecutive layers
    and the density of skip connections. The published sampler is not part of
    either artifact, so this one takes the same parameters and is calibrated to
    the four published graphs (their layer counts, edge counts, skip spans and
    cost ranges, within about 20 %):

    * a source node, then layers of ``round(mu * U(1 - v, 1 + v))`` nodes
      (at least one) with ``mu = 2 w sqrt(n)`` until ``n - 2`` nodes are placed,
      then a sink;
    * every node reads one random node of the layer before and, with probability
      ``edge_density``, each other one; every node has at least one reader;
    * each pair two or more layers apart is a skip edge with probability
      ``3 * skip_density * edge_density / layers``;
    * durations (costs) uniform on 1..999, output sizes (memory) Gamma(1.5, 1200)
      rounded to tens (the published graphs' medians are about 500 and 1500);
      the source and sink cost 0.

    Nodes are numbered in a random topological order (the order MOCCASIN's
    budgets refer to: fractions of that order's peak with eager freeing, which is
    :func:`remat.budget.no_recompute_peak` here). ``width`` defaults to MOCCASIN's
    for its four sizes and to 0.31 otherwise. The graph is a plain DAG (no loss).
    """
    n = int(nodes)
    if n < 3:
        raise ValueError(f"a layered DAG needs at least 3 nodes (source, one layer, sink), got {nodes!r}")
    if not 0 <= width_variation < 1:
        raise ValueError(f"width_variation must be in [0, 1), got {width_variation!r}")
    w = MOCCASIN_RL_WIDTHS.get(n, 0.31) if width is None else float(width)
    rng = np.random.default_rng(seed)
    mu = max(2 * w * math.sqrt(n), 1.0)
    layers: list[np.ndarray] = [np.array([0])]
    placed = 1
    while placed < n - 1:
        size = max(1, round(mu * rng.uniform(1 - width_variation, 1 + width_variation)))
        size = min(size, n - 1 - placed)
        layers.append(np.arange(placed, placed + size))
        placed += size
    layers.append(np.array([n - 1]))
    layer_of = np.empty(n, np.int64)
    for k, members in enumerate(layers):
        layer_of[members] = k
    edges: set[tuple[int, int]] = set()
    for lower, upper in zip(layers[:-1], layers[1:]):
        pick = rng.random((lower.size, upper.size)) < edge_density
        pick[rng.integers(lower.size, size=upper.size), np.arange(upper.size)] = True  # an input for every node
        for row in np.flatnonzero(~pick.any(1)):  # and an output
            pick[row, rng.integers(upper.size)] = True
        rows, cols = np.nonzero(pick)
        edges.update(zip(lower[rows].tolist(), upper[cols].tolist()))
    p_skip = 3 * skip_density * edge_density / len(layers)
    u, v = np.triu_indices(n, 1)
    far = layer_of[v] - layer_of[u] >= 2
    chosen = far & (rng.random(u.size) < p_skip)
    edges.update(zip(u[chosen].tolist(), v[chosen].tolist()))
    cost = rng.integers(1, 1000, n).astype(float)
    memory = np.maximum(10 * np.round(rng.gamma(1.5, 1200.0, n) / 10), 10)
    cost[0] = cost[-1] = 0.0
    # A random topological order: Kahn's algorithm taking a random ready node each time.
    order = _random_topological_order(n, np.array(sorted(edges)), rng)
    new_id = np.empty(n, np.int64)
    new_id[order] = np.arange(n)
    arr = new_id[np.array(sorted(edges))]
    return DFGraph(
        names=[f"v{i}" for i in order],
        cost=cost[order],
        memory=memory[order],
        edges=arr,
        name=f"rl{n}_s{seed}",
        metadata={"generator": "random_layered_dag", "layer": layer_of[order].tolist(), "width": w,
                  "width_variation": width_variation, "edge_density": edge_density, "skip_density": skip_density},
    )


def _random_topological_order(n: int, edges: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    indeg = np.bincount(edges[:, 1], minlength=n)
    succ: list[list[int]] = [[] for _ in range(n)]
    for s, t in edges:
        succ[int(s)].append(int(t))
    ready = [i for i in range(n) if indeg[i] == 0]
    order = []
    while ready:
        i = ready.pop(int(rng.integers(len(ready))))
        order.append(i)
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
    return np.array(order)


# What autograd saves for each kind of op in a transformer block: its inputs, its output, or nothing (eq. 1b edges
# from the forward node or its inputs to the node's vector-Jacobian product).
_SAVES = {"embed": (), "add": (), "linear": ("inputs",), "layernorm": ("inputs",), "gelu": ("inputs",),
          "softmax": ("output",), "dropout": ("output",), "matmul": ("inputs",), "loss": ()}


def transformer_training_graph(
    layers: int = 12,
    hidden: int = 768,
    heads: int = 12,
    seq: int = 1024,
    batch: int = 1,
    vocab: int = 50257,
    bytes_per_element: int = 4,
) -> DFGraph:
    """The training graph of a GPT-2-style decoder at the granularity of its tensor ops (FLOP costs, fp32 bytes).

    Forward: token plus position embedding, then per layer ``ln1 -> qkv -> scores
    (q k^T) -> softmax -> dropout -> context (p v) -> proj -> +residual -> ln2 ->
    fc1 -> gelu -> fc2 -> +residual`` (13 ops), a final layer norm and the
    language-model head; ``2 (13 layers + 3) + 1`` nodes. The loss reads the logits.
    As in :func:`random_training_graph`, the backward node of forward node ``u``
    is ``2L - u``; it reads the gradients of ``u``'s users and what autograd saves
    for ``u`` (a linear layer its input, softmax and dropout their output, the
    attention products both operands, layer norm and GELU their input). Memory is
    each output's bytes at ``batch`` (a gradient node holds its forward node's
    size); costs are multiply-add FLOPs (2 per MAC), elementwise ops one per
    element, a backward twice its forward. Parameters and their gradients are the
    constant overhead. ``layers=12, hidden=768, heads=12, seq=1024`` is GPT-2
    small (319 nodes); 96 layers give 2,503 nodes.
    """
    if min(layers, hidden, heads, seq, batch, vocab) < 1 or hidden % heads:
        raise ValueError("layers, hidden, heads, seq, batch and vocab must be positive, and heads must divide hidden")
    b, s, d, h = batch, seq, hidden, heads
    ops: list[tuple[str, str, list[int], float, float]] = []  # (name, kind, inputs, output elements, forward flops)

    def op(name: str, kind: str, inputs: list[int], elements: float, flops: float) -> int:
        ops.append((name, kind, inputs, elements, flops))
        return len(ops) - 1

    x = op("embed", "embed", [], b * s * d, b * s * d)
    for i in range(layers):
        ln1 = op(f"h{i}.ln1", "layernorm", [x], b * s * d, 5 * b * s * d)
        qkv = op(f"h{i}.qkv", "linear", [ln1], 3 * b * s * d, 2 * b * s * d * 3 * d)
        scores = op(f"h{i}.scores", "matmul", [qkv], b * h * s * s, 2 * b * s * s * d)
        probs = op(f"h{i}.softmax", "softmax", [scores], b * h * s * s, 5 * b * h * s * s)
        drop = op(f"h{i}.attn_dropout", "dropout", [probs], b * h * s * s, b * h * s * s)
        ctx = op(f"h{i}.context", "matmul", [drop, qkv], b * s * d, 2 * b * s * s * d)
        proj = op(f"h{i}.proj", "linear", [ctx], b * s * d, 2 * b * s * d * d)
        x = op(f"h{i}.add1", "add", [x, proj], b * s * d, b * s * d)
        ln2 = op(f"h{i}.ln2", "layernorm", [x], b * s * d, 5 * b * s * d)
        fc1 = op(f"h{i}.fc1", "linear", [ln2], 4 * b * s * d, 8 * b * s * d * d)
        gelu = op(f"h{i}.gelu", "gelu", [fc1], 4 * b * s * d, 8 * 4 * b * s * d)
        fc2 = op(f"h{i}.fc2", "linear", [gelu], b * s * d, 8 * b * s * d * d)
        x = op(f"h{i}.add2", "add", [x, fc2], b * s * d, b * s * d)
    lnf = op("ln_f", "layernorm", [x], b * s * d, 5 * b * s * d)
    op("lm_head", "linear", [lnf], b * s * vocab, 2 * b * s * d * vocab)
    L = len(ops)

    def back(u: int) -> int:
        return 2 * L - u

    edges = [(p, u) for u, (_, _, inputs, _, _) in enumerate(ops) for p in inputs]
    users: list[list[int]] = [[] for _ in range(L)]
    for p, u in edges:
        users[p].append(u)
    edges.append((L - 1, L))
    edges.append((L, back(L - 1)))
    for u, (_, kind, inputs, _, _) in enumerate(ops):
        edges += [(back(v), back(u)) for v in users[u]]  # the gradient of u's output
        saved = _SAVES[kind]
        if "inputs" in saved:
            edges += [(p, back(u)) for p in inputs]
        if "output" in saved:
            edges.append((u, back(u)))
    elements = np.array([e for _, _, _, e, _ in ops], float)
    flops = np.array([f for _, _, _, _, f in ops], float)
    memory = np.concatenate([elements, [b * s], elements[::-1]]) * bytes_per_element
    cost = np.concatenate([flops, [3 * b * s * vocab], 2 * flops[::-1]])
    params = vocab * d + s * d + layers * (12 * d * d + 13 * d) + 2 * d
    names = [name for name, _, _, _, _ in ops] + ["loss"] + [f"{name}_backward" for name, _, _, _, _ in ops[::-1]]
    return DFGraph(names=names, cost=cost, memory=memory, edges=sorted(set(edges)), loss=L,
                   constant_memory=2 * params * bytes_per_element, batch_size=batch, cost_unit="flop",
                   name=f"transformer{layers}_d{d}_s{s}_b{b}",
                   metadata={"generator": "transformer_training_graph", "layers": layers, "hidden": d, "heads": h,
                             "seq": s, "vocab": vocab})
