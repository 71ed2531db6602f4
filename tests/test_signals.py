"""SIGTERM and SIGINT on a real run in a real child process: a named halt, a non-zero exit,
a record on disk and a journal that says so (CrewAI exits 0 on SIGTERM; we must not).

The child (`tests/child_run.py`) loops on a tool that writes a readiness file and then
sleeps 30 s; the parent waits for that file (so the first transitions are journaled and
the run is mid-tool), then sends the signal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fsm_agent import HaltReason, read_record
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.stores.sqlite import SqliteStore
from tests.fixture_tools import process_alive
from tests.lab import granted

ROOT = Path(__file__).parent.parent
CHILD = Path(__file__).parent / "child_run.py"
STARTUP_S = 60.0  # generous: an import-heavy child on a loaded 2-core machine
EXIT_S = 30.0


class Child:
    """One `child_run.py` process and the files it writes."""

    def __init__(
        self, tmp_path: Path, via: str, *, process: bool = False, hang: bool = False
    ) -> None:
        self.db = tmp_path / "journal.db"
        self.record = tmp_path / "halt-contract.json"
        self.ready = tmp_path / "ready"
        paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
        args = [
            sys.executable, str(CHILD), "--via", via, "--db", str(self.db),
            "--record", str(self.record), "--ready", str(self.ready),
        ]  # fmt: skip
        if process:
            args.append("--process")
        if hang:
            args.append("--hang-in-callback")
        self.proc = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def wait_ready(self) -> int:
        """Block until the tool is running (the handshake file appears); return the tool's pid."""
        deadline = time.monotonic() + STARTUP_S
        while not self.ready.exists():
            if self.proc.poll() is not None:
                out, err = self.proc.communicate()
                pytest.fail(f"child exited {self.proc.returncode} before ready:\n{out}\n{err}")
            if time.monotonic() > deadline:
                self.proc.kill()
                out, err = self.proc.communicate()
                pytest.fail(f"child not ready within {STARTUP_S} s:\n{out}\n{err}")
            time.sleep(0.01)  # polling for the handshake, not a timing assumption
        return int(self.ready.read_text(encoding="utf-8"))

    def signal_and_wait(self, signum: int) -> tuple[int, str, str]:
        self.proc.send_signal(signum)
        try:
            out, err = self.proc.communicate(timeout=EXIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            pytest.fail(f"child still running {EXIT_S} s after signal {signum}:\n{out}\n{err}")
        return self.proc.returncode, out, err

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def _check_interrupted(child: Child, signum: int) -> HaltRecord:
    data = json.loads(child.record.read_text(encoding="utf-8"))
    assert data["halt_reason"] == "interrupted"
    assert data["signal"] == signum
    assert data["terminal_state"] == "handoff"
    record = read_record(child.record)
    assert record.halt_reason is HaltReason.INTERRUPTED
    assert record.answer is None
    assert record.steps_used >= 1
    store = SqliteStore(child.db)
    try:
        events = store.events(record.run_id)
        row = store.get_run(record.run_id)
    finally:
        store.close()
    assert [e.seq for e in events] == list(range(len(events)))
    assert len(events) >= 2  # started, then at least drafting -> tool_pending
    last = events[-1]
    assert last.halt is HaltReason.INTERRUPTED
    assert (last.source, last.dest) == ("tool_pending", "handoff")
    assert all(e.halt is None for e in events[:-1])
    assert row.status == "halted"
    assert row.halt_reason is HaltReason.INTERRUPTED
    assert row.state == "handoff"
    assert row.record == record
    return record


SIGNALS = [
    pytest.param(signal.SIGTERM, 143, id="SIGTERM"),
    pytest.param(signal.SIGINT, 130, id="SIGINT"),
]


@pytest.mark.parametrize(("signum", "code"), SIGNALS)
@pytest.mark.parametrize("via", ["lib", "cli"])
def test_a_signal_mid_run_is_a_named_halt_with_a_record_and_a_non_zero_exit(
    tmp_path: Path, via: str, signum: int, code: int
) -> None:
    child = Child(tmp_path, via)
    try:
        child.wait_ready()
        returncode, out, err = child.signal_and_wait(signum)
    finally:
        child.cleanup()
    assert returncode == code, f"stdout:\n{out}\nstderr:\n{err}"
    record = _check_interrupted(child, signum)
    assert record.signal == signum
    assert "interrupted" in out


@pytest.mark.parametrize(("signum", "code"), SIGNALS)
def test_a_signal_while_on_transition_never_returns_still_halts_the_run(
    tmp_path: Path, signum: int, code: int
) -> None:
    # The callback hangs at the first transition (drafting -> tool_pending, committed): the
    # caller's thread journals the halt itself, and the tool is never called.
    child = Child(tmp_path, "lib", hang=True)
    try:
        child.wait_ready()
        returncode, out, err = child.signal_and_wait(signum)
    finally:
        child.cleanup()
    assert returncode == code, f"stdout:\n{out}\nstderr:\n{err}"
    record = _check_interrupted(child, signum)
    assert record.tool_calls == ()
    assert "interrupted" in out


@pytest.mark.parametrize(("signum", "code"), SIGNALS)
def test_a_signal_kills_a_process_isolated_tool_too(tmp_path: Path, signum: int, code: int) -> None:
    child = Child(tmp_path, "lib", process=True)
    try:
        tool_pid = child.wait_ready()
        assert tool_pid != child.proc.pid  # the tool runs in its own (grand)child process
        returncode, out, err = child.signal_and_wait(signum)
    finally:
        child.cleanup()
    assert returncode == code, f"stdout:\n{out}\nstderr:\n{err}"
    _check_interrupted(child, signum)
    assert not process_alive(tool_pid)


def test_the_record_names_the_tool_call_the_signal_cut_short(tmp_path: Path) -> None:
    """The tool was running when the signal came: its side effect is unknown, and the record
    must say so, as it does for a call abandoned at a deadline (seed 001: "How many tool
    calls? What was the last action?")."""
    child = Child(tmp_path, "lib")
    try:
        child.wait_ready()
        returncode, out, err = child.signal_and_wait(signal.SIGTERM)
    finally:
        child.cleanup()
    assert returncode == 143, f"stdout:\n{out}\nstderr:\n{err}"
    record = _check_interrupted(child, signal.SIGTERM)
    assert record.handoff is not None
    assert record.handoff.frozen_args == {"tool": "nap", "args": {"seconds": 30.0}}
    assert [(c.name, c.outcome_unknown) for c in record.tool_calls] == [("nap", True)]
    assert record.meters.tool_calls == 1


def test_a_driver_taken_over_in_its_callback_touches_nothing_after_it_returns(
    tmp_path: Path,
) -> None:
    # In this process: the callback sends SIGTERM to it, then returns late. The halt is
    # journaled without waiting; the fenced driver, once back, neither journals nor calls.
    from fsm_agent import Event, run
    from tests.fixture_tools import napping_model, new_tools

    back = threading.Event()
    called: list[int] = []

    def late(event: Event) -> None:
        called.append(event.seq)
        if event.seq == 1:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.3)  # the supervisor halts the run meanwhile
            back.set()

    db = tmp_path / "journal.db"
    record = run("agent_loop", task="nap", model=napping_model, **granted(new_tools()), store=db,
                 record_path=tmp_path / "r.json", run_id="late", on_transition=late)  # fmt: skip
    assert record.halt_reason is HaltReason.INTERRUPTED
    assert back.wait(10)
    time.sleep(0.2)  # what the driver would do after its callback, it would have done
    store = SqliteStore(db)
    try:
        events = store.events("late")
    finally:
        store.close()
    assert [(e.seq, e.halt) for e in events] == [(0, None), (1, None), (2, HaltReason.INTERRUPTED)]
    assert called == [0, 1]  # the halt is not handed to a callback still running
    assert record.tool_calls == ()
