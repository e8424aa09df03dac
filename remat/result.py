"""What every strategy returns: a :class:`SolveResult` checked by ``simulate()``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from remat.graph import DFGraph
from remat.schedule import Schedule, Simulation, simulate


class Status(StrEnum):
    OPTIMAL = "optimal"  # proved optimal (within the requested MIP gap)
    FEASIBLE = "feasible"  # a valid in-budget schedule, optimality not proved
    INFEASIBLE = "infeasible"  # proved (MILP) or found (heuristic) to have no in-budget schedule
    TIME_LIMIT = "time_limit"  # stopped by a limit before any schedule was found
    INTERRUPTED = "interrupted"  # a stop request (Ctrl-C, SIGTERM) ended the search; best schedule and bound so far
    ERROR = "error"  # the strategy could not run (e.g. a licence limit); see message


@dataclass(eq=False)
class SolveResult:
    """A strategy's answer for one graph and budget.

    ``schedule`` and ``simulation`` are set whenever a valid in-budget schedule
    was found (status optimal or feasible). ``lower_bound`` is a proved lower
    bound on the optimal cost where the strategy has one (a MILP dual bound, an
    LP optimum), and ``gap = (cost - lower_bound) / cost``.
    ``min_feasible_budget`` is, for an infeasible answer, the smallest budget the
    strategy knows it could meet.
    """

    strategy: str
    status: Status
    budget: float
    schedule: Schedule | None = None
    simulation: Simulation | None = None
    solve_time: float = 0.0
    lower_bound: float | None = None
    gap: float | None = None
    min_feasible_budget: float | None = None
    message: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def has_schedule(self) -> bool:
        return self.schedule is not None and self.simulation is not None and self.simulation.valid

    @property
    def cost(self) -> float:
        return self.simulation.cost if self.has_schedule else math.nan

    @property
    def peak_memory(self) -> float:
        return self.simulation.peak_memory if self.has_schedule else math.nan

    def overhead(self, graph: DFGraph) -> float:
        """Cost relative to checkpoint-all (computing every node once)."""
        return self.cost / graph.total_cost if graph.total_cost > 0 else math.nan

    def summary(self, graph: DFGraph) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "status": str(self.status),
            "cost": self.cost,
            "overhead": self.overhead(graph),
            "peak_memory": self.peak_memory,
            "budget": self.budget,
            "solve_time": self.solve_time,
            "lower_bound": self.lower_bound,
            "gap": self.gap,
            "message": self.message,
        }


def relative_gap(cost: float, bound: float | None) -> float | None:
    if bound is None or not math.isfinite(cost) or not math.isfinite(bound):
        return None
    if cost == 0:
        return 0.0 if bound >= 0 else None
    return max(0.0, (cost - bound) / abs(cost))


def result_from_schedule(
    strategy: str,
    graph: DFGraph,
    schedule: Schedule | None,
    budget: float,
    solve_time: float = 0.0,
    status: Status = Status.FEASIBLE,
    **extra: Any,
) -> SolveResult:
    """Simulate a strategy's schedule and turn it into a SolveResult.

    A schedule over the budget becomes an infeasible answer that records the
    schedule's peak as the smallest budget this strategy meets; a schedule that
    fails simulate() is a bug in the strategy and raises.
    """
    if schedule is None:
        return SolveResult(strategy, Status.INFEASIBLE, budget, solve_time=solve_time, **extra)
    sim = simulate(graph, schedule)
    if not sim.valid:
        raise AssertionError(f"strategy {strategy} produced an invalid schedule: {sim.violation}")
    if not sim.within(budget):
        extra.setdefault("message", f"needs {sim.peak_memory:.6g} bytes, budget is {budget:.6g}")
        extra.setdefault("min_feasible_budget", sim.peak_memory)
        return SolveResult(strategy, Status.INFEASIBLE, budget, solve_time=solve_time, **extra)
    lb = extra.get("lower_bound")
    if lb is not None and "gap" not in extra:
        extra["gap"] = relative_gap(sim.cost, lb)
    return SolveResult(strategy, status, budget, schedule, sim, solve_time, **extra)
