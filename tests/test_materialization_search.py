"""Local search over rematerialization stages: brute force on small graphs, local optimality on larger ones."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.baselines.checkpoint_sets import checkpoint_set_s, checkpoint_set_schedule
from remat.baselines.recompute import solve_min_r
from remat.generators import random_training_graph
from remat.maxbatch.checkpoint_search import least_peak_checkpoint_set
from remat.maxbatch.limits import allowed_cost
from remat.maxbatch.materialization_search import (
    KEEP,
    RECOMPUTE,
    climb_materialization,
    least_peak_materialization,
    materialization_moves,
    materialization_of,
    materialization_s,
    peak_score,
)
from remat.schedule import Schedule, simulate


def last_readers(g):
    return np.array([int(u[-1]) if len(u) else -1 for u in g.users])


def every_choice(g):
    """All choice vectors: KEEP, RECOMPUTE or any backward stage before the value's last reader."""
    last = last_readers(g)
    options = [[KEEP, RECOMPUTE, *range(g.loss, last[v])] if last[v] > g.loss else [RECOMPUTE] for v in range(g.loss)]
    return [np.array(w) for w in itertools.product(*options)]


def schedule_of(g, when):
    S = materialization_s(g, when)
    return Schedule(solve_min_r(g, S), S)


@pytest.mark.parametrize("seed", range(4))
def test_the_family_contains_every_checkpoint_set(seed):
    g = random_training_graph(12, seed)
    rng = np.random.default_rng(seed)
    for _ in range(20):
        checkpoints = np.flatnonzero(rng.random(g.loss) < 0.4)
        S = checkpoint_set_s(g, checkpoints)
        assert (materialization_s(g, materialization_of(g, S)) == S).all()


@pytest.mark.parametrize("seed", range(3))
def test_every_choice_vector_gives_a_valid_schedule(seed):
    g = random_training_graph(20, seed)
    last, rng = last_readers(g), np.random.default_rng(seed)
    for _ in range(30):
        when = np.array([rng.choice([KEEP, RECOMPUTE, *range(g.loss, max(last[v], g.loss))]) for v in range(g.loss)])
        sim = simulate(g, schedule_of(g, when))
        assert sim.valid, sim.violation


def cost_limits(graph):
    """Eq. (10)'s cap, and one halfway down to checkpoint-all's cost, where the cap binds."""
    cap = allowed_cost(graph)
    return [cap, 0.5 * (cap + simulate(graph, checkpoint_all_schedule(graph), plan=False).cost)]


@pytest.mark.parametrize(("layers", "seed"), [(L, s) for L in (4, 5) for s in range(6)])
def test_the_search_finds_the_least_peak_that_brute_force_finds(layers, seed):
    g = random_training_graph(layers, seed)
    sims = [simulate(g, schedule_of(g, w), plan=False) for w in every_choice(g)]
    for limit in cost_limits(g):
        start = least_peak_checkpoint_set(g, limit)
        if start is None:
            continue
        least = min(s.peak_memory for s in sims if s.valid and s.cost <= limit)
        schedule, sim = least_peak_materialization(g, limit, start[0])
        again = simulate(g, schedule)
        assert again.valid and again.peak_memory == sim.peak_memory == least and again.cost <= limit
        assert least <= start[1].peak_memory


@pytest.mark.parametrize(("layers", "seed"), [(4, 0), (4, 1), (5, 2), (5, 4)])
def test_two_level_recomputation_beats_every_checkpoint_set(layers, seed):
    g = random_training_graph(layers, seed)
    cap = allowed_cost(g)
    every_set = [simulate(g, checkpoint_set_schedule(g, ck), plan=False)
                 for k in range(g.loss + 1) for ck in itertools.combinations(range(g.loss), k)]
    best_set = min(s.peak_memory for s in every_set if s.valid and s.cost <= cap)
    start, _ = least_peak_checkpoint_set(g, cap)
    _, sim = least_peak_materialization(g, cap, start)
    assert sim.peak_memory < best_set


@pytest.mark.parametrize("seed", range(3))
def test_a_climb_ends_where_no_single_move_improves(seed):
    g = random_training_graph(24, seed)
    score = peak_score(g, allowed_cost(g))
    start = materialization_of(g, checkpoint_set_s(g, range(0, g.loss, 2)))
    found, found_score = climb_materialization(g, start, score, np.random.default_rng(seed))
    assert found_score == score(found)[0] <= score(start)[0]
    last = last_readers(g)
    for v in range(g.loss):
        for option in materialization_moves(g, found, v, last):
            trial = found.copy()
            trial[v] = option
            assert score(trial)[0] >= found_score


def test_moves_change_one_choice_within_the_values_lifetime():
    g = random_training_graph(10, 0)
    last = last_readers(g)
    for v in range(g.loss):
        for when in (KEEP, RECOMPUTE, g.loss):
            current = np.full(g.loss, when)
            for option in materialization_moves(g, current, v, last):
                assert option != when and (option in (KEEP, RECOMPUTE) or g.loss <= option < last[v])


def test_kicks_repeat_with_the_same_seed_and_a_spent_time_limit_returns_the_start():
    g = random_training_graph(16, 3)
    cap = allowed_cost(g)
    start, start_sim = least_peak_checkpoint_set(g, cap)
    one, two = (least_peak_materialization(g, cap, start, seed=5)[0] for _ in range(2))
    assert (one.S == two.S).all()
    assert simulate(g, one, plan=False).peak_memory < start_sim.peak_memory
    # The deadline is checked before each value, so a spent one stops the first climb before any move.
    schedule, sim = least_peak_materialization(g, cap, start, time_limit=0)
    assert (schedule.S == start.S).all() and sim.peak_memory == start_sim.peak_memory


def test_the_search_stops_once_good_enough():
    g = random_training_graph(16, 3)
    cap = allowed_cost(g)
    start, _ = least_peak_checkpoint_set(g, cap)
    asked = []
    schedule, _ = least_peak_materialization(g, cap, start, seed=5, good_enough=lambda s: asked.append(s) or True)
    first, _ = climb_materialization(g, materialization_of(g, start.S), peak_score(g, cap), np.random.default_rng(5))
    assert len(asked) == 1 and (schedule.S == materialization_s(g, first)).all()


@pytest.mark.parametrize("seed", range(3))
def test_the_score_counts_the_stages_at_the_peak_and_names_the_values_live_there(seed):
    g = random_training_graph(12, seed)
    last, rng = last_readers(g), np.random.default_rng(seed)
    score = peak_score(g, np.inf)
    for _ in range(10):
        when = np.array([rng.choice([KEEP, RECOMPUTE, *range(g.loss, max(last[v], g.loss))]) for v in range(g.loss)])
        schedule = schedule_of(g, when)
        sim = simulate(g, schedule, plan=False)
        (peak, stages, cost), live = score(when)
        hot = sim.memory.max(axis=1) == sim.peak_memory
        assert (peak, cost) == (sim.peak_memory, sim.cost) and stages == hot.sum() >= 1
        assert set(live) == {v for v in range(g.loss) if (schedule.S[hot, v] | schedule.R[hot, v]).any()}


def test_a_choice_vector_of_the_wrong_length_is_refused():
    g = random_training_graph(6, 0)
    with pytest.raises(ValueError, match="one choice per forward value"):
        materialization_s(g, np.array([KEEP]))


def test_a_start_over_the_cost_limit_gives_none():
    g = random_training_graph(8, 1)
    start = checkpoint_set_schedule(g, [])
    assert least_peak_materialization(g, simulate(g, start, plan=False).cost - 1, start, time_limit=0) is None
