"""Hard time limits: run a call in a child process and kill it when its time is up.

Backends honour a time limit through their own interrupts, and on large models
that limit is soft. HiGHS 1.15's MIP root, for one, always computes an analytic
centre with an interior-point solve that has no time limit and no interrupt; on
ResNet50's feasibility model (about 224k columns, 419k rows) it runs many
minutes past the limit. A search made of many bounded calls (the maximum-batch
probes) needs each call to end, so it runs them here.

The child is *spawned*, not forked: the parent may hold HiGHS's thread pool, and
a forked copy of a running thread pool can deadlock.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any

#: Seconds past the call's own limit before the child is killed: a call that honours its limit
#: returns in this window (spawning the child and importing numpy, scipy and HiGHS takes about one).
KILL_GRACE = 10.0


def can_isolate() -> bool:
    """Whether this process may start a child (a daemonic pool worker may not)."""
    return not multiprocessing.current_process().daemon


def call_with_hard_limit(fn: Callable[..., Any], args: tuple, limit: float) -> tuple[bool, Any]:
    """``(True, fn(*args))``, or ``(False, None)`` when the call has not returned ``limit`` seconds after it began.

    ``fn`` and ``args`` must be picklable (a module-level function and plain data).
    An exception raised in the child is raised again here; a child killed by a
    signal without answering (by the system, out of memory) counts as not returned.
    A child that *exits* with an error status before answering could not run the
    call at all - typically a script whose top level calls this without
    ``if __name__ == "__main__":`` (a spawned child re-imports the main module) -
    and raises a RuntimeError that says so.
    """
    if limit <= 0:
        raise ValueError(f"the hard time limit must be positive, got {limit!r}")
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_answer, args=(send, fn, args), daemon=True)
    child.start()
    send.close()  # only the child writes; the parent then sees EOF if the child dies
    answered = False
    try:
        if receive.poll(limit):
            ok, value = receive.recv()
            answered = True
    except EOFError:
        pass  # the child died without answering
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        receive.close()
    if not answered:
        if child.exitcode is not None and child.exitcode > 0:
            raise RuntimeError(
                f"the child process for a hard time limit exited with status {child.exitcode} before answering (its "
                "traceback is above). From a script, make the call under `if __name__ == \"__main__\":`, since the "
                "spawned child re-imports the main module; or pass hard_limits=False to run in this process")
        return False, None
    if not ok:
        raise value
    return True, value


def _answer(send, fn: Callable[..., Any], args: tuple) -> None:
    try:
        reply = (True, fn(*args))
    except Exception as exc:  # handed to the parent, which raises it
        reply = (False, exc)
    try:
        send.send(reply)
    except Exception as exc:  # an answer or exception that does not pickle
        send.send((False, RuntimeError(f"the isolated call's answer could not be sent back: {exc}")))
    send.close()
