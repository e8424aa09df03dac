"""Griewank & Walther's binomial checkpointing (revolve) for linear chains (§6.1).

Revolve reverses a chain of ``l`` steps ``x_0 -> x_1 -> ... -> x_l`` with ``s``
snapshot slots (``x_0`` occupies one) using the fewest forward steps,

    t(l, s) = r * l - beta(s + 1, r - 1),   beta(s, r) = C(s + r, s),

where ``r`` is the unique integer with ``beta(s, r - 1) < l <= beta(s, r)``
(Griewank & Walther 2000, Prop. 1 / Thm. 6.1). ``t`` counts every forward step
except the one taped together with each adjoint step. It satisfies the recursion
``t(l, s) = min_{0<m<l} m + t(l - m, s - 1) + t(m, s)``: advance ``m`` steps, store
``x_m``, reverse the tail with one slot fewer, free ``x_m``, reverse the head.

Mapping to our training chain (``linear_chain(L)``: forward nodes ``0..L-1``, loss
``L``, backward node ``2L - i`` reading forward node ``i``): the input is ``x_0``
(constant memory, so it takes no slot of ours), forward node ``i`` is ``x_{i+1}``,
and backward node ``2L - i`` is the adjoint of step ``i + 2``, which needs ``x_{i+1}``.
So reversing the chain is revolve with ``l = L + 1`` steps and ``s + 1`` slots,
where ``s`` counts forward values kept as snapshots. The adjoint of step 1 needs
only the input and has no node.

The schedule fits the ``T = n`` frontier-advancing stages exactly: revolve's first
sweep computes every forward node once in order (stages ``0..L-1``), each adjoint
is one backward stage, and the advances before an adjoint are recomputations
inside that adjoint's stage. We therefore express revolve as S alone - which
snapshots are resident in which stage - and let ``solve_min_r`` recompute from the
nearest resident snapshot, which is exactly revolve's restore-and-advance. Forward
node count: ``t(L + 1, s + 1)``, i.e. ``t(L + 1, s + 1) - L`` recomputations. On unit
memory the peak is ``s + 3`` values (snapshots, the incoming gradient, and two
working values), so ``s = floor((budget - constant) / m) - 3`` slots fit.
"""

from __future__ import annotations

import math
import time
from functools import cache

import numpy as np

from remat.baselines.checkpoint_sets import cheapest_within_budget, require_linear_forward
from remat.baselines.recompute import solve_min_r
from remat.graph import DFGraph
from remat.result import SolveResult, result_from_schedule
from remat.schedule import Schedule


def binomial(s: int, r: int) -> int:
    """Griewank's ``beta(s, r) = (s + r)! / (s! r!)`` (0 for negative ``r``)."""
    return math.comb(s + r, s) if r >= 0 else 0


def revolve_cost(steps: int, slots: int) -> int:
    """Closed-form minimal forward steps ``t(l, s)`` to reverse ``l`` steps with ``s >= 1`` snapshots."""
    if steps < 1 or slots < 1:
        raise ValueError(f"revolve needs at least one step and one snapshot slot, got l={steps}, s={slots}")
    r = 0
    while binomial(slots, r) < steps:
        r += 1
    return r * steps - binomial(slots + 1, r - 1)


@cache
def _split(steps: int, slots: int) -> int:
    """An optimal first snapshot position ``m`` for ``steps > 1`` and ``slots > 1``."""
    return min(
        range(1, steps),
        key=lambda m: (m + revolve_cost(steps - m, slots - 1) + revolve_cost(m, slots), -m),
    )


def revolve_events(steps: int, slots: int) -> list[tuple[str, int]]:
    """The binomial reversal of ``steps`` steps as ``("snap", k)``, ``("free", k)``, ``("adjoint", j)``.

    ``("snap", k)`` stores state ``x_k`` (reached by advancing from the nearest
    snapshot below it), ``("adjoint", j)`` reverses step ``j`` (needs ``x_{j-1}``).
    Advances are implicit: the states between snapshots are recomputed on demand.
    """
    if slots < 1:
        raise ValueError("revolve needs at least one snapshot slot (the initial state)")
    events: list[tuple[str, int]] = []

    def reverse(base: int, length: int, free_slots: int) -> None:
        # x_base is a snapshot; free_slots counts it.
        if length == 1:
            events.append(("adjoint", base + 1))
        elif free_slots == 1:
            events.extend(("adjoint", j) for j in range(base + length, base, -1))
        else:
            m = _split(length, free_slots)
            events.append(("snap", base + m))
            reverse(base + m, length - m, free_slots - 1)
            events.append(("free", base + m))
            reverse(base, m, free_slots)

    reverse(0, steps, slots)
    return events


def revolve_s(graph: DFGraph, slots: int) -> np.ndarray:
    """S for the binomial reversal of a linear training chain with ``slots`` snapshots of forward values.

    The adjoint that needs forward node ``i`` is the stage of ``i``'s first
    backward reader: ``2L - i`` in :func:`~remat.generators.linear_chain` and in
    the Keras reference chains. There the backward node of layer ``i - 1`` also
    reads layer ``i``'s output, which min-R recomputes from ``i - 1`` on the way
    (revolve's taping step), one extra forward step per adjoint.
    """
    require_linear_forward(graph, "griewank_logn")
    n, L = graph.n, graph.loss
    S = np.zeros((n, n), bool)
    for v in range(L, n):
        users = graph.users[v]
        if len(users):
            S[v + 1 : int(users[-1]) + 1, v] = True
    if L == 0:
        return S
    first_reader = [min((int(u) for u in graph.users[i] if u > L), default=None) for i in range(L)]
    for v in range(1, L + 1):
        S[v, v - 1] = True  # forward chain, and the last layer into the loss
    if first_reader[L - 1] is not None:
        S[L + 1 : first_reader[L - 1] + 1, L - 1] = True  # the working state x_L for the first adjoint
    stored: dict[int, int] = {}
    pending: list[int] = []
    stage = None
    for kind, k in revolve_events(L + 1, slots + 1):
        if kind == "adjoint":
            if k < 2 or first_reader[k - 2] is None:
                continue  # the input step, or a layer no backward node reads: no stage
            stage = max(stage or 0, first_reader[k - 2])
            for node in pending:
                stored[node] = stage
            pending = []
        elif kind == "snap":
            if stage is None:
                stored[k - 1] = k - 1  # first sweep: computed in its own frontier stage
            else:
                pending.append(k - 1)
        elif k - 1 in stored and stage is not None:  # a restore before any mapped adjoint reads nothing
            S[stored.pop(k - 1) + 1 : stage + 1, k - 1] = True
    return S


def revolve_schedule(graph: DFGraph, slots: int) -> Schedule:
    """The revolve schedule of a linear training chain: :func:`revolve_s` plus the minimum R."""
    S = revolve_s(graph, slots)
    return Schedule(solve_min_r(graph, S), S)


def solve_griewank_logn(graph: DFGraph, budget: float, **_: object) -> SolveResult:
    """Griewank & Walther 2000 revolve (§6.1, "Griewank log n") on a linear network.

    Tries every snapshot count ``s = 0..L``; keeps the cheapest schedule whose
    simulated peak fits the budget (on uniform memory that is the largest
    ``s <= floor((budget - constant) / m) - 3``). Costs and memory are treated as
    uniform when choosing snapshots, as in the original; simulate() accounts them
    exactly. With no fitting ``s`` the smallest-peak schedule is reported infeasible.
    """
    start = time.perf_counter()
    require_linear_forward(graph, "griewank_logn")
    slots, schedule = cheapest_within_budget(graph, budget, ((slots, revolve_schedule(graph, slots))
                                                             for slots in range(graph.loss, -1, -1)))
    largest = float(graph.memory[: graph.loss].max(initial=0))
    # What uniform memory of the largest layer would allow; the scan above is exact.
    estimate = int((budget - graph.constant_memory) // largest) - 3 if largest > 0 else graph.loss
    stats = {"slots": slots, "slots_from_bytes": max(estimate, -1)}
    return result_from_schedule("griewank_logn", graph, schedule, budget, time.perf_counter() - start, stats=stats)

