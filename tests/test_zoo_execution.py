"""Every zoo model, old and new, run under schedules that recompute: gradients and buffers equal plain autograd's,
the measured memory is what ``simulate()`` predicts, and every value the executor reads is an edge of the graph.

Models at the small settings of ``tests/zoo_cases.py`` (dropout 0.1 in the transformers, batch norm in training
mode in the CNNs), one fixed seed for both runs. Tolerances: float32 gradients ``rtol=1e-5, atol=1e-6`` (the CPU
runs are in fact bit-identical), float64 ``1e-8``. Memory: no GPU is lent to this project's tests, so the meter is
:class:`~remat.torch.memory.LiveTensorMeter` (live tensor storage on the CPU, parameter gradients counted from the
step's start, as the graph holds them); between statements, where ``simulate()`` measures, it must be within 5 %
of the prediction. The peak inside statements adds the workspace of one backward (a VJP's temporaries, also in
plain autograd), reported by ``benchmarks/vs_pytorch.py``. The transformers and MobileNet form the fast subset
that always runs; the other CNNs are marked slow (``-m "not slow"`` skips them; CI runs everything).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from zoo_cases import CASES, batch, build, loss
from zoo_cell import BASELINE, FAST, OPTIONS, check_cell, check_edges, run_pair, zoo_graph_of

from remat.budget import span_budget
from remat.strategies import get_strategy
from remat.torch.execute import autograd_step

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


# The CNN checks run each in a process of its own, so its heap goes back to the system when it ends (VGG19 peaks at
# 5.7 GB alone; in the workers the heap grew over them until the kernel killed one), and first (tests/conftest.py),
# while the workers are small: two may run at once, one per worker. (xdist's loadgroup, which would keep them on one
# worker, does not group anything with pytest 9.2 and xdist 3.8: measured, grouped tests spread over both workers.)
CNN_MARKS = (pytest.mark.slow, pytest.mark.own_process)


def cnn_marked(names: list[str]) -> list:
    return [pytest.param(name, marks=() if name in FAST else CNN_MARKS, id=name) for name in names]


def cells() -> list:
    return [pytest.param(name, strategy, marks=param.marks, id=f"{name}-{strategy}")
            for param, name in zip(cnn_marked(list(CASES)), CASES) for strategy in OPTIONS]


def run_alone(*args: str) -> None:
    """Run one ``tests/zoo_cell.py`` check in a fresh interpreter and fail with its output if it fails."""
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("zoo_cell.py")), *args],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{' '.join(args)} failed in its own process:\n{done.stdout}\n{done.stderr[-6000:]}"


@pytest.mark.parametrize("name, strategy", cells())
def test_zoo_model_recomputes_exactly_within_the_predicted_memory(name, strategy):
    if name in FAST:
        check_cell(name, strategy)
    else:
        run_alone("cell", name, strategy)


@pytest.mark.parametrize("name", ["gpt2", "bert", "resnet18", "vit_b16"])
def test_float64_gradients_equal_autograd_to_1e_8(name):
    graph = zoo_graph_of(name, torch.float64)
    assert graph.metadata["dtype"] == "float64"
    result = get_strategy(BASELINE)(graph, span_budget(graph, 0.5))
    res, value, model, ref = run_pair(name, result.schedule, torch.float64)
    assert res.recomputes > 0 and res.accounting_mismatches == []
    assert res.loss == pytest.approx(value, rel=1e-12)
    for (key, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
        assert torch.allclose(p.grad, q.grad, rtol=1e-8, atol=1e-8), (key, (p.grad - q.grad).abs().max())


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_dropout_masks_are_replayed_on_recomputation(name):
    """With another seed plain autograd draws other dropout masks and other gradients, so equality above means the
    recomputed dropouts replayed the first forward's masks (as torch.utils.checkpoint's preserve_rng_state)."""
    graph = zoo_graph_of(name)
    result = get_strategy(BASELINE)(graph, span_budget(graph, 0.5))
    drops = [i for i in range(graph.loss) if graph.metadata["fx_ops"][i] == "Dropout"]
    assert result.schedule.R[:, drops].sum() > len(drops)  # some dropout is recomputed
    res, _, model, _ = run_pair(name, result.schedule)
    other = build(name)
    sample, target = batch(name, other)
    torch.manual_seed(8)
    autograd_step(other, sample, target, loss(name))
    assert any(not torch.allclose(p.grad, q.grad) for p, q in zip(model.parameters(), other.parameters(),
                                                                 strict=True))


@pytest.mark.parametrize("name", cnn_marked(list(CASES)))
def test_every_value_the_executor_reads_is_an_edge(name):
    """Walk every node's inputs as the executor really reads them (forward arguments through views, saved tensors
    in the backward, gradients) and check each read against the graph's edges (``zoo_cell.check_edges``)."""
    if name in FAST:
        check_edges(name)
    else:
        run_alone("edges", name)
