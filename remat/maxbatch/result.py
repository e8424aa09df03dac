"""What the maximum-batch search returns (paper §6.4)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from remat.schedule import Schedule


@dataclass
class MaxBatchResult:
    strategy: str
    method: str
    budget: float
    max_batch: int  # largest B known feasible (0: none)
    # Smallest B proved (for heuristics, found) infeasible: a probe, a relaxation or the memory bound; None if unknown.
    smallest_infeasible: int | None
    solve_time: float
    schedule: Schedule | None = None
    probes: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    out_of_time: bool = False  # the search's total time limit ended it with the answer unproved

    @property
    def exact(self) -> bool:
        return self.smallest_infeasible is not None and self.smallest_infeasible == self.max_batch + 1

    @property
    def status(self) -> str:
        """``optimal`` (proved exact), ``infeasible`` (proved that no B >= 1 fits), ``time_limit`` (time ran out
        with the answer unproved), ``feasible`` (unproved otherwise) or ``error`` (no answer at all)."""
        if self.exact:
            return "infeasible" if self.max_batch == 0 else "optimal"
        if self.out_of_time or any(p.get("verdict") == "unknown" for p in self.probes):
            return "time_limit"
        return "feasible" if self.max_batch > 0 else "error"
