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

import ctypes
import gc
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from zoo_cases import CASES, batch, build, loss
from zoo_cell import BASELINE, FAST, OPTIONS, check_cell, run_pair, zoo_graph_of

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.budget import span_budget
from remat.strategies import get_strategy
from remat.torch.execute import ScheduleExecutor, autograd_step

pytestmark = pytest.mark.usefixtures("one_thread", "memory_returned")  # one_thread: tests/conftest.py


@pytest.fixture
def memory_returned():
    """Hand each test's freed tensors back to the system, so the worker's heap does not grow from test to test."""
    yield
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc: nothing to trim
        pass


def cells() -> list:
    out = []
    for name in CASES:
        for strategy in OPTIONS:
            marks = [] if name in FAST else [pytest.mark.slow]
            out.append(pytest.param(name, strategy, marks=marks, id=f"{name}-{strategy}"))
    return out


@pytest.mark.parametrize("name, strategy", cells())
def test_zoo_model_recomputes_exactly_within_the_predicted_memory(name, strategy):
    if name in FAST:
        check_cell(name, strategy)
        return
    # A CNN cell runs in a process of its own, so its heap goes back to the system when it ends: in the worker the
    # heap grew to 20 GB over the CNN cells (VGG19 peaks at 5.7 GB alone) and the kernel killed a worker.
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("zoo_cell.py")), name, strategy],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{name}-{strategy} failed in its own process:\n{done.stdout}\n{done.stderr[-6000:]}"


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


@pytest.mark.parametrize("name", list(CASES))
def test_every_value_the_executor_reads_is_an_edge(name):
    """Walk every node's inputs as the executor really reads them (forward arguments through views, saved tensors
    in the backward, gradients) and check each read against the graph's edges."""
    graph = zoo_graph_of(name)
    model = build(name)
    ex = ScheduleExecutor(model, graph, checkpoint_all_schedule(graph), loss=loss(name))
    reads: set[tuple[int, int]] = set()
    current = [-1]
    compute, reg_of = ex._compute, ex._reg_of

    def computing(k):
        current[0] = k
        return compute(k)

    def reading(node, reader):
        reads.add((node, current[0]))
        return reg_of(node, reader)

    ex._compute, ex._reg_of = computing, reading
    sample, target = batch(name, model)
    ex.step(sample, target)
    edges = {tuple(map(int, e)) for e in graph.edges}
    missing = sorted(r for r in reads if r not in edges and r[0] != r[1])
    assert not missing, [(graph.names[a], graph.names[b]) for a, b in missing]
    # ... and every edge is read: the graph asks for nothing the step does not use
    unused = sorted(edges - reads)
    assert not unused, [(graph.names[a], graph.names[b]) for a, b in unused]
    assert np.all(graph.memory[: graph.loss] > 0)
