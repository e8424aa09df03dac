"""The shared state of the certified pipeline (:mod:`remat.milp.certified`): best schedule, best bound, milestones."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from remat.graph import DFGraph
from remat.schedule import Schedule, simulate


class Incumbent:
    """The best schedule so far, the best proved bound, and when each milestone was reached.

    Shared by the engines of a race, so every update holds a lock; ``stop`` is set
    once the answer is decided, which ends every search still running.
    """

    def __init__(self, graph: DFGraph, budget: float, gap: float, start: float,
                 on_incumbent: Callable[[float, float, float], None] | None) -> None:
        self.graph, self.budget, self.gap, self.start = graph, budget, gap, start
        self.cost = np.inf
        self.hinted = np.inf  # best objective a solver reported before handing over its schedule
        self.schedule: Schedule | None = None
        self.source = ""
        self.bound = graph.total_cost  # every node is computed at least once
        self.on_incumbent = on_incumbent
        self.milestones: dict[str, float] = {}
        self.target: float | None = None  # stop once a schedule costs at most this, or the bound exceeds it
        # Whether models get the freed-at-most-once inequality (build_checkmate_milp); None: the LP decides.
        self.free_once: bool | None = None
        self.proof = ""  # set when an engine proves that no schedule fits
        self.lp_solution: tuple[np.ndarray, np.ndarray] | None = None  # (R*, S*) of the frontier LP
        self.closure: Any = None  # the stage-closure bound, once computed (remat.milp.closure_bound.ClosureBound)
        self.stop = threading.Event()
        self.interrupted = False  # a caller's stop request (not a decided answer) set ``stop``
        self._pool: list[tuple[float, Schedule]] = []  # every valid schedule offered
        self._lock = threading.RLock()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def offer(self, schedule: Schedule, source: str, cost: float | None = None) -> None:
        if cost is None:
            sim = simulate(self.graph, schedule, plan=False)
            if not sim.within(self.budget):
                return
            cost = sim.cost
        with self._lock:
            self._pool.append((cost, schedule))
            if cost < self.cost - 1e-9:
                self.cost, self.schedule, self.source = cost, schedule, source
                self.milestones.setdefault("first_schedule", self.elapsed())
                self._notify()

    def best(self) -> tuple[Schedule | None, float, float]:
        """The best schedule so far, its cost and the best proved bound, read together."""
        with self._lock:
            return self.schedule, self.cost, self.bound

    def pool(self) -> list[Schedule]:
        """Every valid schedule offered so far, cheapest first."""
        with self._lock:
            return [schedule for _, schedule in sorted(self._pool, key=lambda entry: entry[0])]

    def cost_hint(self, cost: float) -> None:
        """A solver's improving objective: reported at once, its schedule is collected when the solver returns."""
        with self._lock:
            if cost < min(self.cost, self.hinted) - 1e-9:
                self.hinted = cost
                self._notify()

    def raise_bound(self, bound: float | None) -> None:
        with self._lock:
            if bound is not None and bound > self.bound:
                self.bound = bound
                self._notify()

    def certified(self) -> bool:
        with self._lock:
            done = self.schedule is not None and self.cost <= (1 + self.gap) * self.bound + 1e-9
            if done:
                self.milestones.setdefault("certified", self.elapsed())
                self.stop.set()
            return done

    def decided(self) -> bool:
        """Certified, past the target, proved infeasible, or stopped by an engine that finished."""
        with self._lock:
            if self.target is not None and (self.cost <= self.target or self.bound > self.target):
                self.stop.set()
            return self.certified() or self.stop.is_set()

    def _notify(self) -> None:
        best = min(self.cost, self.hinted)
        if np.isfinite(best):
            if best <= 1.01 * self.bound + 1e-9:
                self.milestones.setdefault("gap_1pct", self.elapsed())
            if self.on_incumbent is not None:
                self.on_incumbent(self.elapsed(), best, self.bound)
        self.decided()
