"""Running schedules in TensorFlow: gradients equal a plain GradientTape step, memory equals simulate()'s.

Runs only in its own process (see tests/test_keras.py). Tolerance: float32 values
compared with rtol=1e-5 and atol=1e-6 x the largest |gradient| of each tensor; the
executor calls the same kernels on the same values, so only summation order of
gradient contributions may differ (in practice the results are bitwise equal).
"""

from __future__ import annotations

import numpy as np
import pytest

import remat.keras as rk  # imports torch/torchvision/triton before TensorFlow
from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.baselines.recompute import checkpoints_to_s, solve_min_r
from remat.budget import no_recompute_peak
from remat.keras.env import keras
from remat.keras.execute import KerasExecution
from remat.keras.models import ZOO, build_zoo_model
from remat.schedule import Schedule, simulate
from remat.strategies import get_strategy, strategy_names

L = keras.layers
BATCH = 2
SMALL = (32, 32, 3)
# Kept out of the default run (pytest -m slow runs them): checkpoint_last recomputes quadratically
# (15 s to 2 min per model on this 2-core machine); FCN-8s carries a 100M-parameter 7x7 fc6 convolution.
FAST_LAST = {"vgg16", "segnet"}
FAST_RECOMPUTE = set(ZOO) - {"fcn8"}


def marked(names, fast):
    return [z if z in fast else pytest.param(z, marks=pytest.mark.slow) for z in names]


class Case:
    """A small zoo model, its graph, fixed data and one plain GradientTape step from a fixed state."""

    def __init__(self, name: str) -> None:
        self.model = build_zoo_model(name, SMALL, classes=10)
        self.graph = rk.extract(self.model, BATCH)
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((BATCH, *SMALL)).astype("float32")
        self.y = rng.standard_normal((BATCH, *self.model.outputs[0].shape[1:])).astype("float32")
        self.state0 = [v.numpy() for v in self.model.non_trainable_variables]
        self.loss, self.grads = rk.plain_gradients(self.model, self.x, self.y)
        self.state1 = [v.numpy() for v in self.model.non_trainable_variables]

    def run(self, schedule: Schedule) -> KerasExecution:
        for v, value in zip(self.model.non_trainable_variables, self.state0):
            v.assign(value)
        return rk.execute_schedule(self.graph, self.model, schedule, self.x, self.y)

    def check(self, schedule: Schedule) -> None:
        out = self.run(schedule)
        assert out.loss == pytest.approx(self.loss, rel=1e-6)
        assert len(out.gradients) == len(self.grads)
        for got, want, var in zip(out.gradients, self.grads, self.model.trainable_variables):
            atol = 1e-6 * float(np.max(np.abs(want)))
            assert np.allclose(got, want, rtol=1e-5, atol=atol), f"gradient of {var.path} differs"
        assert out.computes == int(schedule.R.sum())
        np.testing.assert_array_equal(out.live_bytes, plan_live_bytes(self.graph, schedule))
        for got, want in zip(self.model.non_trainable_variables, self.state1):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-7)


def plan_live_bytes(graph, schedule: Schedule) -> np.ndarray:
    """simulate()'s U[t, k] minus the constant at every computed (t, k): what the plan holds there."""
    return (simulate(graph, schedule).memory - graph.constant_memory)[schedule.R]


_cases: dict[str, Case] = {}


def case(name: str) -> Case:
    if name not in _cases:
        _cases[name] = Case(name)
    return _cases[name]


def recompute_by_hand(graph, every: int = 3) -> Schedule:
    """Keep every ``every``-th forward value and all backward values until their last use; min R for the rest."""
    n, loss = graph.n, graph.loss
    last_use = np.full(n, -1)
    np.maximum.at(last_use, graph.edges[:, 0], graph.edges[:, 1])
    kept = np.zeros(n, bool)
    kept[:loss:every] = True
    kept[loss:] = True
    t, i = np.arange(n)[:, None], np.arange(n)[None, :]
    S = checkpoints_to_s(graph, (i < t) & (last_use[None, :] >= t) & kept[None, :])
    return Schedule(solve_min_r(graph, S), S)


@pytest.mark.parametrize("name", ZOO)
def test_checkpoint_all_matches_plain_step(name):
    c = case(name)
    c.check(checkpoint_all_schedule(c.graph))


@pytest.mark.parametrize("name", marked(ZOO, FAST_RECOMPUTE))
def test_hand_built_recomputation_matches_plain_step(name):
    c = case(name)
    schedule = recompute_by_hand(c.graph)
    assert schedule.R.sum() > c.graph.n, "the schedule should recompute something"
    assert simulate(c.graph, schedule).peak_memory < no_recompute_peak(c.graph)
    c.check(schedule)


@pytest.mark.parametrize("name", marked(ZOO, FAST_LAST))
def test_checkpoint_last_matches_plain_step(name):
    c = case(name)
    result = get_strategy("checkpoint_last")(c.graph, float("inf"))
    c.check(result.schedule)


@pytest.mark.parametrize("strategy", strategy_names())
def test_every_registered_strategy_runs_on_vgg16(strategy):
    c = case("vgg16")
    peak = no_recompute_peak(c.graph)
    activations = peak - c.graph.constant_memory
    for fraction in (0.9, 0.95, 1.0):
        result = get_strategy(strategy)(c.graph, c.graph.constant_memory + fraction * activations)
        if result.schedule is not None and result.simulation.within(result.budget):
            break
    else:
        pytest.fail(f"{strategy} found no schedule within the no-recomputation peak: {result.message}")
    c.check(result.schedule)


def test_invalid_schedule_and_foreign_graph_are_rejected():
    c = case("segnet")
    bad = checkpoint_all_schedule(c.graph)
    S = bad.S.copy()
    S[5, :5] = False  # stage 5 loses the value it reads
    with pytest.raises(ValueError, match="not valid"):
        c.run(Schedule(bad.R, S))
    other = case("unet").graph
    with pytest.raises(rk.KerasModelError, match="was not extracted from model"):
        rk.execute_schedule(other, c.model, checkpoint_all_schedule(other), c.x, c.y)


def test_non_linear_merge_is_rejected_by_name():
    x = keras.Input((4,))
    a, b = L.Dense(3, name="a")(x), L.Dense(3, name="b")(x)
    model = keras.Model(x, L.Multiply(name="gate")([a, b]))
    graph = rk.extract(model, 2)
    with pytest.raises(rk.KerasModelError, match="'gate' \\(Multiply\\) has 2 inputs"):
        rk.execute_schedule(graph, model, checkpoint_all_schedule(graph), np.ones((2, 4), "float32"), np.ones((2, 3)))
