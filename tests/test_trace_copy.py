"""--trace-copy: the whole run leaves the box before the loop may exit, or it is not done."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fsm_agent import HaltReason, ScriptedModel, ToolRegistry, ToolResult, run
from fsm_agent.journal.runfile import read_run_file
from fsm_agent.journal.store import Event
from fsm_agent.review.replay import replay_events
from fsm_agent.runtime.receipts import Receipt
from fsm_agent.stores.sqlite import SqliteStore
from tests.lab import LOOKUP, MISS, lab_run, replays


def test_the_copy_holds_the_whole_run_and_replays(tmp_path: Path) -> None:
    copy = tmp_path / "shipped" / "run.json"
    record = lab_run(tmp_path, [LOOKUP, {"answer": "swordfish"}], trace_copy=copy)
    assert record.halt_reason is HaltReason.COMPLETED
    shipped = read_run_file(copy)
    store = SqliteStore(tmp_path / "j.db")
    try:
        assert list(shipped.events) == store.events(record.run_id)
        assert shipped.run.halt_reason is HaltReason.COMPLETED
    finally:
        store.close()
    assert shipped.record is not None
    assert shipped.record == record  # the very record the run returned and wrote
    assert replay_events(shipped.run, shipped.events).ok


def block_after_start(blocker: Path) -> Callable[[Event], None]:
    """An `on_transition` that puts a file where the copy's directory should be once the
    run has started (a path unusable at the start is refused before the run; this one
    fails while it runs, as a lost mount would)."""

    def block(event: Event) -> None:
        if event.kind == "started":
            blocker.write_text("a file where the copy's directory should be")

    return block


def test_a_failed_copy_is_never_reported_as_done(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    record = lab_run(
        tmp_path,
        [LOOKUP, {"answer": "swordfish"}],
        trace_copy=blocker / "run.json",
        on_transition=block_after_start(blocker),
    )
    assert record.halt_reason is HaltReason.INTERNAL_ERROR
    assert record.terminal_state == "handoff"
    assert record.error is not None
    assert "the trace copy to" in record.error
    assert record.answer is None
    assert replays(tmp_path / "j.db", record.run_id)  # the imposed halt is a recorded fact


def test_a_failed_copy_keeps_a_budget_halt_and_says_so(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    record = lab_run(
        tmp_path,
        [MISS] * 10,
        trace_copy=blocker / "run.json",
        on_transition=block_after_start(blocker),
    )
    assert record.halt_reason is HaltReason.MAX_STEPS
    assert record.error is not None
    assert record.error.startswith("step budget spent: 8 of 8 model calls; the trace copy to")


def test_a_halt_the_runtime_imposes_ships_its_trace_copy_too(tmp_path: Path) -> None:
    """Once: only a declared halt shipped the copy; a run the contract stopped (the same
    side-effecting call again after its receipt: repeat_refused) left none (found by the
    hostile-journal fuzzer)."""
    tools = ToolRegistry()

    @tools.tool()
    def write(q: str) -> ToolResult:
        return ToolResult(receipts=(Receipt(201, "w1"),), observation={"ok": 1})

    again = {"tool_call": {"name": "write", "args": {"q": "x"}}}
    record = run("agent_loop", task="t", model=ScriptedModel([again, again]), tools=tools,
                 allow=["write"], store=str(tmp_path / "j.db"),
                 trace_copy=tmp_path / "trace.json", handle_signals=False)  # fmt: skip
    assert record.halt_reason.value == "repeat_refused"
    copy = read_run_file(tmp_path / "trace.json")
    assert copy.record is not None
    assert copy.record.halt_reason is record.halt_reason
    assert copy.events[-1].halt is record.halt_reason
