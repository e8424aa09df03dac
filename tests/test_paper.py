"""The paper's accounting (remat.paper): the artifact's baselines, its reported peaks, App. A's proof."""

from dataclasses import replace

import numpy as np
import pytest
from brute_force import BruteForce

from remat.baselines.checkpoint_sets import linearized_candidates, sqrtn_checkpoints
from remat.baselines.recompute import solve_min_r
from remat.generators import linear_chain, random_training_graph
from remat.graph import GraphError
from remat.graph.reference import load_reference_graph, reference_graphs_available
from remat.maxbatch import max_batch_size
from remat.milp.plain import solve_ilp
from remat.paper import (
    ARTIFACT_BASELINES,
    PAPER_PLATFORM_MEMORY,
    REFERENCE_PARAMETER_BYTES,
    artifact_checkpoint_s,
    artifact_max_batch,
    artifact_schedule,
    paper_budget,
    parameter_bytes,
    pebbling_lower_bound,
)
from remat.schedule import Schedule, simulate


def keras_chain(layers: int, seed: int = 0):
    """linear_chain's layout is Checkmate's Keras layout (gradient of i at 2L - i); random memory and cost."""
    g = linear_chain(layers)
    rng = np.random.default_rng(seed)
    return replace(g, cost=rng.integers(1, 9, g.n).astype(float), memory=rng.integers(1, 9, g.n), batch_size=4,
                   name=f"chain{layers}_s{seed}")


def reported_by_artifact(graph, schedule):
    """Test oracle: the artifact's reporting simulator as its README and PRIOR-ART.md describe it, written
    independently of remat.paper. Values stay allocated across stages; at the start of each stage every value
    neither read in the stage nor kept into the next is freed; after each evaluation its inputs and itself are
    freed unless read later in the stage or kept into the next. Returns (peak at any allocation, cost)."""
    R, S, n = schedule.R, schedule.S, graph.n
    users = [set(map(int, u)) for u in graph.users]
    live: set[int] = set()
    mem = peak = cost = 0.0

    def needed(t, u, after):
        return (t + 1 < n and S[t + 1, u]) or any(R[t, v] and v > after for v in users[u])

    for t in range(n):
        for u in sorted(live):
            if not needed(t, u, u):
                live.discard(u)
                mem -= graph.memory[u]
        for k in np.flatnonzero(R[t]):
            assert all(int(p) in live for p in graph.deps[k]), f"stage {t}: an input of {k} is not resident"
            if k not in live:
                live.add(int(k))
                mem += graph.memory[k]
                peak = max(peak, mem)
            cost += graph.cost[k]
            for u in [*map(int, graph.deps[k]), int(k)]:
                if u in live and not needed(t, u, k):
                    live.discard(u)
                    mem -= graph.memory[u]
    return peak, cost


def test_checkpoint_rules_by_hand():
    # 2 layers: f0, f1, loss, b1 (reads f1), b0 (reads f0). Checkpoint all = {0, 1}: segments [0,1), [1,2].
    S = artifact_checkpoint_s(linear_chain(2), [0, 1])
    assert [np.flatnonzero(row).tolist() for row in S] == [[], [0], [0, 1], [0, 1, 2], [0, 1, 3]]
    sched = artifact_schedule(linear_chain(2), [0, 1])
    assert np.array_equal(sched.R, np.eye(5, dtype=bool))
    # Stage 4 (b0) reads 0 and 3 and nothing keeps 1: its stage-start free drops S[4, 1].
    assert np.flatnonzero(sched.S[4]).tolist() == [0, 3]


@pytest.mark.parametrize("seed", range(4))
def test_stage_start_frees_make_simulate_count_what_the_artifact_reported(seed):
    g = keras_chain(7, seed)
    rng = np.random.default_rng(seed)
    for cks in ([], list(range(g.loss)), sorted(rng.choice(g.loss, 3, replace=False).tolist())):
        S = artifact_checkpoint_s(g, cks)
        raw = Schedule(solve_min_r(g, S), S)
        sim = simulate(g, artifact_schedule(g, cks), plan=False)
        assert sim.valid
        assert (sim.peak_memory, sim.cost) == reported_by_artifact(g, raw)
        # The transform only drops entries: never more memory than the schedule it starts from.
        assert sim.peak_memory <= simulate(g, raw, plan=False).peak_memory


def test_artifact_rules_refuse_other_layouts_and_bad_budgets():
    chain = linear_chain(3)
    g = replace(chain, edges=[e for e in chain.edges.tolist() if e != [0, 6]])  # b0 no longer reads f0
    with pytest.raises(GraphError, match="Keras layout"):
        artifact_checkpoint_s(g, [1])
    with pytest.raises(GraphError, match="leaves nothing for activations"):
        paper_budget(1000, 300, "max_batch_baseline")
    with pytest.raises(ValueError, match="unknown role"):
        paper_budget(1000, 1, "ilp")
    assert paper_budget(1000, 100) == 800 and paper_budget(1000, 100, "max_batch_baseline") == 600


def test_artifact_baselines_are_valid_strategies():
    g = keras_chain(9, 3)
    for name, solve in ARTIFACT_BASELINES.items():
        result = solve(g, 1e9)
        assert result.has_schedule and simulate(g, result.schedule, plan=False).valid, name


@pytest.mark.parametrize("seed", range(3))
def test_pebbling_bound_is_below_every_schedule(seed):
    g = random_training_graph(4, seed)
    oracle = BruteForce(g)
    lowest = oracle.min_budget()
    for budget in (lowest, lowest + 3, lowest + 10):
        bound, best = pebbling_lower_bound(g, budget), oracle.solve(budget)
        assert bound is not None and best is not None and bound <= best[0] + 1e-9
    assert pebbling_lower_bound(g, float(g.memory.max()) - 1) is None


def test_pebbling_bound_proves_the_8_layer_optima():
    g = linear_chain(8)
    for budget, optimum in ((4, 26), (5, 22), (6, 21)):
        partitioned = solve_ilp(g, budget, mip_gap=1e-9)
        assert partitioned.status == "optimal" and partitioned.cost == optimum
        assert pebbling_lower_bound(g, budget) == optimum


def test_parameter_bytes_sources():
    assert parameter_bytes(replace(linear_chain(2), name="vgg19")) == REFERENCE_PARAMETER_BYTES["vgg19"]
    assert parameter_bytes(linear_chain(2).with_constant_memory(70, 10)) == 30
    with pytest.raises(GraphError, match="records no parameter bytes"):
        parameter_bytes(linear_chain(2))


needs_reference = pytest.mark.skipif(not reference_graphs_available(), reason="reference graphs not found")


@pytest.mark.reference
@needs_reference
def test_vgg19_max_batch_equals_the_artifact():
    # The artifact's README: checkpoint all 167, Chen sqrt(n) 197, Chen greedy 266, Checkmate 289 (Fig. 7's caption).
    g = load_reference_graph("vgg19")
    P = REFERENCE_PARAMETER_BYTES["vgg19"]
    baseline = paper_budget(PAPER_PLATFORM_MEMORY, P, "max_batch_baseline")
    found = {s: artifact_max_batch(g, baseline, s)[0] for s in ("checkpoint_all", "chen_sqrtn", "chen_greedy")}
    assert found == {"checkpoint_all": 167, "chen_sqrtn": 197, "chen_greedy": 266}
    ilp = max_batch_size(g, paper_budget(PAPER_PLATFORM_MEMORY, P), "ilp", time_limit=120, hard_limits=False)
    assert (ilp.max_batch, ilp.smallest_infeasible) == (289, 290)


@pytest.mark.reference
@needs_reference
@pytest.mark.parametrize("name", ["vgg19", "vgg_unet", "mobilenet"])
def test_reference_graphs_stage_start_frees_equal_the_artifact(name):
    g = load_reference_graph(name)
    for cks in (range(g.loss), sqrtn_checkpoints(linearized_candidates(g))):
        S = artifact_checkpoint_s(g, list(cks))
        sim = simulate(g, artifact_schedule(g, list(cks)), plan=False)
        assert (sim.peak_memory, sim.cost) == reported_by_artifact(g, Schedule(solve_min_r(g, S), S))
