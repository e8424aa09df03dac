"""simulate() against timelines computed by hand (eqs. 2-5, Algorithm 1)."""

import numpy as np
import pytest

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.generators import linear_chain
from remat.graph import DFGraph
from remat.schedule import Compute, Deallocate, Schedule, ScheduleError, plan_live_bytes, simulate


def chain3():
    """linear_chain(3)'s structure with distinct memories and a constant overhead of 5."""
    g = linear_chain(3)
    return DFGraph(g.names, cost=[1, 2, 3, 0, 4, 5, 6], memory=[10, 20, 30, 1, 40, 50, 60], edges=g.edges,
                   loss=3, constant_memory=5)


def diamond():
    return DFGraph(["a", "b", "c", "d"], cost=[1, 1, 1, 1], memory=[1, 2, 3, 4],
                   edges=[(0, 1), (0, 2), (1, 3), (2, 3)])


def test_chain_checkpoint_all_timeline():
    g = chain3()
    sim = simulate(g, checkpoint_all_schedule(g))
    assert sim.valid and sim.cost == 21
    # Stage t computes node t on top of the constant 5 and the values still needed later.
    expected_after_compute = [15, 35, 65, 66, 106, 125, 125]
    assert [sim.memory[t, t] for t in range(7)] == expected_after_compute
    # Frees: stage 4 drops 2 and 3 (their last reader ran), stage 5 drops 1 and 4, stage 6 drops 0 and 5.
    assert sim.memory[4].tolist() == [66, 66, 66, 66, 106, 75, 75]
    assert sim.memory[5].tolist() == [75, 75, 75, 75, 75, 125, 65]
    assert sim.memory[6].tolist() == [65] * 6 + [125]
    assert sim.peak_memory == 125
    stage4 = [s for s in sim.plan if s.stage == 4]
    assert stage4 == [Compute(4, 4, 4), Deallocate(4, 2, 2), Deallocate(4, 3, 3)]


def test_chain_free_matrix():
    g = chain3()
    sim = simulate(g, checkpoint_all_schedule(g))
    freed = {(t, tuple(g.edges[e])) for t, e in zip(*np.nonzero(sim.free))}
    assert freed == {(4, (2, 4)), (4, (3, 4)), (5, (1, 5)), (5, (4, 5)), (6, (0, 6)), (6, (5, 6))}


def test_diamond_with_recomputation():
    g = diamond()
    R = np.eye(4, dtype=bool)
    R[2, 0] = True  # recompute a in stage 2 instead of keeping it
    S = np.zeros((4, 4), bool)
    S[1, 0] = True
    S[2, 1] = True
    S[3, [1, 2]] = True
    sim = simulate(g, Schedule(R, S))
    assert sim.valid and sim.cost == 5
    # stage 0: a=1. stage 1: a resident (1) + b -> 3; b was a's last reader and a is not kept -> 2.
    # stage 2: b resident (2); a again -> 3; c -> 6; a freed after c -> 5 (b and c).
    # stage 3: b, c resident (5); d -> 9; b and c freed -> 4.
    assert sim.memory[:, :].tolist() == [
        [1, 1, 1, 1],
        [1, 3, 2, 2],
        [3, 3, 6, 5],
        [5, 5, 5, 9],
    ]
    assert sim.peak_memory == 9
    text = sim.plan_text().splitlines()
    assert text[:4] == ["%0 = compute v0", "%1 = compute v1", "deallocate %0  (v0)", "%2 = compute v0"]


def test_unused_checkpoint_is_held_until_stage_end():
    g = diamond()
    R = np.eye(4, dtype=bool)
    S = np.zeros((4, 4), bool)
    S[1, 0] = S[2, 0] = S[2, 1] = S[3, 1] = S[3, 2] = True
    sim = simulate(g, Schedule(R, S))
    # In stage 1, a is kept for stage 2; in stage 3 nothing reads a, and it is not resident any more.
    assert sim.valid and sim.memory[1, 1] == 3 and sim.memory[2, 2] == 6 and sim.memory[3, 3] == 9


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda R, S: S.__setitem__((2, 0), False), "node 2 ('c') is computed but its input 0 ('a')"),
        (lambda R, S: S.__setitem__((0, 0), True), "stage 0: node 0 ('a') is checkpointed into the first stage"),
        (lambda R, S: (S.__setitem__((1, 0), False), S.__setitem__((2, 0), True)), "stage 1: node 1 ('b')"),
        (lambda R, S: R.__setitem__((3, 3), False), "never computed"),
    ],
)
def test_first_violation_is_named(edit, message):
    g = diamond()
    s = checkpoint_all_schedule(g)
    R, S = s.R.copy(), s.S.copy()
    edit(R, S)
    sim = simulate(g, Schedule(R, S))
    assert not sim.valid and message in sim.violation


def test_shape_mismatch_and_non_binary():
    with pytest.raises(ScheduleError, match="columns"):
        simulate(diamond(), Schedule(np.eye(3, dtype=bool), np.zeros((3, 3), bool)))
    with pytest.raises(ScheduleError, match="only 0 and 1"):
        Schedule(np.full((2, 2), 0.5), np.zeros((2, 2)))


def test_schedule_round_trip(tmp_path):
    s = checkpoint_all_schedule(diamond())
    s.save(tmp_path / "s.json")
    t = Schedule.load(tmp_path / "s.json")
    assert np.array_equal(s.R, t.R) and np.array_equal(s.S, t.S) and t.is_frontier_advancing


@pytest.mark.parametrize("seed", range(8))
def test_plan_replay_equals_memory_matrix(seed):
    """Algorithm 1's plan holds exactly U[t, k] bytes after each compute, recomputed-while-resident included."""
    from remat.baselines.recompute import solve_min_r
    from remat.generators import random_training_graph

    g = random_training_graph(5, seed).with_constant_memory(7)
    rng = np.random.default_rng(seed)
    S = np.tril(rng.random((g.n, g.n)) < 0.4, -1)
    R = solve_min_r(g, S)
    R |= np.tril(rng.random((g.n, g.n)) < 0.15) & S  # also recompute some values that are resident
    for t in range(g.n):  # ... with whatever inputs those recomputations need
        for v in range(t, -1, -1):
            if R[t, v]:
                R[t, g.deps[v][~S[t, g.deps[v]]]] = True
    sim = simulate(g, Schedule(R, S))
    assert sim.valid
    assert np.array_equal(plan_live_bytes(g, sim.plan), sim.memory[R])
