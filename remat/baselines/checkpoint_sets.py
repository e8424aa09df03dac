"""Chen et al.'s checkpointing heuristics and Checkmate's generalisations (§6.1, App. B).

A heuristic picks a checkpoint set among candidate forward nodes; the set becomes
a checkpoint matrix S for a frontier-advancing schedule (:func:`checkpoint_set_s`)
and :func:`~remat.baselines.recompute.solve_min_r` supplies the recomputation R.

* ``chen_*`` (Chen et al. 2016): every forward node of a *linear* forward graph is
  a candidate; other graphs are refused.
* ``ap_*`` (App. B.1): the articulation points of the undirected forward graph.
* ``linearized_*`` (App. B.2): every forward node, in topological (id) order.

``*_sqrtn`` checkpoints every ``floor(sqrt(|C|))``-th candidate; ``*_greedy`` runs
Chen's memory-budget greedy for a geometric grid of segment budgets ``b`` and keeps
the cheapest schedule within the budget. On a linear chain every forward node is an
articulation point, so all three families produce the same schedules there.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator
from typing import Any

import networkx as nx
import numpy as np

from remat.baselines.recompute import solve_min_r
from remat.graph import DFGraph, GraphError
from remat.result import SolveResult, result_from_schedule
from remat.schedule import Schedule, simulate

GREEDY_GRID_SIZE = 200


# ---------------------------------------------------------------- candidates
def require_linear_forward(graph: DFGraph, who: str) -> None:
    """Raise GraphError unless forward node ``i`` reads only forward node ``i-1`` (a chain)."""
    graph.require_training_structure(who)
    L = graph.loss
    e = graph.edges
    fwd = e[e[:, 1] < L]
    skips = fwd[fwd[:, 1] - fwd[:, 0] != 1]
    if len(skips) or len(fwd) != max(L - 1, 0):
        detail = f"edge {int(skips[0, 0])}->{int(skips[0, 1])}" if len(skips) else "a disconnected forward pass"
        raise GraphError(
            f"{who} needs a linear forward graph, but graph {graph.name!r} has {detail}; "
            f"use the ap_ or linearized_ generalisation instead"
        )


def chain_candidates(graph: DFGraph) -> np.ndarray:
    """Chen's candidates: every layer of a linear network."""
    require_linear_forward(graph, "chen heuristics")
    return graph.forward_nodes


def linearized_candidates(graph: DFGraph) -> np.ndarray:
    """App. B.2: the forward nodes as a chain in topological (id) order."""
    graph.require_training_structure("linearized heuristics")
    return graph.forward_nodes


def articulation_candidates(graph: DFGraph) -> np.ndarray:
    """App. B.1: articulation points of the undirected forward graph, ascending.

    A virtual source is joined to every forward node without forward inputs and a
    virtual sink to every forward node without forward readers (the one feeding
    the loss), so the first and last layers count as cut vertices like any other
    node whose removal separates input from output.
    """
    graph.require_training_structure("articulation-point heuristics")
    L = graph.loss
    e = graph.edges
    fwd = e[e[:, 1] < L]
    g = nx.Graph()
    g.add_nodes_from(range(L))
    g.add_edges_from(map(tuple, fwd.tolist()))
    has_input = np.zeros(L, bool)
    has_input[fwd[:, 1]] = True
    has_reader = np.zeros(L, bool)
    has_reader[fwd[:, 0]] = True
    source, sink = -1, L
    g.add_edges_from((source, int(v)) for v in np.flatnonzero(~has_input))
    g.add_edges_from((int(v), sink) for v in np.flatnonzero(~has_reader))
    return np.array(sorted(v for v in nx.articulation_points(g) if 0 <= v < L), dtype=np.int64)


# ---------------------------------------------------------------- checkpoint selection
def sqrtn_checkpoints(candidates: np.ndarray) -> np.ndarray:
    """Chen et al. §4.1: every ``k = floor(sqrt(|C|))``-th candidate (the k-th, 2k-th, ...).

    On a chain of ``L = k^2`` layers this cuts the network into ``k`` segments of
    ``k`` layers, each ending in a checkpoint: ``O(sqrt L)`` memory for one extra
    forward pass.
    """
    candidates = np.asarray(candidates, dtype=np.int64)
    if len(candidates) == 0:
        return candidates
    k = math.isqrt(len(candidates))
    return candidates[k - 1 :: k]


def greedy_checkpoints(graph: DFGraph, candidates: np.ndarray, segment_budget: float) -> np.ndarray:
    """Chen et al. Alg. 3 (memory planning with budget ``b``).

    Walk the forward nodes in order adding up output bytes; at a candidate whose
    running sum exceeds ``b``, checkpoint it and restart the sum.
    """
    is_candidate = np.zeros(graph.loss, bool)
    is_candidate[np.asarray(candidates, dtype=np.int64)] = True
    chosen, running = [], 0.0
    for v in range(graph.loss):
        running += float(graph.memory[v])
        if is_candidate[v] and running > segment_budget:
            chosen.append(v)
            running = 0.0
    return np.array(chosen, dtype=np.int64)


def greedy_budget_grid(graph: DFGraph, size: int = GREEDY_GRID_SIZE) -> np.ndarray:
    """Segment budgets ``b``: 0 and a geometric grid from the smallest to the total activation size."""
    mem = graph.memory[: graph.loss].astype(float)
    positive = mem[mem > 0]
    if positive.size == 0:
        return np.zeros(1)
    return np.concatenate([[0.0], np.geomspace(positive.min(), positive.sum(), max(size - 1, 1))])


def greedy_checkpoint_sets(graph: DFGraph, candidates: np.ndarray,
                           grid_size: int = GREEDY_GRID_SIZE) -> Iterator[np.ndarray]:
    """Chen's greedy checkpoint set for each segment budget of :func:`greedy_budget_grid`."""
    return (greedy_checkpoints(graph, candidates, b) for b in greedy_budget_grid(graph, grid_size))


# ---------------------------------------------------------------- checkpoint set -> schedule
def checkpoint_set_s(graph: DFGraph, checkpoints: Iterable[int]) -> np.ndarray:
    """The checkpoint matrix S of a frontier-advancing schedule that checkpoints ``checkpoints``.

    The rules (App. B; Chen et al.'s segment recomputation):

    * backward values (and the loss) stay resident until their last reader;
    * a forward value stays resident until its last forward reader (or the loss);
    * a checkpoint stays from its computation until its last reader;
    * the non-checkpoint forward nodes between two consecutive checkpoints form a
      segment; from the first stage in which a backward node reads one of them,
      each segment node that a backward node reads is resident until its last
      reader, so min-R recomputes the segment once, at that stage;
    * the segment after the last checkpoint is never dropped: nothing but the
      loss separates its forward use from its backward use, and keeping it costs
      no more memory than recomputing it at the start of the backward pass.

    On a chain of ``k^2`` unit layers with every k-th checkpointed the peak is
    ``2k`` units (k-1 checkpoints, one gradient, k-1 segment values, one new
    gradient): Chen's ``2 sqrt(n)``.
    """
    graph.require_training_structure("checkpoint_set_s")
    n, L = graph.n, graph.loss
    users = graph.users
    last_user = np.array([int(u[-1]) if len(u) else -1 for u in users])
    S = np.zeros((n, n), bool)

    def keep(v: int, start: int, end: int) -> None:
        if end >= start:
            S[start : end + 1, v] = True

    is_ck = np.zeros(L, bool)
    is_ck[np.asarray(list(checkpoints), dtype=np.int64)] = True
    for v in range(L, n):
        keep(v, v + 1, last_user[v])
    for v in range(L):
        fwd_users = users[v][users[v] <= L]
        keep(v, v + 1, int(fwd_users[-1]) if len(fwd_users) else -1)
        if is_ck[v]:
            keep(v, v + 1, last_user[v])
    boundaries = np.flatnonzero(is_ck)
    starts = np.concatenate([[0], boundaries + 1])
    ends = np.concatenate([boundaries, [L]])
    for a, b in zip(starts[:-1], ends[:-1]):
        segment = range(int(a), int(b))
        readers = [int(u) for v in segment for u in users[v] if u > L]
        if not readers:
            continue
        first = min(readers)
        for v in segment:
            keep(v, first + 1, last_user[v])
    for v in range(int(starts[-1]), L):
        keep(v, v + 1, last_user[v])
    return S


def checkpoint_set_schedule(graph: DFGraph, checkpoints: Iterable[int]) -> Schedule:
    """:func:`checkpoint_set_s` with the minimum recomputation R for it."""
    S = checkpoint_set_s(graph, checkpoints)
    return Schedule(solve_min_r(graph, S), S)


# ---------------------------------------------------------------- strategies
def cheapest_within_budget(graph: DFGraph, budget: float,
                           candidates: Iterable[tuple[Any, Schedule]]) -> tuple[Any, Schedule]:
    """``(key, schedule)`` of the cheapest candidate in budget under ``simulate()`` (ties: lower peak).

    With none in budget, the candidate of least peak (ties: lower cost), which its
    strategy then reports as infeasible with that peak as ``min_feasible_budget``.
    """
    best_in = best_any = None
    for key, schedule in candidates:
        sim = simulate(graph, schedule, plan=False)
        entry = (sim.cost, sim.peak_memory, schedule, key)
        if sim.within(budget) and (best_in is None or entry[:2] < best_in[:2]):
            best_in = entry
        if best_any is None or (entry[1], entry[0]) < (best_any[1], best_any[0]):
            best_any = entry
    chosen = best_in or best_any
    return chosen[3], chosen[2]


def best_checkpoint_set(
    name: str, graph: DFGraph, budget: float, sets: Iterable[np.ndarray], start: float, **extra: object
) -> SolveResult:
    """Evaluate every distinct checkpoint set; keep the cheapest in budget (ties: lower peak).

    With none in budget the smallest-peak schedule is returned as infeasible, so
    ``min_feasible_budget`` is the least memory any of the sets needs.
    """
    distinct = dict.fromkeys(tuple(int(c) for c in cks) for cks in sets)
    key, schedule = cheapest_within_budget(graph, budget, ((key, checkpoint_set_schedule(graph, key))
                                                           for key in distinct))
    stats = {"checkpoints": list(key), "checkpoint_sets_tried": len(distinct)}
    return result_from_schedule(
        name, graph, schedule, budget, time.perf_counter() - start, stats=stats, options=dict(extra)
    )


def _sqrtn(name: str, graph: DFGraph, budget: float, candidates: np.ndarray, start: float) -> SolveResult:
    return best_checkpoint_set(name, graph, budget, [sqrtn_checkpoints(candidates)], start)


def _greedy(
    name: str, graph: DFGraph, budget: float, candidates: np.ndarray, start: float, grid_size: int
) -> SolveResult:
    return best_checkpoint_set(name, graph, budget, greedy_checkpoint_sets(graph, candidates, grid_size), start,
                               grid_size=grid_size)


def solve_chen_sqrtn(graph: DFGraph, budget: float, **_: object) -> SolveResult:
    """Chen et al. 2016 sqrt(n) on a linear network (§6.1): every floor(sqrt(L))-th layer."""
    start = time.perf_counter()
    return _sqrtn("chen_sqrtn", graph, budget, chain_candidates(graph), start)


def solve_chen_greedy(graph: DFGraph, budget: float, grid_size: int = GREEDY_GRID_SIZE, **_: object) -> SolveResult:
    """Chen et al. 2016 greedy on a linear network, searched over the segment budget b (§6.1)."""
    start = time.perf_counter()
    return _greedy("chen_greedy", graph, budget, chain_candidates(graph), start, grid_size)


def solve_ap_sqrtn(graph: DFGraph, budget: float, **_: object) -> SolveResult:
    """AP sqrt(n) (App. B.1): Chen's sqrt(n) over articulation points, then min-R."""
    start = time.perf_counter()
    return _sqrtn("ap_sqrtn", graph, budget, articulation_candidates(graph), start)


def solve_ap_greedy(graph: DFGraph, budget: float, grid_size: int = GREEDY_GRID_SIZE, **_: object) -> SolveResult:
    """AP greedy (App. B.1): Chen's greedy over articulation points, then min-R."""
    start = time.perf_counter()
    return _greedy("ap_greedy", graph, budget, articulation_candidates(graph), start, grid_size)


def solve_linearized_sqrtn(graph: DFGraph, budget: float, **_: object) -> SolveResult:
    """Linearized sqrt(n) (App. B.2): Chen's sqrt(n) on the topological order, then min-R."""
    start = time.perf_counter()
    return _sqrtn("linearized_sqrtn", graph, budget, linearized_candidates(graph), start)


def solve_linearized_greedy(
    graph: DFGraph, budget: float, grid_size: int = GREEDY_GRID_SIZE, **_: object
) -> SolveResult:
    """Linearized greedy (App. B.2): Chen's greedy on the topological order, then min-R."""
    start = time.perf_counter()
    return _greedy("linearized_greedy", graph, budget, linearized_candidates(graph), start, grid_size)

