import pytest

from remat.baselines.checkpoint import checkpoint_all_schedule
from remat.generators import random_training_graph
from remat.graph import DFGraph, GraphError
from remat.maxbatch.limits import batch_upper_bound, cost_cap
from remat.maxbatch.search import max_batch_size
from remat.schedule import simulate


def batched(seed, batch=8, params=100, layers=4):
    g = random_training_graph(layers, seed)
    return DFGraph(g.names, g.cost * batch, g.memory * batch, g.edges, g.loss, batch_size=batch,
                   constant_memory=params)


# The 4-layer graphs reach their memory bound (often by a heuristic alone); the larger ones do not,
# so there the solver probes decide the answer.
@pytest.mark.parametrize(("seed", "layers", "budget"), [(s, 4, b) for s in range(4) for b in (300, 700)]
                         + [(2, 5, 500), (2, 5, 1000), (0, 6, 500)])
def test_search_and_single_milp_agree_and_are_exact(seed, layers, budget):
    g = batched(seed, layers=layers)
    search = max_batch_size(g, budget)
    single = max_batch_size(g, budget, method="milp")
    assert search.max_batch == single.max_batch
    assert search.exact and single.exact and search.status == single.status == "optimal"
    B = search.max_batch
    sim = simulate(g.with_batch_size(B), search.schedule)
    assert sim.valid and sim.peak_memory <= budget and sim.cost <= cost_cap(g.with_batch_size(B)) + 1e-6


@pytest.mark.parametrize("seed", range(3))
def test_milp_batch_at_least_every_baseline(seed):
    g = batched(seed)
    best = max_batch_size(g, 500).max_batch
    for strategy in ("checkpoint_all", "checkpoint_last", "approx_lp_deterministic"):
        assert max_batch_size(g, 500, strategy=strategy).max_batch <= best


def test_no_feasible_batch_is_reported():
    r = max_batch_size(batched(0), 101)
    assert r.max_batch == 0 and "no batch size" in r.message and r.status == "infeasible"


def test_needs_batch_size():
    g = random_training_graph(3, 0)
    with pytest.raises(GraphError, match="batch"):
        max_batch_size(DFGraph(g.names, g.cost, g.memory, g.edges, g.loss), 100)


def test_single_milp_counts_batch_scaled_inputs():
    """Inputs grow with the batch: both methods must see the same constant, so the same B."""
    g = random_training_graph(4, 5)
    g = DFGraph(g.names, g.cost * 4, g.memory * 4, g.edges, g.loss, batch_size=4, constant_memory=100 + 12,
                input_memory=12)
    for budget in (300, 800):
        search = max_batch_size(g, budget)
        single = max_batch_size(g, budget, method="milp")
        assert search.exact and single.exact and search.max_batch == single.max_batch > 0


@pytest.mark.parametrize("seed", range(4))
def test_each_probe_answers_eq_10_as_the_plain_milp_does(seed):
    from remat.budget import memory_lower_bound
    from remat.maxbatch.probes import probe_milp
    from remat.milp.plain import solve_ilp

    g = random_training_graph(6, seed)
    lo, hi = memory_lower_bound(g)[0], simulate(g, checkpoint_all_schedule(g)).peak_memory
    for fraction in (0.0, 0.1, 0.25, 0.5):
        budget = lo + fraction * (hi - lo)
        verdict, schedule = probe_milp(g, budget, None, 1, "highs")
        plain = solve_ilp(g, budget, mip_gap=0)
        fits = plain.has_schedule and plain.cost <= cost_cap(g) * (1 + 1e-9)
        assert verdict == ("feasible" if fits else "infeasible")
        if fits:
            sim = simulate(g, schedule, plan=False)
            assert sim.within(budget) and sim.cost <= cost_cap(g) * (1 + 1e-9)


def test_a_cost_target_ends_the_ilp_once_it_is_met_or_ruled_out():
    from remat.budget import memory_lower_bound
    from remat.milp.certified import solve_ilp_certified
    from remat.milp.plain import solve_ilp

    g = random_training_graph(6, 0)
    lo, hi = memory_lower_bound(g)[0], simulate(g, checkpoint_all_schedule(g)).peak_memory
    budget = lo + 0.3 * (hi - lo)
    optimum = solve_ilp(g, budget, mip_gap=0).cost
    above = solve_ilp_certified(g, budget, mip_gap=0, target=optimum * 1.05)
    assert above.cost <= optimum * 1.05 + 1e-9
    below = solve_ilp_certified(g, budget, mip_gap=0, target=optimum * 0.999)
    assert below.cost >= optimum - 1e-9 and below.lower_bound > optimum * 0.999


@pytest.mark.parametrize("seed", range(3))
def test_the_gallop_ends_on_the_memory_bound_and_stops_there_when_it_is_feasible(seed):
    """No probe above the bound; a feasible probe at the bound proves the answer with no bisection."""
    g = batched(seed)
    hi = batch_upper_bound(g, 2000)
    r = max_batch_size(g, 2000)
    batches = [p["batch"] for p in r.probes]
    assert max(batches) <= hi
    assert r.max_batch == hi and r.exact  # these small graphs reach the bound
    # A gallop that ends once a schedule reaches the bound (at 1 when checkpoint-all does): no bisection.
    assert r.probes[-1]["fits_up_to"] == hi and batches == sorted(set(batches))


@pytest.mark.parametrize("seed", range(3))
def test_a_schedule_proves_every_batch_it_fits_as_brute_force_finds(seed):
    from remat.maxbatch.limits import largest_batch_for

    g = batched(seed)
    schedule = checkpoint_all_schedule(g)
    for budget in (300, 700, 2000):
        hi = batch_upper_bound(g, budget)
        fitting = [B for B in range(1, hi + 1)
                   if simulate(g.with_batch_size(B), schedule, plan=False).within(budget)]
        if not fitting:
            continue
        assert fitting == list(range(1, fitting[-1] + 1))  # memory only grows with B
        assert largest_batch_for(g, schedule, budget, 1, hi) == fitting[-1]


def test_each_feasible_probe_reports_how_far_its_schedule_reaches_and_the_search_skips_there():
    g = batched(0, layers=6)
    r = max_batch_size(g, 1000)
    feasible = [p for p in r.probes if p["verdict"] == "feasible"]
    assert feasible and all(p["fits_up_to"] >= p["batch"] for p in feasible)
    assert r.max_batch == max(p["fits_up_to"] for p in feasible)
    probed = {p["batch"] for p in r.probes}
    for p in feasible:  # no probe inside a range a schedule already proved
        assert not any(p["batch"] < b <= p["fits_up_to"] for b in probed)


@pytest.mark.parametrize("seed", range(2))
def test_a_probe_in_a_child_process_answers_as_one_in_this_process(seed):
    from remat.budget import memory_lower_bound
    from remat.maxbatch.probes import probe_milp

    g = random_training_graph(6, seed)
    lo, hi = memory_lower_bound(g)[0], simulate(g, checkpoint_all_schedule(g)).peak_memory
    for fraction in (0.1, 0.25):
        budget = lo + fraction * (hi - lo)
        here = probe_milp(g, budget, 60, 1, "highs")
        there = probe_milp(g, budget, 60, 1, "highs", hard_limit=True)
        assert here[0] == there[0]
        if there[0] == "feasible":
            sim = simulate(g, there[1], plan=False)
            assert sim.within(budget) and sim.cost <= cost_cap(g) * (1 + 1e-9)


def test_max_batch_with_hard_limits_matches_the_single_milp():
    g = batched(2)
    search = max_batch_size(g, 700, time_limit=60)
    single = max_batch_size(g, 700, method="milp")
    assert search.exact and search.max_batch == single.max_batch


def test_a_total_time_limit_ends_the_search_with_the_bracket_it_reached():
    g = batched(0, layers=6)
    full = max_batch_size(g, 1000)
    assert len(full.probes) > 1 and full.status == "optimal"
    # The heuristics' seed always runs; a limit already spent then stops the search before any probe.
    cut = max_batch_size(g, 1000, total_time_limit=1e-9)
    assert len(cut.probes) == 1 < len(full.probes) and cut.out_of_time and cut.status == "time_limit"
    assert cut.max_batch == cut.probes[0]["fits_up_to"] < full.max_batch and not cut.exact
    # Nothing above was probed, so only the memory bound limits the answer from above.
    assert f"[{cut.max_batch}, {batch_upper_bound(g, 1000)}]" in cut.message and "total time limit" in cut.message
    assert cut.smallest_infeasible == batch_upper_bound(g, 1000) + 1  # the memory bound is a proof too
    roomy = max_batch_size(g, 1000, total_time_limit=600)
    assert roomy.exact and roomy.max_batch == full.max_batch and not roomy.out_of_time


@pytest.mark.parametrize("limit", [0, -5])
def test_a_non_positive_total_time_limit_is_refused(limit):
    with pytest.raises(ValueError, match="total time limit must be positive"):
        max_batch_size(batched(0), 700, total_time_limit=limit)


def test_the_search_starts_from_the_best_heuristic_and_the_solvers_go_beyond_it():
    """A baseline's schedule is a point of the MILP's space: the ILP's answer is never below a baseline's."""
    from remat.maxbatch.probes import FAST_HEURISTICS

    g = batched(0, layers=6)
    r = max_batch_size(g, 1000)
    seed = r.probes[0]
    assert seed["heuristic"] in FAST_HEURISTICS and seed["verdict"] == "feasible"
    assert seed["fits_up_to"] >= max(max_batch_size(g, 1000, strategy=h).max_batch for h in FAST_HEURISTICS
                                     if h != "chen_greedy")  # chen_greedy needs a chain
    assert r.exact and r.max_batch > seed["fits_up_to"]
    assert r.max_batch == max_batch_size(g, 1000, method="milp").max_batch


def test_the_checkpoint_local_search_seeds_the_search_where_it_beats_every_heuristic():
    """On this graph no fast heuristic fits 31 samples; the local search's checkpoint set does."""
    from remat.maxbatch.probes import FAST_HEURISTICS

    g = batched(4, layers=8)
    r = max_batch_size(g, 1000)
    seed = r.probes[0]
    assert seed["heuristic"] == "checkpoint_local_search" and seed["fits_up_to"] == 31
    assert all(max_batch_size(g, 1000, strategy=h).max_batch < 31 for h in FAST_HEURISTICS if h != "chen_greedy")
    assert r.exact and r.max_batch == 31  # the solver probes prove 32 infeasible


def test_the_seed_skips_its_local_search_once_the_search_is_out_of_time():
    import time

    from remat.maxbatch.seeds import best_heuristic_batch

    g = batched(4, layers=8)
    hi = batch_upper_bound(g, 1000)
    assert best_heuristic_batch(g, 1000, hi, max_batch_size)[0] == "checkpoint_local_search"
    spent = best_heuristic_batch(g, 1000, hi, max_batch_size, deadline=time.perf_counter())
    assert spent[0] not in ("checkpoint_local_search", "materialization_local_search") and spent[1] < 31


def test_the_rematerialization_stage_search_reaches_the_memory_bound_where_checkpoint_sets_do_not():
    """Two-level recomputation fits 18 samples here, the memory bound, so no solver probe is needed."""
    from remat.maxbatch.checkpoint_search import least_peak_checkpoint_set
    from remat.maxbatch.limits import allowed_cost, qualifies

    g = batched(0, layers=8)
    hi = batch_upper_bound(g, 1000)
    r = max_batch_size(g, 1000)
    assert r.probes[0]["heuristic"] == "materialization_local_search" and r.probes[0]["fits_up_to"] == hi == 18
    assert r.exact and r.max_batch == 18 and len(r.probes) == 1
    at_bound = g.with_batch_size(hi)
    best_set, _ = least_peak_checkpoint_set(at_bound, allowed_cost(at_bound))
    assert not qualifies(g, best_set, 1000, hi)
