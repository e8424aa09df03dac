"""Schedules (R, S) and ``simulate()``: the one accounting of cost and memory.

A schedule unrolls a training step into ``T`` stages (paper §4.2). ``R[t, i]``
says node ``i`` is (re)computed in stage ``t``; ``S[t, i]`` says ``i``'s output is
resident from stage ``t-1`` into stage ``t`` (a checkpoint). Within a stage nodes
run in id order.

Memory follows eqs. (2)-(5) with §4.8's elimination of ``Free[t,k,k]``:

* ``U[t, -1] = constant_memory + sum_i M_i S[t, i]`` (eq. 2; the constant
  overhead - inputs, parameters, parameter gradients - is inside U here, so a
  budget is the device's whole memory);
* ``U[t, k] = U[t, k-1] - freed(t, k-1) + R[t, k] M_k`` (eq. 3), where
  ``freed(t, k) = sum_{i in Deps[k]} M_i Free[t, i, k]`` (eq. 4);
* ``Free[t, i, k] = R[t, k] (1 - S[t+1, i]) prod_{j in Users[i], j > k} (1 - R[t, j])``
  (eq. 5; no ``S`` factor in the last stage).

So a value is freed right after its last reader in a stage unless it is
checkpointed into the next stage; a value with no reader in the stage (an unused
checkpoint, the stage's newest node) is held to the stage's end. The MILP of
:mod:`remat.milp.formulation` encodes exactly this recurrence, and tests assert
that its U variables equal :func:`simulate`'s.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from remat.graph import DFGraph


class ScheduleError(ValueError):
    """A schedule that does not fit its graph (wrong shape, non-binary entries)."""


@dataclass(frozen=True, eq=False)
class Schedule:
    """Boolean matrices ``R`` (compute) and ``S`` (checkpoint), each ``T x n``."""

    R: np.ndarray
    S: np.ndarray

    def __post_init__(self) -> None:
        R, S = (np.asarray(self.R), np.asarray(self.S))
        if R.ndim != 2 or R.shape != S.shape:
            raise ScheduleError(f"R and S must be matrices of one shape, got {R.shape} and {S.shape}")
        for label, mat in (("R", R), ("S", S)):
            if mat.dtype != bool and not np.all((mat == 0) | (mat == 1)):
                raise ScheduleError(f"{label} must hold only 0 and 1 (round fractional solutions first)")
        object.__setattr__(self, "R", R.astype(bool))
        object.__setattr__(self, "S", S.astype(bool))

    @property
    def stages(self) -> int:
        return int(self.R.shape[0])

    @property
    def n(self) -> int:
        return int(self.R.shape[1])

    @property
    def is_frontier_advancing(self) -> bool:
        """Eqs. (8a)-(8c): node t first computed in stage t, nothing later."""
        T, n = self.R.shape
        if T != n:
            return False
        return bool(np.all(np.diag(self.R)) and not np.triu(self.R, 1).any() and not np.triu(self.S, 0).any())

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "remat.schedule",
            "version": 1,
            "R": self.R.astype(int).tolist(),
            "S": self.S.astype(int).tolist(),
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict()))

    @classmethod
    def load(cls, path: str | Path) -> Schedule:
        data = json.loads(Path(path).read_text())
        if data.get("format") != "remat.schedule":
            raise ScheduleError(f"{path} is not a remat schedule file")
        return cls(np.array(data["R"], bool), np.array(data["S"], bool))


@dataclass(frozen=True)
class Compute:
    """``%register = compute node`` (Algorithm 1)."""

    stage: int
    node: int
    register: int


@dataclass(frozen=True)
class Deallocate:
    """``deallocate %register`` (Algorithm 1); ``node`` is the value it held."""

    stage: int
    node: int
    register: int


@dataclass(eq=False)
class Simulation:
    """What :func:`simulate` returns; ``memory[t, k]`` is the paper's ``U[t, k]`` in bytes."""

    valid: bool
    violation: str | None
    cost: float
    peak_memory: float
    memory: np.ndarray
    free: np.ndarray
    plan: list[Compute | Deallocate] = field(default_factory=list)

    def within(self, budget: float) -> bool:
        # Solvers meet the budget up to their feasibility tolerance (1e-7 in units of the largest tensor).
        return self.valid and self.peak_memory <= budget * (1 + 1e-7)

    def plan_text(self) -> str:
        out = io.StringIO()
        for s in self.plan:
            if isinstance(s, Compute):
                print(f"%{s.register} = compute v{s.node}", file=out)
            else:
                print(f"deallocate %{s.register}  (v{s.node})", file=out)
        return out.getvalue()


def schedule_violation(graph: DFGraph, schedule: Schedule) -> str | None:
    """The first violated constraint of (1b)-(1d) and completion, in stage order, or None."""
    R, S = schedule.R, schedule.S
    if schedule.n != graph.n:
        return f"schedule has {schedule.n} columns but the graph has {graph.n} nodes"
    names = graph.names
    src, dst = graph.edges[:, 0], graph.edges[:, 1]
    # (1d): nothing is resident before the first stage.
    bad = np.flatnonzero(S[0])
    if bad.size:
        i = int(bad[0])
        return f"stage 0: node {i} ({names[i]!r}) is checkpointed into the first stage, but nothing exists yet"
    # (1c): a checkpoint must exist in the previous stage.
    carry = S[1:] & ~(R[:-1] | S[:-1])
    # (1b): a computed node's inputs are computed earlier in the stage or checkpointed.
    missing = R[:, dst] & ~(R[:, src] | S[:, src])
    first_c = _first_row(carry) + 1
    first_b = _first_row(missing)
    t_c = first_c if first_c > 0 else np.inf
    t_b = first_b if first_b >= 0 else np.inf
    if np.isfinite(min(t_c, t_b)):
        if t_c <= t_b:
            t = int(t_c)
            i = int(np.flatnonzero(carry[t - 1])[0])
            return (
                f"stage {t}: node {i} ({names[i]!r}) is checkpointed into stage {t} but was neither "
                f"computed nor resident in stage {t - 1}"
            )
        t = int(t_b)
        e = int(np.flatnonzero(missing[t])[0])
        i, j = int(src[e]), int(dst[e])
        return (
            f"stage {t}: node {j} ({names[j]!r}) is computed but its input {i} ({names[i]!r}) is neither "
            f"computed earlier in stage {t} nor checkpointed into it"
        )
    never = np.flatnonzero(~R.any(0))
    if never.size:
        i = int(never[0])
        return f"node {i} ({names[i]!r}) is never computed: every node must run at least once in a training step"
    return None


def free_matrix(graph: DFGraph, schedule: Schedule) -> np.ndarray:
    """``Free[t, e]`` of eq. (5) for every stage ``t`` and edge ``e = (i, k)``."""
    R, S = schedule.R, schedule.S
    T, n = R.shape
    src, dst = graph.edges[:, 0], graph.edges[:, 1]
    S_next = np.vstack([S[1:], np.zeros((1, n), bool)])
    reads = R[:, dst]
    later = (_later_edges(graph) @ reads.T.astype(np.float32)).T  # readers of e's source after e, per stage
    return reads & ~S_next[:, src] & (later == 0)


def _later_edges(graph: DFGraph) -> sp.csr_matrix:
    """``(m, m)``: entry ``[e, f]`` is 1 when edge ``f`` leaves the same node as ``e`` to a later reader.

    Edges are sorted by (source, target), so those are the rest of ``e``'s run
    of edges with one source. A sparse product with it counts the later readers
    computed in each stage (eq. 5's product) faster than numpy's grouped
    reductions, which dominated the local searches' run time.
    """
    src = graph.edges[:, 0]
    count = np.searchsorted(src, src, side="right") - 1 - np.arange(graph.m)
    edge = np.repeat(np.arange(graph.m), count)
    later = edge + 1 + np.arange(edge.size) - np.repeat(np.cumsum(count) - count, count)
    return sp.csr_matrix((np.ones(edge.size, np.float32), (edge, later)), shape=(graph.m, graph.m))


def memory_matrix(graph: DFGraph, schedule: Schedule, free: np.ndarray | None = None) -> np.ndarray:
    """``U[t, k]`` of eqs. (2)-(4): bytes in use just after computing node k in stage t."""
    R, S = schedule.R, schedule.S
    T, n = R.shape
    if free is None:
        free = free_matrix(graph, schedule)
    M = graph.memory.astype(float)
    src, dst = graph.edges[:, 0], graph.edges[:, 1]
    # freed_after[t, k]: bytes released right after computing k in stage t, as a sparse product (np.add.at
    # over every (stage, edge) pair was the slowest step of the local searches, which call this thousands of times).
    release = sp.csr_matrix((M[src], (dst, np.arange(graph.m))), shape=(n, graph.m))
    freed_after = (release @ free.T.astype(float)).T
    base = graph.constant_memory + (S * M).sum(1)
    allocated = np.cumsum(R * M, axis=1)
    released = np.cumsum(freed_after, axis=1) - freed_after
    return base[:, None] + allocated - released


def simulate(graph: DFGraph, schedule: Schedule, plan: bool = True) -> Simulation:
    """Check ``schedule`` on ``graph`` and account its cost and memory (eqs. 1-5, Alg. 1).

    Returns validity with the first violation, total cost ``sum C_i R[t, i]``
    (eq. 1a), peak memory ``max U``, the ``U`` matrix, the ``Free`` matrix over
    edges, and - when ``plan`` - Algorithm 1's execution plan, extended with the
    deallocations at a stage's end that eq. (2) implies for values not
    checkpointed into the next stage.
    """
    if schedule.n != graph.n:
        raise ScheduleError(f"schedule has {schedule.n} columns but graph {graph.name!r} has {graph.n} nodes")
    violation = schedule_violation(graph, schedule)
    free = free_matrix(graph, schedule)
    U = memory_matrix(graph, schedule, free)
    cost = float((schedule.R * graph.cost).sum())
    steps = U[schedule.R] if schedule.R.any() else U.ravel()
    peak = float(max(steps.max(), (graph.constant_memory + (schedule.S * graph.memory).sum(1)).max()))
    sim = Simulation(
        valid=violation is None,
        violation=violation,
        cost=cost,
        peak_memory=peak,
        memory=U,
        free=free,
    )
    if plan and violation is None:
        sim.plan = list(execution_plan(graph, schedule, free))
    return sim


def execution_plan(
    graph: DFGraph, schedule: Schedule, free: np.ndarray | None = None
) -> Iterator[Compute | Deallocate]:
    """Algorithm 1: a row-major scan of R emitting compute and deallocate statements.

    Deallocations follow ``Free``; at the end of each stage every value not
    checkpointed into the next stage is deallocated too (eq. 2 starts the next
    stage with the checkpoints alone). A node recomputed while a copy is still
    resident keeps the old copy to the stage's end, as eqs. (2)-(4) count it
    (the MILP only does this for zero-cost nodes, where it costs nothing).
    """
    R, S = schedule.R, schedule.S
    T, n = R.shape
    if free is None:
        free = free_matrix(graph, schedule)
    edge_index = {(int(s), int(d)): e for e, (s, d) in enumerate(graph.edges)}
    regs: dict[int, int] = {}
    next_reg = 0
    for t in range(T):
        shadows: list[tuple[int, int]] = []
        for k in np.flatnonzero(R[t]):
            k = int(k)
            if k in regs:
                shadows.append((k, regs[k]))
            yield Compute(t, k, next_reg)
            regs[k] = next_reg
            next_reg += 1
            for i in graph.deps[k]:
                i = int(i)
                if free[t, edge_index[(i, k)]] and i in regs:
                    yield Deallocate(t, i, regs.pop(i))
        for k, reg in shadows:
            yield Deallocate(t, k, reg)
        keep = S[t + 1] if t + 1 < T else np.zeros(n, bool)
        for i in sorted(regs):
            if not keep[i]:
                yield Deallocate(t, i, regs.pop(i))


def plan_live_bytes(graph: DFGraph, plan: list[Compute | Deallocate]) -> np.ndarray:
    """Bytes held (constant overhead included) just after each Compute of ``plan``, by replaying it.

    For a plan from :func:`simulate` this equals ``U[t, k]`` at every computed
    ``(t, k)`` in row-major order - the check an executor's own measurement
    should pass.
    """
    live: dict[int, int] = {}
    total = graph.constant_memory
    out = []
    for s in plan:
        if isinstance(s, Compute):
            live[s.register] = int(graph.memory[s.node])
            total += live[s.register]
            out.append(total)
        else:
            total -= live.pop(s.register)
    return np.array(out, dtype=float)


def _first_row(mask: np.ndarray) -> int:
    rows = np.flatnonzero(mask.any(1))
    return int(rows[0]) if rows.size else -1
