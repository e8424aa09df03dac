"""The paper's baselines (§6.1, Table 1, App. B): each fixes the checkpoints by a rule, then the least R.

``checkpoint`` (checkpoint all / last), ``checkpoint_sets`` (Chen et al.'s
sqrt(n) and greedy, and their articulation-point and linearized
generalisations), ``griewank`` (revolve), ``eviction`` (a greedy incumbent),
and ``recompute``: the minimum R for a given S that all of them share.
"""

from __future__ import annotations

from collections.abc import Callable

from remat.baselines.checkpoint import solve_checkpoint_all, solve_checkpoint_last
from remat.baselines.checkpoint_sets import (
    solve_ap_greedy,
    solve_ap_sqrtn,
    solve_chen_greedy,
    solve_chen_sqrtn,
    solve_linearized_greedy,
    solve_linearized_sqrtn,
)
from remat.baselines.eviction import solve_eviction_greedy
from remat.baselines.griewank import solve_griewank_logn
from remat.result import SolveResult

#: Every baseline by its registry name (the registry of all strategies is :mod:`remat.strategies`).
BASELINES: dict[str, Callable[..., SolveResult]] = {
    "checkpoint_all": solve_checkpoint_all,
    "checkpoint_last": solve_checkpoint_last,
    "chen_sqrtn": solve_chen_sqrtn,
    "chen_greedy": solve_chen_greedy,
    "ap_sqrtn": solve_ap_sqrtn,
    "ap_greedy": solve_ap_greedy,
    "linearized_sqrtn": solve_linearized_sqrtn,
    "linearized_greedy": solve_linearized_greedy,
    "griewank_logn": solve_griewank_logn,
    "eviction_greedy": solve_eviction_greedy,
}
