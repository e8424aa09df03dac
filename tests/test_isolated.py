import math
import os
import signal
import time

import pytest

from remat.solvers.isolated import call_with_hard_limit


def test_a_call_that_returns_in_time_gives_its_value():
    assert call_with_hard_limit(math.factorial, (5,), 60) == (True, 120)


def test_a_call_past_its_limit_is_killed_and_reports_no_answer():
    start = time.perf_counter()
    assert call_with_hard_limit(time.sleep, (60,), 2.0) == (False, None)
    assert time.perf_counter() - start < 30


def test_an_exception_in_the_child_is_raised_here():
    with pytest.raises(ValueError, match="negative"):
        call_with_hard_limit(math.factorial, (-1,), 60)


def test_a_limit_that_is_not_positive_is_refused():
    with pytest.raises(ValueError, match="positive"):
        call_with_hard_limit(math.factorial, (5,), 0)


def test_a_child_that_exits_with_an_error_before_answering_is_an_error_that_names_the_usual_cause():
    with pytest.raises(RuntimeError, match=r"exited with status 3 .*__name__ == \"__main__\""):
        call_with_hard_limit(os._exit, (3,), 60)


def test_a_child_killed_by_a_signal_counts_as_not_returned():
    assert call_with_hard_limit(signal.raise_signal, (signal.SIGKILL,), 60) == (False, None)
