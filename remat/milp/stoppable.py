"""Ending the ilp pipeline on request: its work in a thread that a stop event cuts short.

A SIGINT or SIGTERM handler (``run.py``) sets the event; the pipeline's own
stages look at ``inc.stop`` between steps and its solvers poll it, so the
caller gets the best schedule and bound found so far within about a second.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from remat.milp.incumbent import Incumbent
from remat.result import SolveResult, Status, result_from_schedule

POLL_SECONDS, INTERRUPT_GRACE = 0.05, 1.0  # how often a stoppable solve looks at its stop event; how long it waits


def run_until_stopped(run: Callable[[], SolveResult], inc: Incumbent, stop: threading.Event,
                       options: dict) -> SolveResult:
    """``run()`` in a worker thread, returning within :data:`INTERRUPT_GRACE` seconds once ``stop`` is set.

    The calling thread waits in short steps, so it keeps handling signals.
    """
    box: dict[str, object] = {}

    def work() -> None:
        try:
            box["result"] = run()
        except BaseException as exc:  # raised again in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=work, name="remat-ilp", daemon=True)
    worker.start()
    while worker.is_alive() and not stop.is_set():
        worker.join(POLL_SECONDS)
    if worker.is_alive():
        inc.interrupted = True
        inc.stop.set()
        worker.join(INTERRUPT_GRACE)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    if "result" in box:
        return box["result"]  # type: ignore[return-value]
    # The worker is still inside a solver call that does not check the stop: answer from what it has found.
    schedule, cost, bound = inc.best()
    message = f"interrupted after {inc.elapsed():.1f} s"
    if schedule is None:
        return SolveResult("ilp", Status.INTERRUPTED, inc.budget, solve_time=inc.elapsed(), lower_bound=bound,
                           message=message, options=options, stats={"milestones": dict(inc.milestones)})
    return result_from_schedule("ilp", inc.graph, schedule, inc.budget, inc.elapsed(), status=Status.INTERRUPTED,
                                lower_bound=bound, options=options, message=message,
                                stats={"milestones": dict(inc.milestones), "incumbent_source": inc.source})
