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


# ---------------------------------------------------------------------- six shapes, every U[t, k] by hand
# Each expected matrix below was worked out by hand from eqs. (2)-(5) as remat/schedule.py's docstring states
# them: a stage starts from the constant plus its checkpoints (eq. 2); computing k adds M_k (eq. 3); the inputs
# of k that k's computation frees leave *after* U[t, k] (eq. 3's freed(t, k-1) term), and an input i of k is
# freed after k when k is i's last reader in the stage and i is not checkpointed into the next stage (eq. 5,
# without the S factor in the last stage). Memories are distinct powers of two, so every sum says which values
# it holds. The working is in the comments, row by row.


def graph(edges, memory, cost, constant=0, loss=None):
    n = len(memory)
    return DFGraph([f"v{i}" for i in range(n)], cost=cost, memory=memory, edges=edges, loss=loss,
                   constant_memory=constant)


def schedule(n, computed, resident):
    """R and S from one set of node ids per stage."""
    R = np.zeros((len(computed), n), bool)
    S = np.zeros((len(computed), n), bool)
    for t, (r, s) in enumerate(zip(computed, resident)):
        R[t, sorted(r)] = True
        S[t, sorted(s)] = True
    return Schedule(R, S)


def freed_edges(g, sim):
    return {(int(t), tuple(int(x) for x in g.edges[e])) for t, e in zip(*np.nonzero(sim.free))}


def check_timeline(g, s, cost, U, peak, freed=None, plan=None):
    sim = simulate(g, s)
    assert sim.valid, sim.violation
    assert sim.cost == cost
    assert sim.memory.tolist() == U
    assert sim.peak_memory == peak
    if freed is not None:
        assert freed_edges(g, sim) == freed
    if plan is not None:
        assert sim.plan == plan
    # Algorithm 1's plan holds U[t, k] after each compute, in row-major order.
    assert plan_live_bytes(g, sim.plan).tolist() == sim.memory[s.R].tolist()
    return sim


def test_chain_with_recomputation_timeline():
    # a(0) -> b(1) -> loss(2) -> gb(3) -> ga(4); gb reads b, ga reads a. Only a is kept; b is recomputed twice.
    g = graph([(0, 1), (1, 2), (1, 3), (2, 3), (0, 4), (3, 4)], memory=[1, 2, 4, 8, 16], cost=[1, 2, 3, 4, 5],
              constant=32, loss=2)
    s = schedule(5, computed=[{0}, {1}, {1, 2}, {1, 3}, {4}], resident=[set(), {0}, {0}, {0, 2}, {0, 3}])
    U = [
        [33, 33, 33, 33, 33],  # 32 + a
        [33, 35, 35, 35, 35],  # a resident; + b; a is kept for stage 2, so nothing is freed
        [33, 35, 39, 37, 37],  # a; + b; + loss; b's last reader here and b not kept: -2 after the loss
        [37, 39, 39, 47, 41],  # a, loss; + b; + gb; b and loss freed after gb (neither kept): -6
        [41, 41, 41, 41, 57],  # a, gb; + ga
    ]
    freed = {(2, (1, 2)), (3, (1, 3)), (3, (2, 3)), (4, (0, 4)), (4, (3, 4))}
    plan = [Compute(0, 0, 0),
            Compute(1, 1, 1), Deallocate(1, 1, 1),  # b is not kept into stage 2: gone at the stage's end
            Compute(2, 1, 2), Compute(2, 2, 3), Deallocate(2, 1, 2),
            Compute(3, 1, 4), Compute(3, 3, 5), Deallocate(3, 1, 4), Deallocate(3, 2, 3),
            Compute(4, 4, 6), Deallocate(4, 0, 0), Deallocate(4, 3, 5), Deallocate(4, 4, 6)]
    check_timeline(g, s, cost=1 + 2 + (2 + 3) + (2 + 4) + 5, U=U, peak=57, freed=freed, plan=plan)


def test_diamond_recomputed_while_resident_counts_both_copies():
    # a(0) -> b(1), a -> c(2), b, c -> d(3). Stage 2 recomputes a although a is resident: both copies count
    # until the stage's end, and c (a's last reader) frees only the new one.
    g = graph([(0, 1), (0, 2), (1, 3), (2, 3)], memory=[1, 2, 4, 8], cost=[1, 2, 3, 4], constant=16)
    s = schedule(4, computed=[{0}, {1}, {0, 2}, {3}], resident=[set(), {0}, {0, 1}, {1, 2}])
    U = [
        [17, 17, 17, 17],  # 16 + a
        [17, 19, 19, 19],  # a; + b (a kept for stage 2)
        [20, 20, 24, 23],  # a, b; + a again (20); + c (24); a not kept, c its last reader: -1 (one copy)
        [22, 22, 22, 30],  # b, c; + d
    ]
    plan = [Compute(0, 0, 0), Compute(1, 1, 1),
            Compute(2, 0, 2), Compute(2, 2, 3), Deallocate(2, 0, 2), Deallocate(2, 0, 0),  # the old copy last
            Compute(3, 3, 4), Deallocate(3, 1, 1), Deallocate(3, 2, 3), Deallocate(3, 3, 4)]
    check_timeline(g, s, cost=1 + 2 + (1 + 3) + 4, U=U, peak=30, freed={(2, (0, 2)), (3, (1, 3)), (3, (2, 3))},
                   plan=plan)


def test_skip_connection_keeps_its_source_until_the_long_edge_reads_it():
    # x(0) -> f(1) -> g(2) -> h(3) -> y(4), and x -> y. No constant. The last stage recomputes f, g, h from x:
    # f does not free x there, because y (a later reader of x) runs in the same stage.
    g = graph([(0, 1), (1, 2), (2, 3), (3, 4), (0, 4)], memory=[1, 2, 4, 8, 16], cost=[1, 2, 3, 4, 5])
    s = schedule(5, computed=[{0}, {1}, {2}, {3}, {1, 2, 3, 4}], resident=[set(), {0}, {0, 1}, {0, 2}, {0}])
    U = [
        [1, 1, 1, 1, 1],  # x
        [1, 3, 3, 3, 3],  # x; + f (x kept)
        [3, 3, 7, 5, 5],  # x, f; + g; f not kept, g its last reader: -2
        [5, 5, 5, 13, 9],  # x, g; + h; -4 (g)
        [1, 3, 7, 13, 25],  # x; + f (x stays: y reads it later); + g, -2 (f); + h, -4 (g); + y
    ]
    freed = {(2, (1, 2)), (3, (2, 3)), (4, (1, 2)), (4, (2, 3)), (4, (0, 4)), (4, (3, 4))}
    check_timeline(g, s, cost=1 + 2 + 3 + 4 + (2 + 3 + 4 + 5), U=U, peak=25, freed=freed)


def test_unet_like_nested_skips():
    # e1(0) -> e2(1) -> m(2) -> d2(3) -> d1(4); d2 also reads e2, d1 also reads e1 (nested skips), constant 3.
    # e1 is kept throughout; e2 is dropped after m and recomputed for d2.
    g = graph([(0, 1), (1, 2), (2, 3), (1, 3), (3, 4), (0, 4)], memory=[1, 2, 4, 8, 16], cost=[1, 2, 3, 4, 5],
              constant=3)
    s = schedule(5, computed=[{0}, {1}, {2}, {1, 3}, {4}], resident=[set(), {0}, {0, 1}, {0, 2}, {0, 3}])
    U = [
        [4, 4, 4, 4, 4],  # 3 + e1
        [4, 6, 6, 6, 6],  # e1; + e2
        [6, 6, 10, 8, 8],  # e1, e2; + m; e2 not kept and d2 (its other reader) does not run here: -2
        [8, 10, 10, 18, 12],  # e1, m; + e2 (recomputed); + d2; e2 and m freed after d2: -6
        [12, 12, 12, 12, 28],  # e1, d2; + d1
    ]
    freed = {(2, (1, 2)), (3, (1, 3)), (3, (2, 3)), (4, (0, 4)), (4, (3, 4))}
    check_timeline(g, s, cost=1 + 2 + 3 + (2 + 4) + 5, U=U, peak=28, freed=freed)


def test_multi_output_heads_are_held_to_their_stage_end():
    # a(0) -> b(1), a -> y1(2), b -> y2(3): two outputs (y1, y2) that nothing reads.
    g = graph([(0, 1), (0, 2), (1, 3)], memory=[1, 2, 4, 8], cost=[1, 2, 3, 4])
    dropped = schedule(4, computed=[{0}, {1}, {2}, {3}], resident=[set(), {0}, {0, 1}, {1}])
    U = [
        [1, 1, 1, 1],  # a
        [1, 3, 3, 3],  # a; + b
        [3, 3, 7, 6],  # a, b; + y1; a freed after y1 (its last reader, not kept): -1; y1 stays to the end
        [2, 2, 2, 10],  # b; + y2 (y1 is gone: not checkpointed)
    ]
    sim = check_timeline(g, dropped, cost=10, U=U, peak=10, freed={(2, (0, 2)), (3, (1, 3))})
    assert Deallocate(2, 2, 2) in sim.plan  # y1 leaves at the end of its stage
    # Kept as a checkpoint into the last stage, y1 is held there too: +4 on the whole last row.
    kept = schedule(4, computed=[{0}, {1}, {2}, {3}], resident=[set(), {0}, {0, 1}, {1, 2}])
    U_kept = U[:3] + [[6, 6, 6, 14]]
    sim = check_timeline(g, kept, cost=10, U=U_kept, peak=14, freed={(2, (0, 2)), (3, (1, 3))})
    assert Deallocate(2, 2, 2) not in sim.plan and Deallocate(3, 2, 2) in sim.plan


def test_a_value_read_twice_in_backward_is_freed_after_its_last_reader():
    # a(0) -> b(1) -> loss(2); g1(3) reads loss and b; g2(4) reads g1, b and a. Three stages (not
    # frontier-advancing): b is recomputed in each, and in the last both g1 and g2 read it.
    g = graph([(0, 1), (1, 2), (1, 3), (2, 3), (0, 4), (1, 4), (3, 4)], memory=[1, 2, 4, 8, 16],
              cost=[1, 2, 3, 4, 5], loss=2)
    s = schedule(5, computed=[{0, 1}, {1, 2}, {1, 3, 4}], resident=[set(), {0}, {0, 2}])
    U = [
        [1, 3, 3, 3, 3],  # a; + b (a kept, b has no reader in this stage: held to the end, then dropped)
        [1, 3, 7, 5, 5],  # a; + b; + loss; b not kept and g1, g2 do not run here: -2 after the loss
        [5, 7, 7, 15, 27],  # a, loss; + b (a stays: g2 reads it); + g1, which frees the loss (-4) but not
    ]                       # b (g2 reads it later); + g2
    freed = {(1, (1, 2)), (2, (2, 3)), (2, (0, 4)), (2, (1, 4)), (2, (3, 4))}
    plan = [Compute(0, 0, 0), Compute(0, 1, 1), Deallocate(0, 1, 1),
            Compute(1, 1, 2), Compute(1, 2, 3), Deallocate(1, 1, 2),
            Compute(2, 1, 4), Compute(2, 3, 5), Deallocate(2, 2, 3),
            Compute(2, 4, 6), Deallocate(2, 0, 0), Deallocate(2, 1, 4), Deallocate(2, 3, 5), Deallocate(2, 4, 6)]
    check_timeline(g, s, cost=(1 + 2) + (2 + 3) + (2 + 4 + 5), U=U, peak=27, freed=freed, plan=plan)
