"""A lower bound on the cost of every schedule of a small graph: the pebble game with free deletions (App. A).

The game: the state is the set of resident values and the set of sinks computed so
far. A move computes a node whose inputs are all resident, at its cost, provided the
constant overhead, the resident values and its own output fit the budget; deleting a
value is free. The goal is every sink computed. Dijkstra over the states gives the
game's least cost.

Why it bounds the MILPs from below. Read any schedule of eqs. (1a)-(1f) with memory
(2)-(5) - the unpartitioned model of App. A, and so also problem (9), whose schedules
are a subset - as its sequence of evaluations, stage by stage in id order. Before each
evaluation, delete every value the schedule's ``U`` no longer counts. Each input is
still resident (eq. 5 frees a value only after its last reader in the stage, and
eq. 1c keeps a checkpoint only if it was resident), and the game's memory at the move
is at most ``U[t, k]``, which the budget bounds. So that sequence is a play of the
game with the schedule's cost, and computes every sink (eq. 1e, generalised). Hence
the game's optimum is at most either MILP's optimum: where it equals a schedule's
cost, that schedule is proved optimal for both models.

The state space is exponential; this is for the paper's 8-layer chain and graphs of
that size (``max_states`` stops it with a clear error).
"""

from __future__ import annotations

import heapq

import numpy as np

from remat.graph import DFGraph, GraphError


def pebbling_lower_bound(graph: DFGraph, budget: float, max_states: int = 2_000_000) -> float | None:
    """The least cost of the pebble game within ``budget`` (see the module docstring); None if no play reaches
    the goal, which proves every schedule infeasible at that budget."""
    n = graph.n
    if n > 62:
        raise GraphError(f"the pebble game enumerates resident sets: graph {graph.name!r} has {n} nodes, "
                         f"use it on graphs of at most a few dozen")
    room = float(budget) - graph.constant_memory
    memory = [float(m) for m in graph.memory]
    cost = [float(c) for c in graph.cost]
    deps = [sum(1 << int(p) for p in graph.deps[v]) for v in range(n)]
    sink_bit = {int(v): j for j, v in enumerate(np.setdiff1d(np.arange(n), graph.edges[:, 0]))}
    goal = (1 << len(sink_bit)) - 1
    start = (0, 0)
    best = {start: 0.0}
    used = {0: 0.0}
    queue = [(0.0, 0, 0)]
    while queue:
        dist, resident, done = heapq.heappop(queue)
        if dist > best.get((resident, done), np.inf):
            continue
        if done == goal:
            return dist
        if len(best) > max_states:
            raise GraphError(f"the pebble game on graph {graph.name!r} passed {max_states} states: "
                             f"the graph is too large for this exact bound")
        held = used[resident]
        moves = []
        for v in range(n):
            bit = 1 << v
            if resident & bit:
                moves.append((resident & ~bit, done, 0.0, held - memory[v]))
            elif deps[v] & resident == deps[v] and held + memory[v] <= room * (1 + 1e-12):
                flag = 1 << sink_bit[v] if v in sink_bit else 0
                moves.append((resident | bit, done | flag, cost[v], held + memory[v]))
        for state, finished, step, mem in moves:
            key = (state, finished)
            total = dist + step
            if total < best.get(key, np.inf):
                best[key] = total
                used[state] = mem
                heapq.heappush(queue, (total, state, finished))
    return None
