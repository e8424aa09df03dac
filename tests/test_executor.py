"""The PyTorch schedule executor: gradients equal plain autograd's, BN/dropout exact, memory as simulated, bad input.

Tolerance: parameter gradients are compared with ``torch.allclose(rtol=1e-5,
atol=1e-6)`` under a fixed seed; in practice the executor is bit-identical to
plain autograd on CPU (same kernels, same order), the tolerance only allows for
summation order where a value has several users.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from torch import nn

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.budget import no_recompute_peak, span_budget
from remat.schedule import Schedule, simulate
from remat.strategies import get_strategy, strategy_names
from remat.torch.execute import ExecutionError, ScheduleExecutor, StepOutOfMemory, autograd_step, random_batch
from remat.torch.extract import extract

RTOL, ATOL = 1e-5, 1e-6


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


class Net(nn.Module):
    """Conv-BN-ReLU-pool, a residual add, dropout, flatten, linear: every kind of saved tensor and extra."""

    def __init__(self, width: int = 4, p: float = 0.5) -> None:
        super().__init__()
        self.c1, self.bn, self.r1 = nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.c2, self.r2 = nn.Conv2d(width, width, 3, padding=1), nn.ReLU()
        self.drop = nn.Dropout(p)
        self.fc = nn.Linear(width * 16, 5)

    def forward(self, x):
        h = self.pool(self.r1(self.bn(self.c1(x))))
        h = self.drop(self.r2(self.c2(h)) + h)
        return self.fc(torch.flatten(h, 1))


SHAPE = (3, 8, 8)


def make_pair(build=Net, seed: int = 0):
    torch.manual_seed(seed)
    model = build()
    ref = build()
    ref.load_state_dict(model.state_dict())
    return model, ref


def run_both(model, ref, graph, schedule, seed: int = 7, measure_live: bool = False):
    x, y = random_batch(graph, torch.Generator().manual_seed(seed))
    torch.manual_seed(seed)
    res = ScheduleExecutor(model, graph, schedule).step(x, y, measure_live=measure_live)
    torch.manual_seed(seed)
    loss = autograd_step(ref, x, y, graph.metadata["loss"])
    return res, loss


def assert_same_training_state(model, ref):
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
        assert (p.grad is None) == (q.grad is None), name  # None only where autograd gives none (unused outputs)
        if q.grad is None:
            continue
        assert torch.allclose(p.grad, q.grad, rtol=RTOL, atol=ATOL), (name, (p.grad - q.grad).abs().max())
    for (name, b), (_, c) in zip(model.named_buffers(), ref.named_buffers(), strict=True):
        assert torch.allclose(b.float(), c.float(), rtol=RTOL, atol=ATOL), name


def chain_net() -> nn.Module:
    torch.manual_seed(3)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), nn.Dropout(0.5), nn.Flatten(), nn.Linear(64, 5),
    )  # fmt: skip


@pytest.fixture(scope="module")
def net_graph():
    return extract(Net(), SHAPE, batch_size=2, name="net")


@pytest.fixture(scope="module")
def chain_graph():
    return extract(chain_net(), SHAPE, batch_size=2, name="chain")


def decoder_net() -> nn.Module:
    from remat.models.transformers import GPT2

    torch.manual_seed(0)
    return GPT2(vocab_size=32, context=8, n_layer=2, d_model=16, n_head=2, dropout=0.1)


@pytest.fixture(scope="module")
def decoder_graph():
    return extract(decoder_net(), torch.randint(0, 32, (2, 8)), loss="token_cross_entropy", name="decoder")


BUILDERS = {"net": Net, "chain": chain_net, "decoder": decoder_net}

# Each strategy on each graph shape it applies to, at a budget (a span fraction: 0 is the least computable
# budget, 1 the no-recomputation peak) where it finds a schedule that must recompute. The linear-chain
# strategies (chen_*, griewank_logn) apply to the chain only; checkpoint_all never recomputes (it is tested
# at its own peak below). A strategy that finds no schedule in one of these cells fails the test.
CELLS: dict[str, dict[str, tuple[float, dict]]] = {
    "net": {
        "ap_greedy": (0.5, {}), "ap_sqrtn": (0.5, {}), "approx_lp_deterministic": (0.5, {}),
        "closure_eviction": (0.5, {}), "approx_lp_randomized": (0.8, {}), "checkpoint_last": (0.5, {}),
        "eviction_greedy": (0.5, {}),
        "ilp": (0.5, {"time_limit": 20}), "ilp_plain": (0.5, {"time_limit": 20}), "linearized_greedy": (0.5, {}),
        "linearized_sqrtn": (0.5, {}),
    },
    "chain": {
        "ap_greedy": (0.5, {}), "ap_sqrtn": (0.5, {}), "approx_lp_deterministic": (0.5, {}),
        "approx_lp_randomized": (0.5, {"seed": 2}), "checkpoint_last": (0.5, {}), "chen_greedy": (0.5, {}),
        "closure_eviction": (0.5, {}),
        "chen_sqrtn": (0.5, {}), "eviction_greedy": (0.5, {}), "griewank_logn": (0.5, {}),
        "ilp": (0.5, {"time_limit": 20}), "ilp_plain": (0.5, {"time_limit": 20}), "linearized_greedy": (0.5, {}),
        "linearized_sqrtn": (0.5, {}),
    },
    "decoder": {
        "ap_greedy": (0.5, {}), "ap_sqrtn": (0.6, {}), "approx_lp_deterministic": (0.5, {}),
        "approx_lp_randomized": (0.6, {}), "checkpoint_last": (0.999, {}), "eviction_greedy": (0.5, {}),
        "closure_eviction": (0.5, {}),
        "ilp": (0.5, {"time_limit": 20}), "ilp_plain": (0.7, {"time_limit": 20}), "linearized_greedy": (0.5, {}),
        "linearized_sqrtn": (0.5, {}),
    },
}  # fmt: skip
MATRIX = [(shape, strategy) for shape, cells in CELLS.items() for strategy in cells]


def test_the_matrix_covers_every_strategy_on_three_shapes():
    covered = {s for _, s in MATRIX}
    assert covered == set(strategy_names()) - {"checkpoint_all"}
    general = covered - {"chen_greedy", "chen_sqrtn", "griewank_logn"}
    assert all(s in CELLS[shape] for s in general for shape in ("net", "chain", "decoder"))


def solve_cell(graph, strategy: str, fraction: float, **options):
    """The cell's schedule: one must exist, the budget must bind (below the no-recomputation peak)."""
    budget = span_budget(graph, fraction)
    assert budget < no_recompute_peak(graph)
    result = get_strategy(strategy)(graph, budget, **options)
    assert result.has_schedule, f"{strategy} finds no schedule for {graph.name!r} at {budget:.0f} B: {result.message}"
    assert result.peak_memory <= budget
    return result.schedule


# ---------------------------------------------------------------------- exactness
@pytest.mark.parametrize("shape, strategy", MATRIX)
def test_every_strategy_recomputes_and_gives_autograd_gradients(net_graph, chain_graph, decoder_graph, shape,
                                                                strategy):
    graph = {"net": net_graph, "chain": chain_graph, "decoder": decoder_graph}[shape]
    fraction, options = CELLS[shape][strategy]
    schedule = solve_cell(graph, strategy, fraction, **options)
    model, ref = make_pair(BUILDERS[shape])
    res, loss = run_both(model, ref, graph, schedule)
    assert res.recomputes == int(schedule.R.sum()) - graph.n > 0
    assert res.loss == pytest.approx(loss, rel=1e-6)
    assert_same_training_state(model, ref)
    assert res.accounting_mismatches == []
    assert res.tracked_peak == res.predicted_peak == simulate(graph, schedule).peak_memory <= span_budget(graph,
                                                                                                          fraction)


def test_checkpoint_all_gives_autograd_gradients(net_graph):
    schedule = get_strategy("checkpoint_all")(net_graph, float("inf")).schedule
    model, ref = make_pair()
    res, loss = run_both(model, ref, net_graph, schedule)
    assert res.recomputes == 0 and res.loss == pytest.approx(loss, rel=1e-6)
    assert_same_training_state(model, ref)


def test_recomputed_batchnorm_and_dropout_are_exact(net_graph):
    schedule = get_strategy("checkpoint_last")(net_graph, float("inf")).schedule
    names = list(net_graph.names)
    bn, drop = names.index("bn"), names.index("drop")
    assert schedule.R[:, bn].sum() > 2 and schedule.R[:, drop].sum() > 2  # really recomputed
    model, ref = make_pair()
    res, loss = run_both(model, ref, net_graph, schedule)
    assert res.recomputes > 20
    assert_same_training_state(model, ref)
    # Running statistics moved exactly once (momentum 0.1 from the initial 0 / 1).
    assert int(model.bn.num_batches_tracked) == 1
    assert not torch.equal(model.bn.running_mean, torch.zeros_like(model.bn.running_mean))
    # The comparison means something: dropout with another mask gives other gradients.
    other = Net()
    other.load_state_dict(make_pair()[0].state_dict())
    x, y = random_batch(net_graph, torch.Generator().manual_seed(7))
    torch.manual_seed(8)
    autograd_step(other, x, y, "cross_entropy")
    assert not torch.allclose(other.fc.weight.grad, model.fc.weight.grad, rtol=RTOL, atol=ATOL)


def test_hand_built_schedule_recomputing_dropout_in_backward(net_graph):
    """Checkpoint-all, except dropout's output is not kept into its backward's stage but recomputed there."""
    g = net_graph
    base = checkpoint_all_schedule(g)
    R, S = base.R.copy(), base.S.copy()
    names = list(g.names)
    drop, add = names.index("drop"), names.index("add")
    db = names.index("drop_backward")
    S[db:, drop] = False
    S[add + 1 : db + 1, add] = True  # keep dropout's input until its recomputation
    R[db, drop] = True
    schedule = Schedule(R, S)
    assert simulate(g, schedule).valid
    model, ref = make_pair()
    res, _ = run_both(model, ref, g, schedule)
    assert res.recomputes == 1
    assert_same_training_state(model, ref)


def test_two_steps_accumulate_like_autograd(net_graph):
    schedule = get_strategy("checkpoint_last")(net_graph, float("inf")).schedule
    model, ref = make_pair()
    run_both(model, ref, net_graph, schedule, seed=1)
    run_both(model, ref, net_graph, schedule, seed=2)
    assert int(model.bn.num_batches_tracked) == 2
    assert_same_training_state(model, ref)


def test_inplace_modules_run_out_of_place_and_are_restored():
    def build():
        torch.manual_seed(5)
        return nn.Sequential(
            nn.Linear(6, 8), nn.ReLU(inplace=True), nn.Linear(8, 8), nn.ReLU(inplace=True), nn.Linear(8, 3)
        )

    model, ref = build(), build()
    graph = extract(model, (6,), batch_size=4)
    assert graph.metadata["fx_out_of_place"]
    res, loss = run_both(model, ref, graph, get_strategy("checkpoint_last")(graph, float("inf")).schedule)
    assert res.recomputes > 0 and res.loss == pytest.approx(loss, rel=1e-6)
    assert_same_training_state(model, ref)
    assert model[1].inplace and model[3].inplace


# ---------------------------------------------------------------------- memory
def test_live_memory_agrees_with_simulation(net_graph):
    for strategy in ("checkpoint_all", "checkpoint_last"):
        schedule = get_strategy(strategy)(net_graph, float("inf")).schedule
        model, ref = make_pair()
        res, _ = run_both(model, ref, net_graph, schedule, measure_live=True)
        assert res.tracked_peak == res.predicted_peak
        assert abs(res.live_peak - res.predicted_peak) <= 0.10 * res.predicted_peak, res.summary()


def test_zoo_model_exact_and_memory_within_ten_percent():
    from remat.models import get_model

    graph = extract(get_model("mobilenet", num_classes=10), (3, 32, 32), batch_size=2, name="mobilenet")
    schedule = get_strategy("checkpoint_last")(graph, float("inf")).schedule
    model, ref = make_pair(lambda: get_model("mobilenet", num_classes=10))
    res, _ = run_both(model, ref, graph, schedule, measure_live=True)
    assert res.recomputes > 0
    assert_same_training_state(model, ref)
    assert res.tracked_peak == res.predicted_peak and res.accounting_mismatches == []
    assert abs(res.live_peak - res.predicted_peak) <= 0.10 * res.predicted_peak, res.summary()


# ---------------------------------------------------------------------- bad input
def test_mismatched_schedule_is_refused_before_any_compute(net_graph):
    model = Net()
    wrong = checkpoint_all_schedule(extract(nn.Sequential(nn.Flatten(), nn.Linear(192, 3)), SHAPE, 2))
    with pytest.raises(ExecutionError, match=r"columns but graph 'net' has 19 nodes"):
        ScheduleExecutor(model, net_graph, wrong)
    R = np.eye(net_graph.n, dtype=bool)
    with pytest.raises(ExecutionError, match=r"invalid for graph 'net': stage 1: node 1 \('bn'\) is computed"):
        ScheduleExecutor(model, net_graph, Schedule(R, np.zeros_like(R)))
    assert all(p.grad is None for p in model.parameters()) and int(model.bn.num_batches_tracked) == 0


def test_model_graph_mismatch_names_first_differing_node(net_graph):
    class Other(Net):
        def forward(self, x):
            h = self.pool(torch.tanh(self.bn(self.c1(x))))
            return self.fc(torch.flatten(self.drop(self.r2(self.c2(h)) + h), 1))

    with pytest.raises(ExecutionError, match=r"differ at forward node 2: the graph has 'r1'.*'tanh'"):
        ScheduleExecutor(Other(), net_graph, checkpoint_all_schedule(net_graph))
    with pytest.raises(ExecutionError, match=r"forward node 0 'c1' \(Conv2d\)"):
        ScheduleExecutor(Net(width=8), net_graph, checkpoint_all_schedule(net_graph))
    ex = ScheduleExecutor(Net(), net_graph, checkpoint_all_schedule(net_graph))
    with pytest.raises(ExecutionError, match=r"input 'x' is \(3, 3, 8, 8\).*extracted for \(2, 3, 8, 8\)"):
        ex.step(torch.zeros(3, *SHAPE), torch.zeros(3, dtype=torch.long))


def test_out_of_memory_reports_step_and_plan_position():
    class Hungry(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.act, self.fc2 = nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(x)))

    class Starving(nn.ReLU):
        armed = False

        def forward(self, x):
            if Starving.armed:
                raise torch.OutOfMemoryError("CPU out of memory (simulated allocator failure)")
            return super().forward(x)

    model = Hungry()
    model.act = Starving()
    g = extract(model, (4,), 2, leaf_modules=[Starving])
    schedule = get_strategy("checkpoint_last")(g, float("inf")).schedule
    ex = ScheduleExecutor(model, g, schedule, leaf_modules=[Starving])
    x, y = random_batch(g, torch.Generator().manual_seed(0))
    ex.step(x, y)  # step 0 computes act once or more
    with pytest.raises(
        StepOutOfMemory, match=r"out of memory in step 1 at plan position \d+/\d+ \(stage \d+, computing node 1 'act'\)"
    ):
        Starving.armed = True
        ex.step(x, y)


def test_graph_without_torch_metadata_is_refused():
    from remat.generators import linear_chain

    g = linear_chain(3)
    with pytest.raises(ExecutionError, match="extract"):
        ScheduleExecutor(Net(), g, checkpoint_all_schedule(g))


def test_train_lowers_the_loss():
    from remat.torch.train import train

    model = Net(p=0.0)
    graph = extract(model, SHAPE, batch_size=2)
    schedule = get_strategy("checkpoint_last")(graph, float("inf")).schedule
    rows = train(model, graph, schedule, steps=12, lr=0.1, progress=bool(os.environ.get("REMAT_PROGRESS")))
    assert len(rows) == 12 and rows[0]["tracked_peak"] == rows[0]["predicted_peak"]
    assert np.mean([r["loss"] for r in rows[-4:]]) < np.mean([r["loss"] for r in rows[:4]])
