"""The worker end to end: real SQLite journals, real record files, real (sleeping) tools.

Seed 001's five checkpoints, seed 002's stop rules and seed 000's halt-path rules, each
checked at run level against the canonical `agent_loop` machine, plus the meters, the
journal and the adapters. Every run is checked against the whole contract (`assert_contract`):
one enum value, the matching terminal state, the file on disk equal to the returned record,
a gap-free journal whose last event is the halt, and a halted runs row holding the record.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fsm_agent import (
    BudgetError,
    Budgets,
    ControlPlane,
    HaltReason,
    HaltRecord,
    InvalidInputError,
    JournalError,
    Lane,
    ModelReply,
    Prompt,
    Receipt,
    ScriptedModel,
    Tool,
    ToolError,
    ToolRegistry,
    ToolResult,
    arun,
    load_machine,
    read_record,
    receipts_complete,
    run,
    terminal_state,
)
from fsm_agent.declaration.load import parse_machine
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.halt import CANNOT_METER
from fsm_agent.journal.store import Event, RunRow
from fsm_agent.review.replay import replay_events
from fsm_agent.runtime.proposals import ToolCall
from fsm_agent.runtime.record import RECORD_TOOL_CALLS
from fsm_agent.runtime.tools import argument_problem
from fsm_agent.stores.sqlite import SqliteStore
from tests import fixture_tools
from tests.fixture_tools import process_alive
from tests.lab import granted

EXAMPLES = Path(__file__).parent.parent / "examples"
HALT_LAB = EXAMPLES / "halt_lab"
SEED_FIELDS = [
    "task", "max_steps", "wall_clock_ms", "steps_used", "tool_calls", "halt_reason", "answer",
]  # fmt: skip
ENUM_VALUES = {r.value for r in HaltReason}


def call(name: str, **args: Any) -> dict[str, Any]:
    """A model reply proposing one tool call."""
    return {"tool_call": {"name": name, "args": args}}


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[SqliteStore]:
    """A real SQLite journal file in tmp_path."""
    s = SqliteStore(tmp_path / "journal.db")
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def record_path(tmp_path: Path) -> Path:
    return tmp_path / "records" / "halt-contract.json"


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Holds a hung tool's thread; set at teardown so no test leaves a thread behind."""
    gate = threading.Event()
    yield gate
    gate.set()


class Counter:
    """A side effect a test can count: how many times a tool body actually ran."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def hit(self, **kwargs: Any) -> None:
        with self._lock:
            self.calls.append(kwargs)

    @property
    def n(self) -> int:
        return len(self.calls)


class FakeClock:
    """An injected clock (seconds). Tools and models move it to simulate time passing."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def lab_tools() -> ToolRegistry:
    """A fresh registry with seed 001's `lookup` (a miss says "try again")."""
    reg = ToolRegistry()

    @reg.tool(side_effect=False)
    def lookup(q: str = "") -> ToolResult:
        if q == "lab password":
            return ToolResult(
                receipts=(Receipt(status=200, id="fact:lab password"),),
                observation={"fact": "swordfish"},
            )
        return ToolResult(observation="No exact match. Refine your query and look up again.")

    return reg


def go(
    journal: SqliteStore,
    record_path: Path,
    model: Any,
    tools: ToolRegistry | None = None,
    *,
    machine: MachineSpec | str = "agent_loop",
    task: str = "find the lab password",
    **kwargs: Any,
) -> HaltRecord:
    """One run on a real journal; a list of replies becomes a `ScriptedModel`. The run may
    call every tool `tools` registers (`allow` defaults to all of them: agent_loop lists
    none); a test of a machine that lists some passes its own `allow`."""
    if isinstance(model, list):
        model = ScriptedModel(model)
    tools = tools if tools is not None else lab_tools()
    kwargs.setdefault("handle_signals", False)
    kwargs.setdefault("store", journal)
    kwargs.setdefault("allow", tools.names())
    return run(
        machine,
        task=task,
        model=model,
        tools=tools,
        record_path=record_path,
        **kwargs,
    )


def assert_contract(record: HaltRecord, record_path: Path, journal: SqliteStore) -> list[Event]:
    """Everything every run must satisfy, whatever its halt. Returns the journaled events."""
    # The file: valid JSON, seed 001's fields first, one enum value, equal to the return value.
    text = record_path.read_text(encoding="utf-8")
    data = json.loads(text)
    assert list(data)[: len(SEED_FIELDS)] == SEED_FIELDS
    assert data["halt_reason"] in ENUM_VALUES
    assert isinstance(record.halt_reason, HaltReason)
    assert read_record(record_path) == record
    assert record.terminal_state == terminal_state(record.halt_reason)
    assert record.steps_used <= record.max_steps
    assert record.max_steps == record.budgets.max_steps
    assert record.wall_clock_ms == record.budgets.wall_clock_ms
    if record.halt_reason is HaltReason.COMPLETED:
        assert isinstance(record.answer, str)
        assert record.answer
        assert any(receipts_complete(c.receipts) for c in record.tool_calls)
    if record.halt_reason in CANNOT_METER:
        assert record.answer == f"cannot: {CANNOT_METER[record.halt_reason]} budget"
    if record.terminal_state == "handoff":
        assert record.handoff is not None
        assert record.handoff.why
    # The journal: gap-free from 0, a chain of states, exactly one halt and it is the last.
    events = journal.events(record.run_id)
    assert [e.seq for e in events] == list(range(len(events)))
    assert events[0].kind == "started"
    assert all(e.kind == "transition" for e in events[1:])
    for before, after in itertools.pairwise(events):
        assert after.source == before.dest
    assert all(e.halt is None for e in events[:-1])
    assert events[-1].halt is record.halt_reason
    assert events[-1].dest == record.terminal_state
    row: RunRow = journal.get_run(record.run_id)
    assert row.status == "halted"
    assert row.halt_reason is record.halt_reason
    assert row.state == record.terminal_state
    assert row.record == record
    assert row.budgets == record.budgets
    assert row.steps_used == record.steps_used
    return events


# --- seed 001, checkpoint 1 and 2: the file exists, the enum is closed -------------------------

GARBAGE = [
    pytest.param("", id="empty-string"),
    pytest.param("   \n\t ", id="whitespace"),
    pytest.param(None, id="none"),
    pytest.param(b"\xff\xfe\x00garbage", id="invalid-utf8-bytes"),
    pytest.param("\x00\x01 binary noise \ufffd", id="control-chars"),
    pytest.param('{"answer": "swordf', id="truncated-json"),
    pytest.param('{"answer": "a", "answer": "b"}', id="duplicate-keys"),
    pytest.param("[1, 2, 3]", id="json-list-text"),
    pytest.param(42, id="int"),
    pytest.param([{"tool_call": {"name": "lookup"}}], id="list-of-calls"),
    pytest.param({"tool_call": "lookup"}, id="call-not-object"),
    pytest.param({"answer": ""}, id="empty-answer"),
    pytest.param({"answer": 7}, id="answer-not-string"),
    pytest.param({"answer": "x", "tool_call": {"name": "lookup"}}, id="two-proposals"),
    pytest.param({"halt": True, "reason": "completed"}, id="model-votes-halt"),
    pytest.param({"done": True}, id="done-flag-only"),
    pytest.param('{"x": NaN}', id="nan"),
    pytest.param(object(), id="python-object"),
    pytest.param("[" * 5000 + "]" * 5000, id="deep-nesting"),
]


@pytest.mark.parametrize("garbage", GARBAGE)
def test_record_file_is_valid_json_when_the_model_returns_garbage(
    journal: SqliteStore, record_path: Path, garbage: Any
) -> None:
    model = ScriptedModel([garbage] * 20)
    record = go(journal, record_path, model)
    assert_contract(record, record_path, journal)
    assert record.halt_reason in (HaltReason.SCHEMA_FAIL, HaltReason.EMPTY_RESPONSE)
    assert record.answer is None
    assert record.tool_calls == ()
    # Every garbage reply was a model call, and a step: max_retries 2 allows three.
    assert model.calls == record.steps_used == 3
    assert record.meters.retries_used == 2


def test_record_file_exists_when_the_model_adapter_raises(
    journal: SqliteStore, record_path: Path
) -> None:
    def broken(prompt: Prompt) -> Any:
        raise ConnectionError("endpoint down")

    record = go(journal, record_path, broken)
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.EMPTY_RESPONSE
    assert record.error is not None
    assert "ConnectionError" in record.error


SCRIPTS = [
    pytest.param("proper.json", HaltReason.COMPLETED, id="proper"),
    pytest.param("looping.json", HaltReason.MAX_STEPS, id="looping"),
    pytest.param("chatty.json", HaltReason.SCHEMA_FAIL, id="chatty"),
]


@pytest.mark.parametrize(("script", "expected"), SCRIPTS)
def test_halt_reason_is_one_enum_string_never_null(
    journal: SqliteStore, record_path: Path, script: str, expected: HaltReason
) -> None:
    model = ScriptedModel.from_file(HALT_LAB / script)
    record = go(journal, record_path, model)
    assert_contract(record, record_path, journal)
    raw = json.loads(record_path.read_text(encoding="utf-8"))["halt_reason"]
    assert isinstance(raw, str)
    assert raw == expected.value


# --- checkpoint 3: max steps fires on the looping stub, three runs out of three ---------------


def test_max_steps_fires_three_times_out_of_three(journal: SqliteStore, tmp_path: Path) -> None:
    run_ids = set()
    for attempt in range(3):
        path = tmp_path / f"attempt-{attempt}" / "halt-contract.json"
        model = ScriptedModel.from_file(HALT_LAB / "looping.json")
        tools = lab_tools()
        record = go(journal, path, model, tools)
        assert_contract(record, path, journal)
        data = json.loads(path.read_text(encoding="utf-8"))
        assert data["halt_reason"] == "max_steps"
        assert data["steps_used"] == 8
        assert len(data["tool_calls"]) == 8
        assert [c["name"] for c in data["tool_calls"]] == ["lookup"] * 8
        assert data["answer"] == "cannot: step budget"
        assert record.terminal_state == "budget_exhausted"
        # No ninth, unbudgeted model call to invent an answer at the cap (smolagents #2686).
        assert model.calls == 8
        run_ids.add(record.run_id)
    assert len(run_ids) == 3
    assert {r.run_id for r in journal.list_runs()} == run_ids


# --- checkpoint 4: the wall clock fires, also against a tool that hangs -----------------------


def test_wall_clock_fires_on_a_real_slow_tool_not_a_late_completed(
    journal: SqliteStore, record_path: Path
) -> None:
    from fsm_agent.examples.halt_lab.tools import TOOLS as HALT_LAB_TOOLS

    model = ScriptedModel.from_file(HALT_LAB / "slow.json")  # slow_lookup sleeps 3 s
    started = time.monotonic()
    record = go(journal, record_path, model, HALT_LAB_TOOLS, budgets={"wall_clock_ms": 1000})
    took = time.monotonic() - started
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.WALL_CLOCK
    assert record.wall_clock_ms == 1000
    assert json.loads(record_path.read_text(encoding="utf-8"))["wall_clock_ms"] == 1000
    assert record.answer == "cannot: time budget"
    assert 1.0 <= took < 2.0  # the lookup would have answered at 3 s
    [entry] = record.tool_calls
    assert (entry.name, entry.status, entry.outcome_unknown) == ("slow_lookup", "timed_out", True)
    assert model.calls == 1


def test_wall_clock_wins_over_receipts_that_arrive_late(
    journal: SqliteStore, record_path: Path
) -> None:
    """The tool returns a complete, goal-carrying receipt, but only after the budget."""
    clock = FakeClock()
    reg = ToolRegistry()

    @reg.tool()
    def capture() -> ToolResult:
        clock.advance(2.0)
        return ToolResult(receipts=(Receipt(status=200, id="cap_1"),), final="cap_1")

    record = go(
        journal, record_path, [call("capture")], reg, clock=clock, budgets={"wall_clock_ms": 1000}
    )
    events = assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.WALL_CLOCK
    assert record.answer == "cannot: time budget"
    assert record.meters.elapsed_ms == 2000
    [entry] = record.tool_calls
    assert entry.receipts == (Receipt(status=200, id="cap_1"),)  # it did come back, too late
    assert all(e.dest != "done" for e in events)


def test_fake_clock_trips_wall_clock_without_sleeping(
    journal: SqliteStore, record_path: Path
) -> None:
    clock = FakeClock()

    def slow_thinker(prompt: Prompt) -> Any:
        clock.advance(0.375)  # binary-exact, so elapsed ms are exact
        return call("lookup", q="again")

    started = time.monotonic()
    record = go(journal, record_path, slow_thinker, clock=clock, budgets={"wall_clock_ms": 1000})
    assert time.monotonic() - started < 5.0
    events = assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.WALL_CLOCK
    # 375 ms per model call: the third call takes the run to 1125 ms >= 1000 ms.
    assert record.steps_used == 3
    assert record.meters.elapsed_ms == 1125
    assert len(record.tool_calls) == 2
    assert events[-1].snapshot.clock_ms == 1125


def test_hung_sync_tool_halts_on_the_wall_clock(
    journal: SqliteStore, record_path: Path, release: threading.Event
) -> None:
    reg = ToolRegistry()
    counter = Counter()

    @reg.tool()
    def hang() -> ToolResult:
        counter.hit()
        release.wait(30)  # a 30 s hang; released at teardown
        return ToolResult(receipts=(Receipt(status=200, id="late"),), final="late")

    started = time.monotonic()
    record = go(journal, record_path, [call("hang")], reg, budgets={"wall_clock_ms": 1000})
    took = time.monotonic() - started
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.WALL_CLOCK
    assert 1.0 <= took < 1.5
    assert counter.n == 1
    [entry] = record.tool_calls
    assert entry.name == "hang"
    assert entry.status == "timed_out"
    assert entry.outcome_unknown is True
    assert entry.receipts == ()
    assert record.meters.elapsed_ms >= 1000


def test_hung_model_halts_on_the_wall_clock(
    journal: SqliteStore, record_path: Path, release: threading.Event
) -> None:
    def hung_model(prompt: Prompt) -> Any:
        release.wait(30)
        return {"answer": "too late"}

    started = time.monotonic()
    record = go(journal, record_path, hung_model, budgets={"wall_clock_ms": 1000})
    took = time.monotonic() - started
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.WALL_CLOCK
    assert 1.0 <= took < 1.5
    assert record.steps_used == 1


@pytest.mark.slow
def test_hung_process_tool_is_killed_at_the_wall_clock(
    journal: SqliteStore, record_path: Path, tmp_path: Path
) -> None:
    reg = ToolRegistry()
    reg.add(Tool(name="hang", fn=fixture_tools.pid_sleep_write, isolation="process"))
    pid_path, done_path = tmp_path / "tool.pid", tmp_path / "side-effect.txt"
    reply = call("hang", pid_path=str(pid_path), done_path=str(done_path), seconds=30)
    started = time.monotonic()
    record = go(journal, record_path, [reply], reg, budgets={"wall_clock_ms": 2000})
    took = time.monotonic() - started
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.WALL_CLOCK
    assert 2.0 <= took < 3.0
    [entry] = record.tool_calls
    assert (entry.status, entry.outcome_unknown) == ("timed_out", True)
    assert entry.error is not None
    assert "killed" in entry.error
    # The tool really started in its own process, and that process is gone.
    pid = int(pid_path.read_text(encoding="utf-8"))
    assert pid != os.getpid()
    assert not process_alive(pid)
    assert not done_path.exists()


def test_tool_timeout_when_the_tool_exceeds_its_cap_but_time_remains(
    journal: SqliteStore, record_path: Path, release: threading.Event
) -> None:
    reg = ToolRegistry()

    @reg.tool()
    def hang() -> ToolResult:
        release.wait(30)
        return ToolResult()

    started = time.monotonic()
    record = go(
        journal,
        record_path,
        [call("hang")],
        reg,
        budgets={"wall_clock_ms": 20_000, "tool_timeout_ms": 300},
    )
    took = time.monotonic() - started
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.TOOL_TIMEOUT
    assert record.answer == "cannot: tool time budget"
    assert 0.3 <= took < 5.0
    assert record.meters.elapsed_ms < 20_000
    [entry] = record.tool_calls
    assert entry.outcome_unknown is True
    assert entry.duration_ms >= 300


# --- checkpoint 5: completed is rare ----------------------------------------------------------


def test_completed_needs_a_final_answer_backed_by_receipts(
    journal: SqliteStore, record_path: Path
) -> None:
    model = ScriptedModel.from_file(HALT_LAB / "proper.json")
    record = go(journal, record_path, model)
    events = assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.COMPLETED
    assert record.terminal_state == "done"
    assert record.answer == "swordfish"
    assert record.steps_used == 2
    [entry] = record.tool_calls
    assert entry.receipts == (Receipt(status=200, id="fact:lab password"),)
    assert [(e.source, e.dest, e.trigger) for e in events[1:]] == [
        ("drafting", "tool_pending", "tool_call"),
        ("tool_pending", "awaiting_receipts", "tool_returned"),
        ("awaiting_receipts", "drafting", "collected"),
        ("drafting", "done", "answer"),
    ]


def test_a_chatty_paragraph_is_schema_fail(journal: SqliteStore, record_path: Path) -> None:
    model = ScriptedModel.from_file(HALT_LAB / "chatty.json")
    record = go(journal, record_path, model)
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.SCHEMA_FAIL
    assert record.answer is None
    assert record.error is not None
    assert "prose" in record.error


def test_an_answer_without_any_tool_evidence_is_not_completed(
    journal: SqliteStore, record_path: Path
) -> None:
    model = ScriptedModel([{"answer": "swordfish"}] * 10)
    record = go(journal, record_path, model)
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.SCHEMA_FAIL
    assert record.answer is None
    assert model.calls == 3


def test_an_answer_the_receipted_result_does_not_back_is_not_completed(
    journal: SqliteStore, record_path: Path
) -> None:
    """A stronger model "escapes" the loop by inventing an answer: schema_fail (seed 001)."""
    replies = [call("lookup", q="lab password")] + [{"answer": "hunter2"}] * 10
    record = go(journal, record_path, replies)
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.SCHEMA_FAIL
    assert record.answer is None


def test_a_tool_final_with_complete_receipts_completes_without_a_model_answer(
    journal: SqliteStore, record_path: Path
) -> None:
    reg = ToolRegistry()
    reg.tool("fetch")(fixture_tools.receipted)
    model = ScriptedModel([call("fetch", value="42 apples")])
    record = go(journal, record_path, model, reg)
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.COMPLETED
    assert record.answer == "42 apples"
    assert model.calls == 1


# --- seed 002: retries are steps, refuse at the cap, handoff is a stop with a packet ----------


def test_rejected_replies_consume_retries_and_steps(
    journal: SqliteStore, record_path: Path
) -> None:
    model = ScriptedModel(["I think I am done now."] * 10)
    record = go(journal, record_path, model, budgets={"max_retries": 2})
    events = assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.SCHEMA_FAIL
    assert model.calls == record.steps_used == 3
    assert record.meters.retries_used == 2
    assert [e.retry for e in events[1:]] == [True, True, False]
    assert [e.snapshot.meters.steps_used for e in events[1:]] == [1, 2, 3]


def test_retries_cannot_outlast_the_step_budget(journal: SqliteStore, record_path: Path) -> None:
    """Retries are model calls: with more retries than steps, the step cap still wins."""
    model = ScriptedModel(["prose"] * 20)
    record = go(journal, record_path, model, budgets={"max_steps": 4, "max_retries": 10})
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.MAX_STEPS
    assert model.calls == record.steps_used == 4
    assert record.meters.retries_used == 4
    assert record.answer == "cannot: step budget"


def test_refuses_at_the_cap_and_never_invents_an_answer(
    journal: SqliteStore, record_path: Path
) -> None:
    """The last reply in budget is a confident answer with no evidence: still no answer."""
    replies = [call("lookup", q=f"try {i}") for i in range(2)] + [{"answer": "swordfish"}] * 5
    model = ScriptedModel(replies)
    record = go(journal, record_path, model, budgets={"max_steps": 3, "max_retries": 0})
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.SCHEMA_FAIL
    assert record.answer is None
    assert model.calls == 3


def test_handoff_request_ends_in_handoff_with_its_packet(
    journal: SqliteStore, record_path: Path
) -> None:
    replies = [
        call("lookup", q="pay invoice inv_7"),
        {"handoff": {"why": "would need to click Pay", "args": {"invoice": "inv_7"}}},
    ]
    record = go(journal, record_path, replies)
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.HANDOFF_REQUESTED
    assert record.terminal_state == "handoff"
    assert record.answer is None
    assert record.handoff is not None
    assert record.handoff.why == "would need to click Pay"
    assert record.handoff.tried == ('step 1: lookup({"q": "pay invoice inv_7"}) -> returned',)
    assert record.handoff.frozen_args == {"invoice": "inv_7"}
    data = json.loads(record_path.read_text(encoding="utf-8"))
    assert data["handoff"]["frozen_args"] == {"invoice": "inv_7"}


# --- seed 000: receipts decide, prose and flags do not, the halt lane stays local --------------


def _pending_gateway(counter: Counter) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(privileged=True, idempotent=True)
    def capture(order: str = "ord_1") -> ToolResult:
        counter.hit(order=order)
        # 206 with an empty id: the body even names a capture id and a final value.
        return ToolResult(
            receipts=(Receipt(status=206, id="", idempotency_key=f"cap-{order}"),),
            observation={"status": 206, "capture_id": "cap_1"},
            final="cap_1",
        )

    return reg


def test_a_206_with_an_empty_id_never_halts_as_success(
    journal: SqliteStore, record_path: Path
) -> None:
    counter = Counter()
    replies = [
        call("capture"),
        {"answer": "cap_1", "done": True},
        call("capture"),
        {"answer": "cap_1"},
        call("capture"),
        {"answer": "captured cap_1"},
    ] * 3
    record = go(journal, record_path, replies, _pending_gateway(counter))
    events = assert_contract(record, record_path, journal)
    assert record.halt_reason is not HaltReason.COMPLETED
    assert record.answer != "cap_1"
    assert record.terminal_state != "done"
    assert all(e.dest != "done" for e in events)
    assert counter.n >= 1
    assert all(r.status == 206 for c in record.tool_calls for r in c.receipts)


def test_done_true_is_ignored(journal: SqliteStore, record_path: Path) -> None:
    reg = ToolRegistry()
    reg.tool("capture")(fixture_tools.receipted)
    replies = [
        {"answer": "captured!", "done": True},  # refused: no evidence, the flag does not vote
        {"done": True, "tool_call": {"name": "capture", "args": {"value": "cap_9"}}},
    ]
    record = go(journal, record_path, replies, reg)
    events = assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.COMPLETED
    assert record.answer == "cap_9"  # the receipted value, not the model's "captured!"
    assert record.steps_used == 2
    assert (events[1].source, events[1].dest, events[1].retry) == ("drafting", "drafting", True)
    proposal = events[2].snapshot.proposal
    assert isinstance(proposal, ToolCall)
    assert proposal.ignored == ("done",)


def test_done_flag_alone_never_ends_a_run_as_success(
    journal: SqliteStore, record_path: Path
) -> None:
    model = ScriptedModel([{"done": True}] * 5)
    record = go(journal, record_path, model)
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.SCHEMA_FAIL
    assert record.answer is None


FREE_OR_REMOTE = [
    pytest.param(Lane(kind="http", tier="free"), ControlPlane(), id="http-free"),
    pytest.param(Lane(kind="free_server", tier="free"), ControlPlane(), id="free-server"),
    pytest.param(Lane(kind="free_server", tier="paid"), ControlPlane(), id="free-server-paid"),
    pytest.param(Lane(kind="local_fn", tier="free"), ControlPlane(), id="local-fn-free-tier"),
    pytest.param(Lane(kind="http", tier="paid"), ControlPlane(), id="paid-http"),
    pytest.param(
        Lane(kind="local_fn", tier="local"),
        ControlPlane(halt="allow_free_lane"),
        id="policy-not-local-only",
    ),
    pytest.param(
        Lane(kind="local_fn", tier="local"),
        ControlPlane(retry_budget="allow_free_lane"),
        id="retry-budget-not-local-only",
    ),
]


@pytest.mark.parametrize(("lane", "control"), FREE_OR_REMOTE)
def test_a_halt_lane_that_is_not_local_is_refused_before_any_tool_runs(
    journal: SqliteStore, record_path: Path, lane: Lane, control: ControlPlane
) -> None:
    counter = Counter()
    reg = ToolRegistry()

    @reg.tool(privileged=True)
    def capture() -> ToolResult:
        counter.hit()
        return ToolResult(receipts=(Receipt(status=200, id="cap_1"),), final="cap_1")

    @reg.tool()
    def lookup() -> ToolResult:
        counter.hit()
        return ToolResult(observation="harmless")

    model = ScriptedModel([call("capture"), call("lookup")] * 4)
    record = go(journal, record_path, model, reg, halt_lane=lane, control=control)
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.HALT_PATH_REFUSED
    assert record.terminal_state == "handoff"
    assert counter.n == 0
    assert model.calls == 0
    assert record.tool_calls == ()
    assert record.error is not None
    assert "HALT_PATH_REFUSED" in record.error


# --- guards before tools: allow-list, errors, malformed results --------------------------------


def _allowlisted(*names: str) -> MachineSpec:
    """agent_loop with an explicit tool allow-list."""
    text = load_machine("agent_loop").text + f"tools: [{', '.join(names)}]\n"
    return parse_machine(text, source="agent_loop+allowlist")


def test_a_registered_tool_not_on_the_allow_list_is_refused_before_it_runs(
    journal: SqliteStore, record_path: Path
) -> None:
    counter = Counter()
    reg = lab_tools()

    @reg.tool(privileged=True)
    def wire_money(amount: int = 0) -> ToolResult:
        counter.hit(amount=amount)
        return ToolResult(receipts=(Receipt(status=200, id="wire_1"),), final="wire_1")

    model = ScriptedModel([call("wire_money", amount=10_000)] * 3)
    # the operator grants the one tool the machine lists; the model proposes another
    record = go(journal, record_path, model, reg, machine=_allowlisted("lookup"), allow=["lookup"])
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.TOOL_REFUSED
    assert counter.n == 0
    assert record.tool_calls == ()
    assert record.meters.tool_calls == 0
    assert model.calls == 1
    assert record.handoff is not None
    assert record.handoff.frozen_args == {"tool": "wire_money", "args": {"amount": 10_000}}


def test_an_unknown_tool_name_is_refused_before_anything_runs(
    journal: SqliteStore, record_path: Path
) -> None:
    counter = Counter()
    reg = ToolRegistry()

    @reg.tool()
    def lookup(q: str = "") -> ToolResult:
        counter.hit(q=q)
        return ToolResult()

    record = go(journal, record_path, [call("click_pay", invoice="inv_7")], reg)
    events = assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.TOOL_REFUSED
    assert counter.n == 0
    assert record.tool_calls == ()
    assert all(e.dest != "tool_pending" for e in events)
    assert record.error is not None
    assert "click_pay" in record.error


def test_retryable_tool_error_is_retried_then_retry_budget(
    journal: SqliteStore, record_path: Path
) -> None:
    counter = Counter()
    reg = ToolRegistry()

    @reg.tool()
    def flaky() -> ToolResult:
        counter.hit()
        raise ToolError("503 from upstream", retryable=True)

    model = ScriptedModel([call("flaky")] * 10)
    record = go(journal, record_path, model, reg, budgets={"max_retries": 2})
    events = assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.RETRY_BUDGET
    assert record.answer == "cannot: retry budget"
    assert counter.n == 3  # the first try and two retries
    assert model.calls == record.steps_used == 3  # every retry was a step
    assert record.meters.retries_used == 2
    assert sum(e.retry for e in events) == 2
    assert [c.status for c in record.tool_calls] == ["failed"] * 3
    assert record.error is not None
    assert "503 from upstream" in record.error


def test_non_retryable_tool_error_is_tool_error(journal: SqliteStore, record_path: Path) -> None:
    counter = Counter()
    reg = ToolRegistry()

    @reg.tool()
    def charge() -> ToolResult:
        counter.hit()
        raise ToolError("card declined", retryable=False)

    record = go(journal, record_path, [call("charge")] * 5, reg)
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.TOOL_ERROR
    assert counter.n == 1
    assert record.meters.retries_used == 0
    assert record.error is not None
    assert "card declined" in record.error


def test_a_plain_exception_is_a_non_retryable_tool_error(
    journal: SqliteStore, record_path: Path
) -> None:
    counter = Counter()
    reg = ToolRegistry()

    @reg.tool()
    def buggy() -> ToolResult:
        counter.hit()
        raise KeyError("missing field")

    record = go(journal, record_path, [call("buggy")] * 5, reg)
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.TOOL_ERROR
    assert counter.n == 1
    assert record.error is not None
    assert "KeyError" in record.error


def test_arguments_a_tool_cannot_take_are_refused_before_the_call_and_asked_again(
    journal: SqliteStore, record_path: Path
) -> None:
    counter = Counter()
    reg = ToolRegistry()

    @reg.tool(privileged=True)
    def charge(amount_cents: int, idempotency_key: str) -> ToolResult:
        counter.hit()
        return ToolResult(receipts=(Receipt(status=201, id="ch_1"),), final="charged ch_1")

    prompts: list[Prompt] = []
    replies = [
        call("charge", amount=5, key="k"),
        call("charge", amount_cents=5, idempotency_key="k"),
    ]

    def model(prompt: Prompt) -> Any:
        prompts.append(prompt)
        return replies[len(prompts) - 1]

    record = go(journal, record_path, model, reg)
    events = assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.COMPLETED
    assert counter.n == 1  # the refused call was never made
    assert record.meters.retries_used == 1
    assert [c.args for c in record.tool_calls] == [{"amount_cents": 5, "idempotency_key": "k"}]
    [refused] = [e for e in events if e.trigger == "tool_failed"]
    assert refused.retry
    assert refused.facts is not None
    assert refused.facts.error is not None
    assert "missing a required argument: 'amount_cents'" in refused.facts.error
    assert "it takes charge(amount_cents, idempotency_key)" in refused.facts.error
    assert "charge was not called" in refused.facts.error
    assert prompts[1].history[-1]["error"] == refused.facts.error  # the model is told why
    assert replay_events(journal.get_run(record.run_id), events).ok


def test_a_model_that_never_gets_the_arguments_right_spends_the_retry_budget(
    journal: SqliteStore, record_path: Path
) -> None:
    counter = Counter()
    reg = ToolRegistry()

    @reg.tool()
    def lookup(q: str) -> ToolResult:
        counter.hit()
        return ToolResult(observation={"q": q})

    record = go(journal, record_path, [call("lookup", query="x")] * 5, reg,
                budgets={"max_retries": 2})  # fmt: skip
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.RETRY_BUDGET
    assert counter.n == 0
    assert record.tool_calls == ()
    assert record.error is not None
    assert "missing a required argument: 'q' (it takes lookup(q))" in record.error


def test_argument_problem_reads_the_signature_once_and_lets_kwargs_through() -> None:
    def strict(a: int, *, b: str = "") -> None: ...

    def loose(**anything: Any) -> None: ...

    assert argument_problem(Tool(name="s", fn=strict), {"a": 1, "b": "x"}) is None
    missing = argument_problem(Tool(name="s", fn=strict), {}) or ""
    assert missing.startswith("missing a required argument: 'a' (it takes s(a, b=…))")
    assert "unexpected keyword argument 'c'" in (
        argument_problem(Tool(name="s", fn=strict), {"a": 1, "c": 2}) or ""
    )
    assert argument_problem(Tool(name="l", fn=loose), {"x": 1, "y": 2}) is None
    assert argument_problem(Tool(name="p", fn=print), {"sep": "-"}) is None  # no signature issue


@pytest.mark.parametrize(
    ("retryable", "expected", "tries"),
    [(True, HaltReason.RETRY_BUDGET, 2), (False, HaltReason.TOOL_ERROR, 1)],
)
def test_tool_errors_in_a_child_process_keep_their_retryable_flag(
    journal: SqliteStore, record_path: Path, retryable: bool, expected: HaltReason, tries: int
) -> None:
    reg = ToolRegistry()
    reg.add(Tool(name="remote", fn=fixture_tools.raise_tool_error, isolation="process"))
    reply = call("remote", message="upstream said no", retryable=retryable)
    record = go(journal, record_path, [reply] * 5, reg, budgets={"max_retries": 1})
    assert_contract(record, record_path, journal)
    assert record.halt_reason is expected
    assert len(record.tool_calls) == tries
    assert record.error is not None
    assert "upstream said no" in record.error


MALFORMED = [
    pytest.param(
        lambda: {"receipts": [{"status": "200", "id": "cap_1"}], "final": "cap_1"},
        id="dict-status-as-string",
    ),
    pytest.param(
        lambda: {"receipts": [{"status": 200, "id": "cap_1", "extra": 1}]}, id="dict-extra-key"
    ),
    pytest.param(lambda: {"receipts": "200 OK"}, id="dict-receipts-as-string"),
    pytest.param(lambda: "200 OK, captured", id="a-string"),
    pytest.param(lambda: None, id="none"),
    pytest.param(
        lambda: ToolResult(receipts=(Receipt(status="200", id="cap_1"),), final="cap_1"),  # type: ignore[arg-type]
        id="toolresult-status-as-string",
    ),
    pytest.param(
        lambda: ToolResult(receipts=(Receipt(status=True, id="cap_1"),), final="cap_1"),
        id="toolresult-status-as-bool",
    ),
    pytest.param(
        lambda: ToolResult(receipts=({"status": 200, "id": "cap_1"},), final="cap_1"),  # type: ignore[arg-type]
        id="toolresult-receipt-as-dict",
    ),
]


@pytest.mark.parametrize("result", MALFORMED)
def test_a_malformed_tool_result_is_tool_error_with_a_message(
    journal: SqliteStore, record_path: Path, result: Callable[[], Any]
) -> None:
    reg = ToolRegistry()
    reg.tool("capture")(result)
    replies = [call("capture"), {"answer": "cap_1"}] * 4
    record = go(journal, record_path, replies, reg)
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.TOOL_ERROR
    assert record.error is not None
    assert "malformed" in record.error
    [entry] = record.tool_calls
    assert entry.status == "failed"


# --- meters: cost, thrashing -----------------------------------------------------------------


def test_cost_cap_from_model_reply_costs(journal: SqliteStore, record_path: Path) -> None:
    calls = Counter()

    def priced(prompt: Prompt) -> ModelReply:
        calls.hit()
        return ModelReply(content=call("lookup", q=f"q{prompt.step}"), cost=0.4)

    record = go(journal, record_path, priced, budgets={"max_cost": 1.0})
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.COST_CAP
    assert record.answer == "cannot: money budget"
    assert calls.n == record.steps_used == 3
    assert record.meters.cost == pytest.approx(1.2)
    assert len(record.tool_calls) == 2  # the third proposal never ran: money was spent


def test_cost_cap_counts_tool_costs_too(journal: SqliteStore, record_path: Path) -> None:
    reg = ToolRegistry()
    ran = Counter()

    @reg.tool()
    def paid_search(q: str = "") -> ToolResult:
        ran.hit(q=q)
        return ToolResult(observation="nothing", cost=0.3)

    model = ScriptedModel([call("paid_search", q=str(i)) for i in range(10)], cost_per_call=0.05)
    record = go(journal, record_path, model, reg, budgets={"max_cost": 0.5})
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.COST_CAP
    # 0.05 + 0.3 + 0.05 + 0.3 = 0.70 >= 0.5 after the second tool call.
    assert ran.n == 2
    assert record.meters.cost == pytest.approx(0.7)


def test_thrashing_stops_the_same_call_repeated(journal: SqliteStore, record_path: Path) -> None:
    counter = Counter()
    reg = ToolRegistry()

    @reg.tool()
    def search(q: str = "") -> ToolResult:
        counter.hit(q=q)
        return ToolResult(observation="no results")

    model = ScriptedModel([call("search", q="refund policy")] * 10)
    record = go(journal, record_path, model, reg, thrash_limit=3)
    events = assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.THRASHING
    assert record.answer == "cannot: repeat budget"
    assert counter.n == 2  # the third identical proposal is stopped before it runs
    assert model.calls == 3
    assert (events[-1].source, events[-1].trigger) == ("drafting", "tool_call")


def test_changing_arguments_is_not_thrashing(journal: SqliteStore, record_path: Path) -> None:
    model = ScriptedModel([call("lookup", q=f"q{i}") for i in range(10)])
    record = go(journal, record_path, model, thrash_limit=2)
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.MAX_STEPS


# --- the journal, the frozen budgets, the callback -----------------------------------------


def test_every_transition_is_journaled_and_seen_by_on_transition(
    journal: SqliteStore, record_path: Path
) -> None:
    seen: list[Event] = []
    model = ScriptedModel.from_file(HALT_LAB / "looping.json")
    record = go(journal, record_path, model, on_transition=seen.append, run_id="journaled-1")
    events = assert_contract(record, record_path, journal)
    assert record.run_id == "journaled-1"
    assert seen == events
    # started, then per step: tool_call, tool_returned, collected; then the budget halt.
    assert len(events) == 1 + 3 * 8 + 1
    assert events[-1].trigger == "budget"
    assert events[-1].halt is HaltReason.MAX_STEPS
    assert [e.snapshot.meters.steps_used for e in events if e.trigger == "tool_call"] == list(
        range(1, 9)
    )


def test_budget_overrides_are_frozen_into_the_record_and_the_journal(
    journal: SqliteStore, record_path: Path
) -> None:
    overrides = {
        "max_steps": 3,
        "wall_clock_ms": 4321,
        "max_cost": 0.25,
        "tool_timeout_ms": 1234,
        "max_retries": 1,
    }
    record = go(journal, record_path, [call("lookup", q="x")] * 5, budgets=overrides)
    events = assert_contract(record, record_path, journal)
    frozen = Budgets(**overrides)  # type: ignore[arg-type]
    assert record.budgets == frozen
    assert (record.max_steps, record.wall_clock_ms) == (3, 4321)
    assert journal.get_run(record.run_id).budgets == frozen
    assert all(e.snapshot.budgets == frozen for e in events)
    data = json.loads(record_path.read_text(encoding="utf-8"))
    assert data["budgets"] == overrides
    assert record.steps_used == 3


def test_a_partial_override_keeps_the_machine_defaults(
    journal: SqliteStore, record_path: Path
) -> None:
    record = go(journal, record_path, [{"handoff": {"why": "x"}}], budgets={"max_steps": 5})
    assert_contract(record, record_path, journal)
    defaults = load_machine("agent_loop").budgets
    assert record.budgets == Budgets(**{**defaults, "max_steps": 5})  # type: ignore[arg-type]


class FailingStore:
    """A real SQLite store whose `append` (or `finish_run`) raises `JournalError` on call N."""

    def __init__(self, inner: SqliteStore, *, fail_append: int = 0, fail_finish: bool = False):
        self.inner = inner
        self.fail_append = fail_append
        self.fail_finish = fail_finish
        self.appends = 0

    @property
    def location(self) -> str:
        return self.inner.location

    def start_run(self, run: RunRow, first: Event) -> None:
        self.inner.start_run(run, first)

    def append(self, event: Event) -> None:
        self.appends += 1
        if self.appends == self.fail_append:
            raise JournalError("disk I/O error", path=self.inner.path, run_id=event.run_id)
        self.inner.append(event)

    def append_many(self, events: list[Event]) -> str:
        """One commit of several events: counted (and failed) as one append."""
        self.appends += 1
        if self.appends == self.fail_append:
            raise JournalError("disk I/O error", path=self.inner.path, run_id=events[0].run_id)
        return self.inner.append_many(events)

    def __getattr__(self, name: str) -> Any:
        """Everything this double does not fail on goes to the real store."""
        return getattr(self.inner, name)

    def finish_run(self, record: HaltRecord) -> None:
        if self.fail_finish:
            raise JournalError("disk I/O error", path=self.inner.path, run_id=record.run_id)
        self.inner.finish_run(record)

    def get_run(self, run_id: str) -> RunRow:
        return self.inner.get_run(run_id)

    def list_runs(self, limit: int = 20) -> list[RunRow]:
        return self.inner.list_runs(limit)

    def events(self, run_id: str) -> list[Event]:
        return self.inner.events(run_id)

    def close(self) -> None:
        self.inner.close()


def test_a_failed_journal_write_stops_the_run_loudly_and_leaves_a_record(
    journal: SqliteStore, record_path: Path
) -> None:
    store = FailingStore(journal, fail_append=3)
    model = ScriptedModel.from_file(HALT_LAB / "looping.json")
    with pytest.raises(JournalError, match="disk I/O error"):
        go(journal, record_path, model, store=store, run_id="broken-journal")
    # The run did not go on unrecorded: the third commit was the last thing attempted.
    assert store.appends == 3
    # commits: to tool_pending; to awaiting_receipts and back to the model together (a
    # read's result and its receipts check, no call between them); the next tool call
    assert model.calls == 2
    data = json.loads(record_path.read_text(encoding="utf-8"))
    assert data["halt_reason"] == "journal_failed"
    assert "journal" in data["error"]
    record = read_record(record_path)
    assert record.run_id == "broken-journal"
    assert [e.seq for e in journal.events("broken-journal")] == [0, 1, 2, 3]


def test_a_failed_final_journal_write_still_leaves_the_halt_in_the_record(
    journal: SqliteStore, record_path: Path
) -> None:
    store = FailingStore(journal, fail_finish=True)
    with pytest.raises(JournalError):
        go(journal, record_path, [{"handoff": {"why": "x"}}], store=store)
    record = read_record(record_path)
    assert record.halt_reason is HaltReason.HANDOFF_REQUESTED
    assert record.error is not None
    assert "journal write failed" in record.error


# --- adapters: async model and tools, arun ----------------------------------------------------


def _async_adapters() -> tuple[Any, ToolRegistry, Counter]:
    counter = Counter()
    reg = ToolRegistry()

    @reg.tool()
    async def fetch(key: str = "") -> ToolResult:
        await asyncio.sleep(0.01)
        counter.hit(key=key)
        return ToolResult(receipts=(Receipt(status=201, id=f"doc:{key}"),), final=f"value {key}")

    async def model(prompt: Prompt) -> ModelReply:
        await asyncio.sleep(0.01)
        return ModelReply(content=json.dumps(call("fetch", key="k1")), cost=0.01)

    return model, reg, counter


def test_async_model_and_tool_adapters_are_awaited(journal: SqliteStore, record_path: Path) -> None:
    model, reg, counter = _async_adapters()
    record = go(journal, record_path, model, reg)
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.COMPLETED
    assert record.answer == "value k1"
    assert counter.calls == [{"key": "k1"}]
    assert record.meters.cost == pytest.approx(0.01)


def test_arun_runs_the_same_contract_for_async_callers(
    journal: SqliteStore, record_path: Path
) -> None:
    model, reg, counter = _async_adapters()

    async def main() -> HaltRecord:
        return await arun(
            "agent_loop",
            task="fetch k1",
            model=model,
            **granted(reg),
            store=journal,
            record_path=record_path,
        )

    record = asyncio.run(main())
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.COMPLETED
    assert counter.n == 1


def test_arun_does_not_block_the_event_loop(journal: SqliteStore, record_path: Path) -> None:
    reg = ToolRegistry()
    entered = threading.Event()
    gate = threading.Event()

    @reg.tool()
    def blocking() -> ToolResult:
        entered.set()
        gate.wait(10)
        return ToolResult(receipts=(Receipt(status=200, id="b"),), final="b")

    async def main() -> tuple[HaltRecord, bool]:
        task = asyncio.ensure_future(
            arun(
                "agent_loop",
                task="block",
                model=ScriptedModel([call("blocking")]),
                **granted(reg),
                store=journal,
                record_path=record_path,
            )
        )
        # The loop stays responsive while the run is blocked in its tool.
        while not entered.is_set():
            await asyncio.sleep(0.01)
        pending = not task.done()
        gate.set()
        return await task, pending

    record, was_pending = asyncio.run(main())
    assert was_pending
    assert_contract(record, record_path, journal)
    assert record.halt_reason is HaltReason.COMPLETED


# --- bad input is refused before anything is journaled ---------------------------------------

BAD_INPUT = [
    pytest.param({"task": ""}, InvalidInputError, id="empty-task"),
    pytest.param({"task": "   \n"}, InvalidInputError, id="blank-task"),
    pytest.param({"budgets": {"max_steps": -1}}, BudgetError, id="negative-steps"),
    pytest.param({"budgets": {"max_cost": -0.01}}, BudgetError, id="negative-cost"),
    pytest.param({"budgets": {"wall_clock_ms": 0}}, BudgetError, id="zero-wall-clock"),
    pytest.param({"budgets": {"max_steps": 2.5}}, BudgetError, id="fractional-steps"),
    pytest.param({"budgets": {"max_steps": True}}, BudgetError, id="bool-steps"),
    pytest.param({"budgets": {"max_cost": float("nan")}}, BudgetError, id="nan-cost"),
    pytest.param({"budgets": {"max_stepz": 3}}, BudgetError, id="unknown-budget"),
    pytest.param({"thrash_limit": -1}, InvalidInputError, id="negative-thrash-limit"),
]


@pytest.mark.parametrize(("kwargs", "error"), BAD_INPUT)
def test_bad_input_is_refused_before_anything_is_journaled(
    journal: SqliteStore,
    record_path: Path,
    kwargs: dict[str, Any],
    error: type[Exception],
) -> None:
    counter = Counter()

    def model(prompt: Prompt) -> Any:
        counter.hit()
        return {"handoff": {"why": "should never be asked"}}

    params: dict[str, Any] = {"task": "a task"} | kwargs
    with pytest.raises(error):
        go(journal, record_path, model, **params)
    assert counter.n == 0
    assert journal.list_runs() == []
    assert not record_path.exists()


def test_a_tool_reporting_a_nan_cost_still_ends_with_a_record(
    journal: SqliteStore, record_path: Path
) -> None:
    """An adapter bug (a non-finite cost) must not cost the run its halt record."""
    reg = ToolRegistry()

    @reg.tool()
    def sloppy() -> ToolResult:
        return ToolResult(observation="ok", cost=float("nan"))

    record = go(journal, record_path, [call("sloppy")] * 3, reg, run_id="nan-cost")
    assert_contract(record, record_path, journal)


def test_a_model_reporting_an_infinite_cost_still_ends_with_a_record(
    journal: SqliteStore, record_path: Path
) -> None:
    def model(prompt: Prompt) -> ModelReply:
        return ModelReply(content=call("lookup", q="x"), cost=float("inf"))

    record = go(journal, record_path, model)
    assert_contract(record, record_path, journal)


def _pinger() -> ToolRegistry:
    """One cheap inline tool, `ping(n)`, for runs with many calls."""
    reg = ToolRegistry()

    @reg.tool(isolation="inline")
    def ping(n: int) -> ToolResult:
        return ToolResult(observation=n)

    return reg


def test_the_record_keeps_the_last_tool_calls_and_counts_the_rest(
    journal: SqliteStore, record_path: Path
) -> None:
    reg = _pinger()
    steps = RECORD_TOOL_CALLS + 30
    record = run(
        "agent_loop",
        task="ping a lot",
        model=ScriptedModel([call("ping", n=i) for i in range(steps)]),
        **granted(reg),
        store=journal,
        budgets={"max_steps": steps},
        record_path=record_path,
    )
    assert record.halt_reason is HaltReason.MAX_STEPS
    assert record.meters.tool_calls == steps
    assert record.tool_calls_omitted == 30
    assert [c.args["n"] for c in record.tool_calls] == list(range(30, steps))
    assert read_record(record_path) == record
    tool_events = [e for e in journal.events(record.run_id) if e.facts and e.facts.tool]
    assert len(tool_events) == steps  # the journal keeps every one


def test_a_long_runs_handoff_packet_lists_the_last_calls_and_counts_the_rest(
    journal: SqliteStore, record_path: Path
) -> None:
    reg = _pinger()
    steps = RECORD_TOOL_CALLS + 5
    replies = [call("ping", n=i) for i in range(steps)] + [{"handoff": {"why": "stuck"}}]
    record = go(journal, record_path, replies, reg, budgets={"max_steps": steps + 1})
    assert record.halt_reason is HaltReason.HANDOFF_REQUESTED
    assert record.handoff is not None
    tried = record.handoff.tried
    assert tried[0] == "(5 earlier calls omitted: see the journal)"
    assert len(tried) == RECORD_TOOL_CALLS + 1
    assert tried[-1] == f'step {steps}: ping({{"n": {steps - 1}}}) -> returned (no receipts)'
    # the pending writes are bounded too: the last 100 named, the rest counted
    assert len(record.unreceipted) == 101
    assert record.unreceipted[0] == "(5 earlier calls without complete receipts: see the journal)"


def test_an_inline_tool_past_its_time_cap_is_refused_not_unknown(
    journal: SqliteStore, record_path: Path
) -> None:
    reg = ToolRegistry()

    @reg.tool(isolation="inline")
    def slow() -> ToolResult:
        time.sleep(0.2)
        return ToolResult(receipts=(Receipt(status=200, id="late_1"),), final="done late")

    record = run(
        "agent_loop",
        task="be slow",
        model=ScriptedModel([call("slow")]),
        **granted(reg),
        store=journal,
        budgets={"tool_timeout_ms": 50},
        record_path=record_path,
    )
    assert record.halt_reason is HaltReason.TOOL_TIMEOUT
    [entry] = record.tool_calls
    assert entry.outcome_unknown is False  # it finished; its late result is refused
    assert entry.receipts == ()
    assert record.error is not None
    assert "could not be interrupted" in record.error
