"""Revolve: closed form vs the recursion, schedules on unit chains, mapping to frontier-advancing stages."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from remat.baselines.griewank import revolve_cost, revolve_events, revolve_schedule
from remat.generators import linear_chain, random_training_graph
from remat.graph import GraphError
from remat.result import Status
from remat.schedule import simulate
from remat.strategies import get_strategy


@cache
def reversal_dp(steps: int, slots: int) -> int:
    """Fewest forward steps to reverse ``steps`` steps with ``slots`` snapshots (x_0 held), by exhaustive recursion."""
    if steps == 1:
        return 0
    if slots == 1:
        return steps * (steps - 1) // 2  # advance from x_0 to x_{j-1} for every j
    return min(m + reversal_dp(steps - m, slots - 1) + reversal_dp(m, slots) for m in range(1, steps))


def test_closed_form_equals_recursion() -> None:
    for steps in range(1, 31):
        for slots in range(1, 7):
            assert revolve_cost(steps, slots) == reversal_dp(steps, slots), (steps, slots)
    assert revolve_cost(10, 1) == 45
    assert revolve_cost(10, 10) == 9
    assert revolve_cost(15, 4) == 2 * 15 - 6  # l = beta(4, 2): r = 2, t = 2l - beta(5, 1)


@pytest.mark.parametrize("steps,slots", [(1, 1), (5, 1), (9, 2), (16, 3), (20, 4), (7, 9)])
def test_events_reverse_every_step_once_within_slots(steps: int, slots: int) -> None:
    events = revolve_events(steps, slots)
    assert [k for kind, k in events if kind == "adjoint"] == list(range(steps, 0, -1))
    held, most = set(), 0
    for kind, k in events:
        if kind == "snap":
            held.add(k)
        elif kind == "free":
            held.remove(k)
        most = max(most, len(held))
    assert not held and most <= slots - 1  # x_0 takes the remaining slot


@pytest.mark.parametrize("L", range(1, 13))
def test_revolve_schedules_on_unit_chains(L: int) -> None:
    g = linear_chain(L)
    for slots in range(L + 1):
        schedule = revolve_schedule(g, slots)
        sim = simulate(g, schedule)
        assert sim.valid, sim.violation
        assert schedule.is_frontier_advancing
        forward_computations = int(schedule.R[:, :L].sum())
        assert forward_computations == revolve_cost(L + 1, slots + 1)
        assert sim.cost == g.total_cost + revolve_cost(L + 1, slots + 1) - L
        assert sim.peak_memory <= slots + 3
        # Recomputation happens only in backward stages; beyond the first backward
        # stage (which also holds the working state x_L) at most `slots` forward values are resident.
        assert not (schedule.R[:L] & ~np.eye(g.n, dtype=bool)[:L]).any()
        assert schedule.S[L + 2 :, :L].sum(1).max(initial=0) <= slots


def test_revolve_hand_schedule_l3_one_slot() -> None:
    # l = 4 steps, 2 slots: snapshot x_2 (node 1) in the first sweep, recompute node 0 for its adjoint.
    g = linear_chain(3)
    schedule = revolve_schedule(g, 1)
    off = {(int(t), int(i)) for t, i in zip(*np.nonzero(schedule.R & ~np.eye(g.n, dtype=bool)))}
    assert off == {(6, 0)}
    assert schedule.S[:, 1].tolist() == [False, False, True, True, True, True, False]


@pytest.mark.parametrize("slots", range(0, 9))
def test_strategy_derives_slots_from_bytes(slots: int) -> None:
    L = 9
    g = linear_chain(L, memory=4)
    res = get_strategy("griewank_logn")(g, 4 * (slots + 3))
    assert res.status == Status.FEASIBLE
    assert res.stats["slots"] >= slots and res.stats["slots_from_bytes"] == slots
    assert res.cost == g.total_cost + revolve_cost(L + 1, slots + 1) - L


def test_strategy_below_three_values_is_infeasible() -> None:
    res = get_strategy("griewank_logn")(linear_chain(6), 2.5)
    assert res.status == Status.INFEASIBLE and res.min_feasible_budget == 3


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_revolve_no_worse_than_chen_at_chens_memory(k: int) -> None:
    g = linear_chain(k * k)
    chen = get_strategy("chen_sqrtn")(g, 2 * k)
    rev = get_strategy("griewank_logn")(g, 2 * k)
    assert rev.has_schedule and rev.cost <= chen.cost


def test_non_chain_is_refused() -> None:
    with pytest.raises(GraphError, match="linear forward graph"):
        get_strategy("griewank_logn")(random_training_graph(8, 0, skip_probability=0.5), 1e9)


@pytest.mark.parametrize("L", [2, 3, 4, 5])
def test_revolve_is_optimal_on_unit_chains(L: int) -> None:
    # Binomial checkpointing is optimal for unit chains; in our model too (exhaustive oracle).
    from brute_force import BruteForce

    g = linear_chain(L)
    oracle = BruteForce(g)
    for budget in range(3, L + 3):
        best = oracle.solve(budget)
        res = get_strategy("griewank_logn")(g, budget)
        assert best is not None and res.has_schedule
        assert res.cost == best[0], budget
