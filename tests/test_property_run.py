"""A property of the whole worker: whatever the model says and the tools do, the run stops
inside its budgets for exactly one named reason, and success is only ever receipted.

Each example is a real run on a real SQLite file (a fresh temporary directory per example:
hypothesis reuses function-scoped fixtures across examples).
"""

from __future__ import annotations

import itertools
import json
import re
import tempfile
import threading
from pathlib import Path
from typing import Any

import attrs
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fsm_agent import (
    HaltReason,
    HaltRecord,
    ModelReply,
    Prompt,
    Receipt,
    ToolError,
    ToolRegistry,
    ToolResult,
    load_machine,
    read_record,
    receipts_complete,
    run,
    terminal_state,
)
from fsm_agent.declaration.load import parse_machine
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.halt import CANNOT_METER
from fsm_agent.review.replay import replay_events
from fsm_agent.stores.sqlite import SqliteStore

#: Values a tool can return. "v3" only ever comes back without complete receipts.
GOOD_VALUES = ("v1", "v2")
ANSWERS = ("v1", "v2", "v3", "made up", "cap_1")


def _machine() -> MachineSpec:
    """agent_loop allow-listing `act` only (`forbidden` is registered but never allowed)."""
    text = load_machine("agent_loop").text + "tools: [act]\n"
    return parse_machine(text, source="agent_loop+property")


MACHINE = _machine()

# --- what the model says ----------------------------------------------------------------------

tool_calls = st.builds(
    lambda name, arg: {"tool_call": {"name": name, "args": {"q": arg}}},
    st.sampled_from(["act", "act", "act", "forbidden", "ghost"]),
    st.sampled_from(["a", "b"]),
)
answers = st.builds(lambda text: {"answer": text}, st.sampled_from(ANSWERS))
handoffs = st.builds(
    lambda why, args: {"handoff": {"why": why, **({"args": args} if args else {})}},
    st.sampled_from(["need a human", "unsafe"]),
    st.none() | st.just({"amount": 5}),
)
prose = st.sampled_from(
    ["I am confident the answer is v1.", "Done! Everything is captured.", "Let me think..."]
)
junk = st.one_of(
    st.none(),
    st.just(""),
    st.just({}),
    st.just({"done": True}),
    st.just('{"answer": "v1'),
    st.integers(),
    st.lists(st.integers(), max_size=3),
    st.just({"tool_call": "act"}),
    st.just({"answer": "v1", "tool_call": {"name": "act"}}),
    st.binary(max_size=8),
)


def _with_flags(reply: Any, done: bool, as_text: bool) -> Any:
    if isinstance(reply, dict) and done:
        reply = {**reply, "done": True}
    if isinstance(reply, dict) and as_text:
        reply = json.dumps(reply)
    return reply


replies = st.builds(
    _with_flags,
    # weighted towards tool calls and answers, so runs get far enough to succeed or fail late
    st.one_of(tool_calls, tool_calls, tool_calls, answers, answers, handoffs, prose, junk),
    st.booleans(),
    st.booleans(),
)
#: a tool call followed by an answer: the shape of a run that may succeed
call_then_answer = st.tuples(
    st.just({"tool_call": {"name": "act", "args": {"q": "a"}}}), answers
).map(list)
#: two different calls, then an answer: a write left without receipts, then another one
two_calls_then_answer = st.tuples(
    st.just({"tool_call": {"name": "act", "args": {"q": "a"}}}),
    st.just({"tool_call": {"name": "act", "args": {"q": "b"}}}),
    answers,
).map(list)
scripts = st.lists(
    st.one_of(replies.map(lambda r: [r]), call_then_answer, two_calls_then_answer),
    min_size=1,
    max_size=6,
).map(lambda chunks: [r for chunk in chunks for r in chunk])
costs = st.sampled_from([0.0, 0.0, 0.0, 0.01, 0.1])

# --- what the tools do ------------------------------------------------------------------------

complete = st.tuples(st.just("complete"), st.sampled_from(GOOD_VALUES), st.booleans())
results = st.one_of(
    complete,
    complete,
    st.tuples(
        st.just("incomplete"),
        st.sampled_from([(206, ""), (200, ""), (500, "id0009"), (302, "id0008")]),
        st.sampled_from(["v3", None]),
    ),
    st.tuples(st.just("nothing")),
    st.tuples(st.just("error"), st.booleans()),
    st.tuples(st.just("crash")),
)

budgets = st.fixed_dictionaries(
    {
        "max_steps": st.integers(1, 6),
        "max_retries": st.integers(0, 3),
        "max_cost": st.sampled_from([0.15, 0.5, 100.0]),
        "wall_clock_ms": st.just(60_000),
        "tool_timeout_ms": st.just(10_000),
    }
)


@attrs.define
class Script:
    """The model and tool behaviour of one example, and what actually happened."""

    replies: list[Any]
    costs: list[float]
    results: list[tuple[Any, ...]]
    #: `act` declared as a read (its receipts then decide nothing about side effects)
    act_reads: bool = False
    model_calls: int = 0
    act_calls: int = 0
    forbidden_calls: int = 0
    #: values returned by `act` calls whose receipts were complete
    evidence: set[str] = attrs.field(factory=set)
    lock: threading.Lock = attrs.field(factory=threading.Lock)

    def model(self, prompt: Prompt) -> Any:
        with self.lock:
            i = self.model_calls
            self.model_calls += 1
        reply = self.replies[i] if i < len(self.replies) else None
        return ModelReply(content=reply, cost=self.costs[i % len(self.costs)])

    def tools(self) -> ToolRegistry:
        reg = ToolRegistry()

        @reg.tool(side_effect=not self.act_reads)
        def act(q: str = "") -> ToolResult:
            with self.lock:
                i = self.act_calls
                self.act_calls += 1
            kind, *rest = self.results[i] if i < len(self.results) else ("nothing",)
            if kind == "complete":
                value, as_final = rest
                self.evidence.add(value)
                return ToolResult(
                    receipts=(Receipt(status=200, id=f"id{i:04d}"),),
                    observation={"value": value},
                    final=value if as_final else None,
                )
            if kind == "incomplete":
                (status, rid), final = rest
                return ToolResult(
                    receipts=(Receipt(status=status, id=rid),),
                    observation={"value": "v3"},
                    final=final,
                )
            if kind == "error":
                raise ToolError("upstream failed", retryable=rest[0])
            if kind == "crash":
                raise RuntimeError("tool bug")
            return ToolResult(observation="nothing found")

        @reg.tool(privileged=True)
        def forbidden(q: str = "") -> ToolResult:
            with self.lock:
                self.forbidden_calls += 1
            return ToolResult(receipts=(Receipt(status=200, id="id9999"),), final="v1")

        return reg


def _check(record: HaltRecord, script: Script, limits: dict[str, Any], folder: Path) -> None:
    store = SqliteStore(folder / "journal.db")
    try:
        events = store.events(record.run_id)
        row = store.get_run(record.run_id)
    finally:
        store.close()
    max_steps = limits["max_steps"]
    # Stops inside the step budget: no unbudgeted model call, ever.
    assert script.model_calls <= max_steps
    assert record.steps_used == script.model_calls
    assert record.meters.retries_used <= limits["max_retries"]
    # One named reason, and the state it maps to.
    assert isinstance(record.halt_reason, HaltReason)
    assert record.terminal_state == terminal_state(record.halt_reason)
    # Success only from complete receipts, with an answer taken from that evidence.
    if record.halt_reason is HaltReason.COMPLETED:
        assert any(receipts_complete(c.receipts) for c in record.tool_calls)
        assert record.answer in script.evidence
        assert record.unreceipted == ()
        if not script.act_reads:
            _every_write_receipted(record)
        # every number the answer states came back from a receipted call
        returned = " ".join(script.evidence)
        assert set(re.findall(r"\d+", record.answer or "")) <= set(re.findall(r"\d+", returned))
    if record.halt_reason in CANNOT_METER:
        assert record.answer == f"cannot: {CANNOT_METER[record.halt_reason]} budget"
    if record.terminal_state == "handoff":
        assert record.answer is None
    # Guards before tools: the non-allow-listed tool never ran; every run call is recorded.
    assert script.forbidden_calls == 0
    assert script.act_calls == len(record.tool_calls) == record.meters.tool_calls
    # The file on disk is the record returned, and the journal agrees with both.
    assert read_record(folder / "halt.json") == record
    assert [e.seq for e in events] == list(range(len(events)))
    assert all(b.dest == a.source for b, a in itertools.pairwise(events))
    assert events[-1].halt is record.halt_reason
    assert all(e.halt is None for e in events[:-1])
    assert row.status == "halted"
    assert row.record == record
    # Replaying the journal with the same code re-makes exactly the live decisions.
    report = replay_events(row, events)
    assert report.ok, report.summary
    assert report.recomputed_halt is record.halt_reason


def _every_write_receipted(record: HaltRecord) -> None:
    """A side-effecting call without complete receipts is followed by the same call (tool
    and arguments) with them: the oracle, written apart from `fsm_agent.runtime.effects`."""
    calls = record.tool_calls
    for i, c in enumerate(calls):
        if c.side_effect and not (c.status == "returned" and receipts_complete(c.receipts)):
            assert any(
                (d.name, d.args, d.status) == (c.name, c.args, "returned")
                and receipts_complete(d.receipts)
                for d in calls[i + 1 :]
            ), (c, calls)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    model_replies=scripts,
    model_costs=st.lists(costs, min_size=1, max_size=4),
    tool_results=st.lists(results, min_size=1, max_size=8),
    limits=budgets,
    thrash_limit=st.integers(0, 3),
    act_reads=st.booleans(),
)
def test_any_run_halts_in_budget_for_one_reason_and_succeeds_only_on_receipts(
    model_replies: list[Any],
    model_costs: list[float],
    tool_results: list[tuple[Any, ...]],
    limits: dict[str, Any],
    thrash_limit: int,
    act_reads: bool,
) -> None:
    script = Script(
        replies=model_replies, costs=model_costs, results=tool_results, act_reads=act_reads
    )
    with tempfile.TemporaryDirectory(prefix="fsm-agent-prop-") as tmp:
        folder = Path(tmp)
        record = run(
            MACHINE,
            task="property run",
            model=script.model,
            tools=script.tools(),
            store=folder / "journal.db",
            budgets=limits,
            record_path=folder / "halt.json",
            thrash_limit=thrash_limit,
            handle_signals=False,
        )
        _check(record, script, limits, folder)
    event(f"halt: {record.halt_reason.value}")
