"""The supervised loop (`fsm_agent.runtime.driver`): calls are made inline on one driver thread,
and a
call abandoned at its deadline is fenced off — when it wakes up it can neither journal
anything nor change the run, whether the run has halted or goes on without it."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fsm_agent import HaltReason, Prompt, Tool, ToolRegistry, ToolResult, read_record, run
from fsm_agent.errors import Interrupted
from fsm_agent.runtime.deadline import Call, CallResult
from fsm_agent.runtime.driver import supervise
from fsm_agent.runtime.interrupts import InterruptGate
from fsm_agent.runtime.receipts import Receipt
from fsm_agent.stores.sqlite import SqliteStore
from tests.lab import granted, replays

ROOT = Path(__file__).parent.parent
WAIT_S = 30.0
CALL = {"tool_call": {"name": "late", "args": {}}}
HIT = {"tool_call": {"name": "hit", "args": {}}}


class LateTool:
    """Hangs until released, then comes back with a receipted success that would complete
    the run — had it come in time."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.woke = threading.Event()

    def __call__(self) -> ToolResult:
        self.release.wait(WAIT_S)
        self.woke.set()
        return ToolResult(receipts=(Receipt(status=200, id="late-1"),), observation="late",
                          final="too late")  # fmt: skip


def _hit() -> ToolResult:
    return ToolResult(receipts=(Receipt(status=200, id="hit-1"),), observation="hit", final="hit")


def _tools(late: LateTool) -> ToolRegistry:
    return ToolRegistry(
        (
            Tool(name="late", fn=late, side_effect=False),
            Tool(name="hit", fn=_hit, side_effect=False),
        )
    )


def _journal(db: Path, run_id: str) -> tuple[list[tuple[int, str | None, str]], str]:
    store = SqliteStore(db)
    try:
        rows = [(e.seq, e.trigger, e.dest) for e in store.events(run_id)]
        return rows, store.get_run(run_id).status
    finally:
        store.close()


def _settled(late: LateTool) -> None:
    """Let the abandoned call come back, and give its thread time to try anything."""
    late.release.set()
    assert late.woke.wait(WAIT_S)
    time.sleep(0.3)


def test_a_call_that_wakes_after_the_halt_journals_nothing(tmp_path: Path) -> None:
    late = LateTool()
    db, record_path = tmp_path / "j.db", tmp_path / "r.json"
    record = run("agent_loop", task="wait", model=lambda prompt: CALL, **granted(_tools(late)),
                 store=db, record_path=record_path,
                 budgets={"wall_clock_ms": 300, "tool_timeout_ms": 60_000})  # fmt: skip
    assert record.halt_reason is HaltReason.WALL_CLOCK
    before = _journal(db, record.run_id)
    record_text = record_path.read_text(encoding="utf-8")
    _settled(late)
    assert _journal(db, record.run_id) == before
    assert before[1] == "halted"
    assert before[0][-1][2] == "budget_exhausted"
    assert record_path.read_text(encoding="utf-8") == record_text
    assert read_record(record_path).halt_reason is HaltReason.WALL_CLOCK
    assert replays(db, record.run_id)


def _machine_that_goes_on(tmp_path: Path) -> str:
    """agent_loop, where a tool's timeout sends the run back to the model."""
    text = (ROOT / "machines" / "agent_loop.yaml").read_text(encoding="utf-8")
    edge = (
        "- {trigger: tool_timed_out, source: tool_pending, dest: budget_exhausted,"
        " halt: tool_timeout}"
    )
    assert edge in text
    text = text.replace(edge, "- {trigger: tool_timed_out, source: tool_pending, dest: drafting}")
    path = tmp_path / "goes_on.yaml"
    path.write_text(text.replace("name: agent_loop", "name: goes_on"), encoding="utf-8")
    return str(path)


def test_a_call_that_wakes_while_the_run_goes_on_changes_nothing(tmp_path: Path) -> None:
    """The first tool call times out; on the next step the model lets it come back and
    waits for it (the run is live, on a fresh driver), then proposes a call that succeeds."""
    late = LateTool()
    threads: list[int] = []

    def model(prompt: Prompt) -> dict[str, Any]:
        threads.append(threading.get_ident())
        if prompt.step == 1:
            return CALL
        _settled(late)  # the abandoned call returns now, mid-run
        return HIT

    db = tmp_path / "j.db"
    record = run(_machine_that_goes_on(tmp_path), task="go on", model=model,
                 **granted(_tools(late)), store=db, record_path=tmp_path / "r.json",
                 budgets={"wall_clock_ms": 60_000, "tool_timeout_ms": 300})  # fmt: skip
    assert record.halt_reason is HaltReason.COMPLETED, record.error
    assert record.answer == "hit"
    assert [(c.name, c.status) for c in record.tool_calls] == [
        ("late", "timed_out"),
        ("hit", "returned"),
    ]
    rows, status = _journal(db, record.run_id)
    assert [t for _, t, _ in rows] == [
        None, "tool_call", "tool_timed_out", "tool_call", "tool_returned", "collected",
    ]  # fmt: skip
    assert [seq for seq, _, _ in rows] == list(range(len(rows)))
    assert status == "halted"
    assert replays(db, record.run_id)
    assert threading.get_ident() not in threads  # the caller's thread only supervises
    assert threads[0] != threads[1]  # the fenced driver was replaced


def test_every_call_of_a_run_is_made_on_one_driver_thread(tmp_path: Path) -> None:
    seen: list[int] = []

    def model(prompt: Prompt) -> dict[str, Any]:
        seen.append(threading.get_ident())
        return HIT

    def hit() -> ToolResult:
        seen.append(threading.get_ident())
        return _hit() if len(seen) > 4 else ToolResult(observation="again")

    tools = ToolRegistry((Tool(name="hit", fn=hit, side_effect=False),))
    record = run("agent_loop", task="one thread", model=model, **granted(tools),
                 store=tmp_path / "j.db", record_path=tmp_path / "r.json")  # fmt: skip
    assert record.halt_reason is HaltReason.COMPLETED, record.error
    assert len(seen) == 6
    assert len(set(seen)) == 1
    assert seen[0] != threading.get_ident()


# --- the supervisor on its own ---------------------------------------------------------------


def _script(calls: list[Call]) -> Any:
    results = []
    for call in calls:
        results.append((yield call))
    return results


def test_results_come_back_in_order_and_a_late_one_is_a_timeout() -> None:
    release = threading.Event()
    calls = [
        Call(lambda: 1, timeout_s=5),
        Call(release.wait, (WAIT_S,), timeout_s=0.1, name="late"),
        Call(lambda: 3, timeout_s=5),
    ]
    try:
        results: list[CallResult] = supervise(_script(calls), InterruptGate())
    finally:
        release.set()
    assert [r.status for r in results] == ["ok", "timeout", "ok"]
    assert results[1].fate == "abandoned"
    assert results[0].value == 1
    assert results[2].value == 3
    assert 80 <= results[1].elapsed_ms < 2000


def test_an_exception_the_script_raises_reaches_the_caller() -> None:
    def script() -> Any:
        yield Call(lambda: 1, timeout_s=5)
        raise ValueError("from the script")

    with pytest.raises(ValueError, match="from the script"):
        supervise(script(), InterruptGate())


def test_a_signal_in_the_supervisor_is_raised_into_the_script_at_its_call() -> None:
    """A SIGTERM to the supervising (main) thread while the driver is in a call fences the
    driver and is raised into the script at the call, which is abandoned."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are handled in the main thread only")
    release = threading.Event()
    seen: list[BaseException] = []

    def script() -> Any:
        try:
            yield Call(release.wait, (WAIT_S,), timeout_s=WAIT_S)
        except Interrupted as exc:
            seen.append(exc)
            raise

    gate = InterruptGate()
    main = threading.main_thread().ident
    assert main is not None
    timer = threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGTERM))
    with gate.installed():
        timer.start()
        try:
            with pytest.raises(Interrupted):
                supervise(script(), gate)
        finally:
            release.set()
            timer.cancel()
    assert len(seen) == 1
    assert isinstance(seen[0], Interrupted)
    assert seen[0].signum == signal.SIGTERM


def _signalled_while_the_driver_runs_its_own_code(gate: InterruptGate, installed: bool) -> None:
    """A SIGTERM reaches the supervisor while the driver runs the script's own code (no call,
    no commit); the script then ends without reaching another safe point."""
    own_code = threading.Event()
    signalled = threading.Event()

    def script() -> Any:
        yield Call(lambda: 1, timeout_s=5)
        own_code.set()
        assert signalled.wait(WAIT_S)
        time.sleep(3 * 0.05)  # the supervisor's poll: it has taken the signal meanwhile

    main = threading.main_thread().ident
    assert main is not None

    def send() -> None:
        assert own_code.wait(WAIT_S)
        signal.pthread_kill(main, signal.SIGTERM)
        signalled.set()

    sender = threading.Thread(target=send)
    with gate.installed(installed):
        sender.start()
        try:
            supervise(script(), gate)
        finally:
            sender.join(WAIT_S)


@pytest.mark.parametrize("installed", [True, False])
def test_a_signal_noted_for_a_safe_point_the_run_never_reaches_is_sent_again(
    installed: bool,
) -> None:
    """Whichever handler took it (the run's, or the caller's when the run installs none),
    a signal that could not end the run is sent again after it, to the process's handler:
    once it was dropped, and `fsm-agent run` or `simulate` went on as if never signalled."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are handled in the main thread only")
    taken: list[int] = []

    def callers(signum: int, frame: object) -> None:
        taken.append(signum)
        raise Interrupted(signum)  # as `fsm-agent`'s own handler does: it stops the command

    previous = signal.signal(signal.SIGTERM, callers)
    try:
        gate = InterruptGate()
        with pytest.raises(Interrupted) as stopped:
            _signalled_while_the_driver_runs_its_own_code(gate, installed)  # sent again here
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stopped.value.signum == signal.SIGTERM
    if installed:  # the run's handler took it first: the caller's sees only the one sent again
        assert taken == [signal.SIGTERM]
    else:  # the caller's handler raises wherever the main thread is: in the supervisor's wait
        # (then it is sent again after the run) or outside it (then it goes straight out)
        assert taken in ([signal.SIGTERM], [signal.SIGTERM, signal.SIGTERM])
    assert gate.received == (signal.SIGTERM if installed else None)
