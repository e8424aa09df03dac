"""One cell of the zoo execution matrix: a zoo model run under a schedule that recomputes, checked against plain
autograd and against ``simulate()``'s memory prediction (see ``tests/test_zoo_execution.py``).

Importable by the tests, and a script so a check can run in a process of its own, whose heap goes back to the
system when it ends: ``python tests/zoo_cell.py cell vgg19 ilp`` or ``python tests/zoo_cell.py edges vgg19`` exits 0
when every check holds.
"""

from __future__ import annotations

import functools
import sys

import numpy as np
import pytest
import torch
from test_executor import assert_same_training_state
from zoo_cases import batch, build, loss

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.budget import no_recompute_peak, span_budget
from remat.strategies import get_strategy
from remat.torch.execute import ScheduleExecutor, autograd_step
from remat.torch.extract import extract

FAST = ("gpt2", "bert", "vit_b16", "mobilenet")
BASELINE = "ap_greedy"  # Chen et al.'s greedy generalised to any DAG (App. B); applies to every zoo graph
# Span fractions (0: the least computable budget, 1: the no-recomputation peak) where each strategy finds a
# recomputing schedule; LP rounding is not monotone in the budget, so its points are chosen per model.
LP_POINT = {"vgg16": 0.5, "vgg19": 0.5, "mobilenet": 0.7, "resnet50": 0.9, "unet": 0.9, "fcn8": 0.7, "segnet": 0.7,
            "gpt2": 0.7, "bert": 0.7, "vit_b16": 0.7, "resnet18": 0.5}
OPTIONS = {"ilp": {"time_limit": 10}, "approx_lp_deterministic": {}, BASELINE: {}}


@functools.cache
def zoo_graph_of(name: str, dtype: torch.dtype = torch.float32):
    model = build(name, dtype=dtype)
    sample, target = batch(name, model, dtype=dtype)
    return extract(model, sample, loss=loss(name), target=target if not isinstance(loss(name), str) else None,
                   name=name)


def run_pair(name: str, schedule, dtype: torch.dtype = torch.float32):
    graph = zoo_graph_of(name, dtype)
    model, ref = build(name, dtype=dtype), build(name, dtype=dtype)
    sample, target = batch(name, model, dtype=dtype)
    torch.manual_seed(7)
    res = ScheduleExecutor(model, graph, schedule, loss=loss(name)).step(sample, target, measure_live=True)
    torch.manual_seed(7)
    value = autograd_step(ref, sample, target, loss(name))
    return res, value, model, ref


def check_cell(name: str, strategy: str) -> None:
    """Solve ``name`` at a budget that binds, run one step, and check gradients, buffers and memory."""
    graph = zoo_graph_of(name)
    fraction = LP_POINT[name] if strategy == "approx_lp_deterministic" else 0.5
    budget = span_budget(graph, fraction)
    assert budget < no_recompute_peak(graph)  # the budget binds
    result = get_strategy(strategy)(graph, budget, **OPTIONS[strategy])
    assert result.has_schedule, f"{strategy} finds no schedule for {name} at {budget:.0f} B: {result.message}"
    res, value, model, ref = run_pair(name, result.schedule)
    assert res.recomputes == int(result.schedule.R.sum()) - graph.n > 0
    assert res.loss == pytest.approx(value, rel=1e-5)
    assert_same_training_state(model, ref)
    assert res.accounting_mismatches == []
    assert res.tracked_peak == res.predicted_peak == result.peak_memory <= budget
    assert abs(res.live_between_peak - res.predicted_peak) <= 0.05 * res.predicted_peak, res.summary()
    assert res.live_peak >= res.live_between_peak
    bn = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert all(int(m.num_batches_tracked) == 1 for m in bn)  # running statistics moved once, not per recomputation


def check_edges(name: str) -> None:
    """Every value the executor reads is an edge of the graph, and every edge is read."""
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


if __name__ == "__main__":
    torch.set_num_threads(1)  # as tests/conftest.py's one_thread: the test machine's 2 cores are shared
    checks = {"cell": check_cell, "edges": check_edges}
    checks[sys.argv[1]](*sys.argv[2:])
    print(f"{' '.join(sys.argv[1:])}: every check holds")
