"""`call_with_deadline`: a call never outlives its deadline, in a daemon thread or a child.

Real sleeps, real child processes; times are bounded generously (a loaded 2-core machine),
and every bound is one a hung call would miss by tens of seconds.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from fsm_agent import ToolError
from fsm_agent.runtime.deadline import ChildError, call_with_deadline
from tests import fixture_tools
from tests.fixture_tools import process_alive

# --- thread isolation: abandon at the deadline ------------------------------------------------


def test_a_hung_sync_call_is_abandoned_at_the_deadline() -> None:
    started = time.monotonic()
    result = call_with_deadline(time.sleep, (30,), timeout_s=0.5, name="sleeper")
    took = time.monotonic() - started
    assert result.status == "timeout"
    assert result.fate == "abandoned"
    assert result.value is None
    assert result.error is None
    assert 0.5 <= took < 1.5
    assert 500 <= result.elapsed_ms < 1500
    # The abandoned call lives on in a daemon thread, which can never block interpreter exit.
    threads = [t for t in threading.enumerate() if t.name == "fsm-agent:sleeper"]
    assert threads
    assert all(t.daemon for t in threads)


def test_a_call_that_returns_in_time_gives_its_value() -> None:
    result = call_with_deadline(
        lambda a, *, b: a + b, (2,), {"b": 3}, timeout_s=10, isolation="thread"
    )
    assert result.status == "ok"
    assert result.value == 5
    assert result.fate is None
    assert result.elapsed_ms < 10_000


def test_errors_come_back_as_status_error_with_the_original_exception() -> None:
    result = call_with_deadline(
        fixture_tools.raise_tool_error, ("rate limited", True), timeout_s=10
    )
    assert result.status == "error"
    assert isinstance(result.error, ToolError)
    assert result.error.retryable is True
    assert str(result.error) == "rate limited"


def test_a_base_exception_in_the_call_does_not_escape_the_deadline_wrapper() -> None:
    def exits() -> None:
        raise SystemExit(3)

    result = call_with_deadline(exits, timeout_s=10)
    assert result.status == "error"
    assert isinstance(result.error, SystemExit)


def test_async_callables_are_awaited_in_a_thread() -> None:
    result = call_with_deadline(fixture_tools.async_double, (21,), timeout_s=10)
    assert result.status == "ok"
    assert result.value == 42


def test_a_hung_async_callable_times_out() -> None:
    started = time.monotonic()
    result = call_with_deadline(fixture_tools.async_nap, (30,), timeout_s=0.3)
    assert result.status == "timeout"
    assert result.fate == "abandoned"
    assert time.monotonic() - started < 1.5


# --- process isolation: kill at the deadline --------------------------------------------------


@pytest.mark.slow
def test_a_child_process_is_killed_at_the_deadline_and_its_side_effect_never_happens(
    tmp_path: Path,
) -> None:
    pid_path, done_path = tmp_path / "child.pid", tmp_path / "side-effect.txt"
    seconds = 1.5
    started = time.monotonic()
    result = call_with_deadline(
        fixture_tools.pid_sleep_write,
        (str(pid_path), str(done_path), seconds),
        timeout_s=1.0,
        isolation="process",
        name="killable",
    )
    returned = time.monotonic()
    assert result.status == "timeout"
    assert result.fate == "killed"
    assert 1.0 <= returned - started < 2.5
    # The child really ran (it wrote its pid) in another process, and is dead now.
    pid = int(pid_path.read_text(encoding="utf-8"))
    assert pid != os.getpid()
    assert not process_alive(pid)
    # Wait past the moment its sleep would have ended: the side effect never happens.
    time.sleep(max(0.0, returned + seconds + 0.3 - time.monotonic()))
    assert not done_path.exists()


def test_a_child_process_returns_its_value() -> None:
    result = call_with_deadline(fixture_tools.child_pid, timeout_s=30, isolation="process")
    assert result.status == "ok"
    assert isinstance(result.value, int)
    assert result.value != os.getpid()


@pytest.mark.parametrize("retryable", [True, False])
def test_tool_errors_cross_the_process_boundary_with_their_retryable_flag(
    retryable: bool,
) -> None:
    result = call_with_deadline(
        fixture_tools.raise_tool_error,
        kwargs={"message": "upstream 503", "retryable": retryable},
        timeout_s=30,
        isolation="process",
    )
    assert result.status == "error"
    assert isinstance(result.error, ChildError)
    assert result.error.retryable is retryable
    assert result.error.type_name == "ToolError"
    assert "upstream 503" in str(result.error)


def test_a_plain_exception_in_a_child_is_not_retryable() -> None:
    result = call_with_deadline(
        fixture_tools.raise_plain, ("boom",), timeout_s=30, isolation="process"
    )
    assert result.status == "error"
    assert isinstance(result.error, ChildError)
    assert result.error.retryable is False
    assert result.error.type_name == "RuntimeError"
    assert "boom" in str(result.error)


def test_async_callables_are_awaited_in_a_child() -> None:
    result = call_with_deadline(fixture_tools.async_double, (5,), timeout_s=30, isolation="process")
    assert result.status == "ok"
    assert result.value == 10


def test_an_inline_call_runs_in_the_callers_thread() -> None:
    result = call_with_deadline(threading.get_ident, timeout_s=1.0, isolation="inline")
    assert result.status == "ok"
    assert result.value == threading.get_ident()


def test_an_inline_call_that_overruns_is_refused_as_late() -> None:
    # Inline cannot interrupt; a result that comes back past the deadline is not accepted.
    result = call_with_deadline(time.sleep, (0.05,), timeout_s=0.01, isolation="inline")
    assert result.status == "timeout"
    assert result.fate == "late (inline)"
    assert result.elapsed_ms >= 50


def test_an_inline_error_is_status_error() -> None:
    result = call_with_deadline(int, ("x",), timeout_s=1.0, isolation="inline")
    assert result.status == "error"
    assert isinstance(result.error, ValueError)


def test_threads_are_reused_but_never_one_that_was_abandoned() -> None:
    release = threading.Event()
    hung = call_with_deadline(release.wait, timeout_s=0.05, name="hung")
    assert (hung.status, hung.fate) == ("timeout", "abandoned")
    seen = {call_with_deadline(threading.get_ident, timeout_s=1.0).value for _ in range(20)}
    hung_threads = [t for t in threading.enumerate() if t.name == "fsm-agent:hung"]
    assert len(hung_threads) == 1
    assert hung_threads[0].ident not in seen  # the abandoned thread got no further work
    assert len(seen) <= 2  # the others were handed the calls, not one thread per call
    release.set()


def test_a_forked_child_gets_fresh_call_threads() -> None:
    # A parent that made a call keeps an idle daemon thread; a forked child does not have
    # it. Before the fix the child's call went to that ghost thread and timed out.
    assert call_with_deadline(lambda: 1, timeout_s=5).status == "ok"
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if its call ran
        result = call_with_deadline(lambda: 2, timeout_s=5)
        os._exit(0 if (result.status, result.value) == ("ok", 2) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
