"""The trace of a run, built from its journal: spans, parentage, names, the conventions'
attributes, derived ids, and content only when asked for (bounded, redacted).

Over real runs (the `openai:` adapter against the test model server, the lab's tools, a real
SQLite journal) and over run files journaled before usage was kept.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import attrs
import pytest

from fsm_agent import load_tools, run
from fsm_agent.adapters.loading import load_model
from fsm_agent.adapters.openai import Endpoint
from fsm_agent.halt import HaltReason
from fsm_agent.journal.runfile import read_run_file
from fsm_agent.journal.store import Control
from fsm_agent.redaction import Redactor, Secret
from fsm_agent.runtime.journaling import now_iso
from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.telemetry.content import (
    MAX_CONTENT_CHARS,
    TraceOptions,
    capture_from_env,
)
from fsm_agent.telemetry.root import build_trace
from fsm_agent.telemetry.spans import Span
from tests import model_server as ms
from tests.lab import LAB_ALLOW
from tests.model_server import ModelServer
from tests.trace_runs import LAB_ACTS, LAB_TOOLS, TASK, call, journaled, openai_run, reply

ROOT = Path(__file__).parent


def trace_of(tmp_path: Path, server: ModelServer, options: TraceOptions | None = None,
             **kwargs: Any) -> list[Span]:  # fmt: skip
    options = options or TraceOptions()
    record = openai_run(tmp_path, server, **kwargs)
    row, events = journaled(tmp_path / "j.db", record.run_id)
    return build_trace(row, events, options)


def strings(spans: list[Span]) -> str:
    """Every attribute value, event attribute and status text of `spans`, as one text."""
    found: list[Any] = []
    for s in spans:
        found += [s.name, s.status_description, *s.attributes.values()]
        found += [v for e in s.events for v in e.attributes.values()]
    return json.dumps(found, default=str)


def test_a_run_is_one_trace_with_a_root_a_span_per_step_and_per_call(
    tmp_path: Path, server: ModelServer
) -> None:
    spans = trace_of(tmp_path, server)
    root, *rest = spans
    assert root.name == "invoke_agent agent_loop"
    assert root.parent_id is None
    steps = [s for s in rest if s.name.startswith("transition ")]
    chats = [s for s in rest if s.name.startswith("chat")]
    tools = [s for s in rest if s.name.startswith("execute_tool")]
    # 3 model calls, 2 tool calls, each followed by its receipts step: 7 transitions.
    assert (len(steps), len(chats), len(tools)) == (7, 3, 2)
    assert len(spans) == 1 + 7 + 3 + 2
    assert {s.trace_id for s in spans} == {root.trace_id}
    assert all(s.parent_id == root.span_id for s in steps)
    step_ids = {s.span_id for s in steps}
    assert all(s.parent_id in step_ids for s in chats + tools)
    assert len({s.span_id for s in spans}) == len(spans)
    assert [s.name for s in chats] == ["chat test-model"] * 3
    assert [s.name for s in tools] == ["execute_tool lookup"] * 2
    assert steps[0].name == "transition drafting -> tool_pending"
    # Times: every child lies within its parent, in order.
    for child in chats + tools:
        parent = next(s for s in steps if s.span_id == child.parent_id)
        assert parent.start_ns <= child.start_ns <= child.end_ns == parent.end_ns
    assert all(root.start_ns <= s.start_ns <= s.end_ns <= root.end_ns for s in rest)
    assert [s.start_ns for s in steps] == sorted(s.start_ns for s in steps)


def test_model_and_tool_spans_carry_the_conventions_attributes(
    tmp_path: Path, server: ModelServer
) -> None:
    spans = trace_of(tmp_path, server)
    root = spans[0]
    chats = [s for s in spans if s.name.startswith("chat")]
    first = chats[0]
    assert first.kind == "client"
    assert first.attributes["gen_ai.operation.name"] == "chat"
    assert first.attributes["gen_ai.provider.name"] == "openai"
    assert first.attributes["gen_ai.request.model"] == "test-model"
    assert first.attributes["gen_ai.response.model"] == "test-model-2026-01"
    assert first.attributes["gen_ai.response.id"] == "chatcmpl-1"
    assert first.attributes["gen_ai.usage.input_tokens"] == 10
    assert first.attributes["gen_ai.usage.output_tokens"] == 1
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert chats[2].attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert first.attributes["gen_ai.conversation.id"] == root.attributes["fsm_agent.run.id"]
    tool = next(s for s in spans if s.name.startswith("execute_tool"))
    assert tool.kind == "internal"
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "lookup"
    assert tool.attributes["gen_ai.tool.type"] == "function"
    assert tool.attributes["fsm_agent.tool.status"] == "returned"
    assert "error.type" not in tool.attributes
    # The root: the agent, the totals, how it halted, the meters and the budgets.
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == "agent_loop"
    assert root.attributes["gen_ai.usage.input_tokens"] == 10 + 20 + 30
    assert root.attributes["gen_ai.usage.output_tokens"] == 1 + 2 + 3
    assert root.attributes["fsm_agent.halt.reason"] == "completed"
    assert root.attributes["fsm_agent.terminal_state"] == "done"
    assert root.attributes["fsm_agent.meters.steps_used"] == 3
    assert root.attributes["fsm_agent.meters.tool_calls"] == 2
    assert root.attributes["fsm_agent.budgets.max_steps"] == 8
    assert root.status == "ok"


def test_a_failed_call_carries_error_type_and_a_refusing_halt_is_no_error(
    tmp_path: Path, server: ModelServer
) -> None:
    acts = (call("lookup", {"q": "lab password"}, 1), ms.Act(status=500, body={}))
    spans = trace_of(tmp_path, server, acts=acts, budgets={"max_retries": 0})
    root = spans[0]
    assert root.attributes["fsm_agent.halt.reason"] == "empty_response"
    # the machine's declared halt for an empty reply (a handoff), not an error of the run
    assert "error.type" not in root.attributes
    assert (root.status, root.status_description) == ("unset", None)
    failed = [s for s in spans if s.name.startswith("chat")][-1]
    assert failed.attributes["error.type"] == "http_error"
    assert failed.status == "error"


@pytest.mark.parametrize("reason", list(HaltReason))
def test_only_error_halts_mark_the_run_error(
    tmp_path: Path, server: ModelServer, reason: HaltReason
) -> None:
    # Issue 27: a handoff the policy asked for was ERROR in Phoenix. Only a tool's, the
    # runtime's or the journal's failure is; completed is OK; every other halt is UNSET.
    record = openai_run(tmp_path, server)
    row, events = journaled(tmp_path / "j.db", record.run_id)
    assert row.record is not None
    halted = attrs.evolve(row.record, halt_reason=reason, error="the tool raised")
    root = build_trace(attrs.evolve(row, record=halted), events, TraceOptions(content=True))[0]
    if reason in (HaltReason.TOOL_ERROR, HaltReason.INTERNAL_ERROR, HaltReason.JOURNAL_FAILED):
        assert root.status == "error"
        assert root.attributes["error.type"] == reason.value
        assert root.status_description == f"{reason.value}: the tool raised"
    else:
        assert root.status == ("ok" if reason is HaltReason.COMPLETED else "unset")
        assert "error.type" not in root.attributes
        assert root.status_description is None
    assert root.attributes["fsm_agent.halt.reason"] == reason.value


def test_spans_carry_what_phoenix_reads_beside_the_conventions(
    tmp_path: Path, server: ModelServer
) -> None:
    # OpenInference (Arize Phoenix): each span's kind; on model calls the model, provider,
    # token counts and the cost the call reported; tokens only there (Phoenix sums them up
    # the tree, so the root carrying totals too would count them twice).
    server.play(*LAB_ACTS)  # at $1.50 / $5 per million tokens: $0.02, $0.04, $0.06
    prices = {"price_in": 1500.0, "price_out": 5000.0, "worst_case_cost": 1.0}
    model = load_model("openai:test-model", endpoint=Endpoint(server.base_url, **prices))
    record = run("agent_loop", task=TASK, model=model, tools=load_tools(LAB_TOOLS),
                 allow=("lookup",), store=tmp_path / "j.db", handle_signals=False)  # fmt: skip
    plain = build_trace(*journaled(tmp_path / "j.db", record.run_id), TraceOptions())
    kinds = {s.name: s.attributes["openinference.span.kind"] for s in plain}
    assert kinds["invoke_agent agent_loop"] == "AGENT"
    assert kinds["transition drafting -> tool_pending"] == "CHAIN"
    assert (kinds["chat test-model"], kinds["execute_tool lookup"]) == ("LLM", "TOOL")
    root = plain[0]
    assert root.attributes["agent.name"] == "agent_loop"
    assert not any(k.startswith("llm.") for k in root.attributes)
    chats = [s.attributes for s in plain if s.name == "chat test-model"]
    assert [c["llm.token_count.prompt"] for c in chats] == [10, 20, 30]
    assert [c["llm.token_count.completion"] for c in chats] == [1, 2, 3]
    assert [c["llm.token_count.total"] for c in chats] == [11, 22, 33]
    assert chats[0]["llm.model_name"] == "test-model-2026-01"  # the model that answered
    assert (chats[0]["llm.provider"], chats[0]["llm.system"]) == ("openai", "openai")
    costs = [float(c["llm.cost.total"]) for c in chats]
    assert costs == [c["fsm_agent.cost"] for c in chats]
    assert sum(costs) == pytest.approx(record.meters.cost) == pytest.approx(0.12)
    tool = next(s for s in plain if s.name == "execute_tool lookup")
    assert tool.attributes["tool.name"] == "lookup"
    # input.value / output.value are content: only with content capture
    assert not any(k.startswith(("input.", "output.")) for s in plain for k in s.attributes)
    spans = build_trace(*journaled(tmp_path / "j.db", record.run_id), TraceOptions(content=True))
    root = spans[0].attributes
    assert (root["input.value"], root["input.mime_type"]) == (TASK, "text/plain")
    assert (root["output.value"], root["output.mime_type"]) == ("swordfish", "text/plain")
    chat = next(s.attributes for s in spans if s.name == "chat test-model")
    assert chat["input.value"] == chat["gen_ai.input.messages"]
    assert chat["output.value"] == chat["gen_ai.output.messages"]
    assert chat["input.mime_type"] == chat["output.mime_type"] == "application/json"
    hit = [s.attributes for s in spans if s.name == "execute_tool lookup"][1]
    assert json.loads(str(hit["input.value"])) == {"q": "lab password"}
    assert json.loads(str(hit["output.value"]))["observation"] == {"fact": "swordfish"}


def test_ids_are_derived_from_the_run_and_the_same_on_every_build(
    tmp_path: Path, server: ModelServer
) -> None:
    record = openai_run(tmp_path, server)
    row, events = journaled(tmp_path / "j.db", record.run_id)
    once, twice = build_trace(row, events, TraceOptions()), build_trace(row, events, TraceOptions())
    assert once == twice
    expected = hashlib.sha256(f"fsm-agent/trace\0{row.run_id}\0{row.started_at}\0".encode())
    assert once[0].trace_id == expected.digest()[:16]
    root_id = hashlib.sha256(f"fsm-agent/span\0{row.run_id}\0{row.started_at}\0{0}\0run\0".encode())
    assert once[0].span_id == root_id.digest()[:8]
    # Another run (same task, same script) is another trace.
    other = openai_run(tmp_path, server)
    assert build_trace(*journaled(tmp_path / "j.db", other.run_id), TraceOptions())[0].trace_id != (
        once[0].trace_id
    )


def test_without_opt_in_no_content_is_in_any_span(tmp_path: Path, server: ModelServer) -> None:
    text = strings(trace_of(tmp_path, server))
    for content in (TASK, "swordfish", "lab password", "No exact match", '"q"'):
        assert content not in text
    assert "gen_ai.input.messages" not in text


def test_opted_in_content_follows_the_message_shapes(tmp_path: Path, server: ModelServer) -> None:
    spans = trace_of(tmp_path, server, TraceOptions(content=True))
    chats = [s for s in spans if s.name.startswith("chat")]
    inputs = json.loads(str(chats[1].attributes["gen_ai.input.messages"]))
    assert inputs[0] == {"role": "user", "parts": [{"type": "text", "content": TASK}]}
    assert inputs[1]["parts"][0] == {"type": "tool_call", "name": "lookup",
                                     "arguments": {"q": "password"}}  # fmt: skip
    assert inputs[-1]["role"] == "tool"  # what the miss returned
    assert "No exact match" in json.dumps(inputs[-1]["parts"][0]["response"])
    output = json.loads(str(chats[2].attributes["gen_ai.output.messages"]))
    assert output == [{"role": "assistant", "finish_reason": "stop",
                       "parts": [{"type": "text", "content": "swordfish"}]}]  # fmt: skip
    hit = [s for s in spans if s.name.startswith("execute_tool")][1]
    assert json.loads(str(hit.attributes["gen_ai.tool.call.arguments"])) == {"q": "lab password"}
    result = json.loads(str(hit.attributes["gen_ai.tool.call.result"]))
    assert result["observation"] == {"fact": "swordfish"}
    root = spans[0]
    assert TASK in str(root.attributes["gen_ai.input.messages"])
    assert "swordfish" in str(root.attributes["gen_ai.output.messages"])


def test_content_is_cut_to_its_cap_and_redacted(
    tmp_path: Path, server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-live-7f3a9c1e5b"  # noqa: S105 - a made-up key
    monkeypatch.setenv("FSM_TEST_TRACE_KEY", secret)
    huge = "x" * 20_000
    acts = tuple(call("lookup", {"q": f"{secret} {huge} {n}"}, n) for n in range(1, 9))
    redactor = Redactor([Secret("FSM_TEST_TRACE_KEY", secret)])
    spans = trace_of(tmp_path, server, TraceOptions(content=True, redactor=redactor), acts=acts)
    captured = [
        v
        for s in spans
        for k, v in s.attributes.items()
        if k.startswith("gen_ai.") and isinstance(v, str) and v.startswith(("[", "{"))
    ]
    assert len(captured) > 8
    assert max(len(v) for v in captured) <= MAX_CONTENT_CHARS
    text = strings(spans)
    assert secret not in text
    assert "[redacted:FSM_TEST_TRACE_KEY]" in text
    assert "more characters]" in text
    late = [s for s in spans if s.name.startswith("chat")][-1]
    inputs = json.loads(str(late.attributes["gen_ai.input.messages"]))  # still JSON
    assert inputs[0]["parts"][0]["content"] == TASK
    assert any("earlier message(s) left out" in json.dumps(m) for m in inputs)


def test_capture_is_opted_in_by_the_conventions_variable() -> None:
    env = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
    assert [
        capture_from_env({env: v}) for v in ("true", "TRUE", "span_only", "SPAN_AND_EVENT")
    ] == [True] * 4
    assert [capture_from_env({env: v}) for v in ("", "false", "no_content", "event_only")] == [
        False
    ] * 4
    assert capture_from_env({}) is False


def test_a_run_not_halted_has_its_steps_and_no_root(tmp_path: Path, server: ModelServer) -> None:
    record = openai_run(tmp_path, server)
    row, events = journaled(tmp_path / "j.db", record.run_id)
    spans = build_trace(attrs.evolve(row, record=None, status="paused"), events, TraceOptions())
    assert spans
    assert all(s.parent_id is not None for s in spans)
    assert {s.parent_id for s in spans if s.name.startswith("transition")} == {
        build_trace(row, events, TraceOptions())[0].span_id
    }


class RaisingModel:
    """The `openai:` adapter, and an operator who raises the run's step cap while its first
    model call is made (the run applies it before its next one)."""

    def __init__(self, inner: Any, db: Path) -> None:
        self.inner, self.db = inner, db
        self.lane, self.model = inner.lane, inner.model

    def __call__(self, prompt: Any) -> Any:
        if prompt.step == 1:
            store = SqliteStore(self.db)
            store.add_control(Control(id=0, run_id="op-run", kind="raise_budget",
                                      payload={"max_steps": 12}, who="alice", why="more room",
                                      at=now_iso()))  # fmt: skip
            store.close()
        return self.inner(prompt)


def test_operator_acts_and_handoffs_are_events_on_the_root(
    tmp_path: Path, server: ModelServer
) -> None:
    db = tmp_path / "j.db"
    handoff = reply({"content": json.dumps({"handoff": {"why": "need the vault key"}})}, 2)
    server.play(call("lookup", {"q": "password"}, 1), handoff)
    model = RaisingModel(load_model("openai:test-model", endpoint=Endpoint(server.base_url)), db)
    record = run("agent_loop", task=TASK, model=model, tools=load_tools(LAB_TOOLS),
                 allow=LAB_ALLOW, store=db, run_id="op-run", handle_signals=False)  # fmt: skip
    spans = build_trace(*journaled(db, record.run_id), TraceOptions())
    root = spans[0]
    assert root.attributes["fsm_agent.halt.reason"] == HaltReason.HANDOFF_REQUESTED.value
    assert (root.status, "error.type" in root.attributes) == ("unset", False)  # not an error
    assert root.attributes["fsm_agent.budgets.max_steps"] == 12
    names = [e.name for e in root.events]
    assert names == ["fsm_agent.operator", "fsm_agent.handoff"]
    act = root.events[0].attributes
    assert act["fsm_agent.operator.act"] == "raise_budget"
    assert "alice" in str(act["fsm_agent.note"])
    assert root.events[1].attributes["fsm_agent.handoff.state"] == "drafting"
    assert "need the vault key" not in strings(spans)  # the model's words: content only
    with_content = build_trace(*journaled(db, "op-run"), TraceOptions(content=True))
    assert "need the vault key" in strings(with_content)


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "recorded_v1").glob("*.json")))
def test_a_journal_recorded_before_usage_was_kept_builds(name: str) -> None:
    run_file = read_run_file(ROOT / "recorded_v1" / name)
    row = attrs.evolve(run_file.run, record=run_file.record)
    spans = build_trace(row, list(run_file.events), TraceOptions(content=True))
    root = spans[0]
    assert root.name == f"invoke_agent {row.machine}"
    assert root.parent_id is None
    chats = [s for s in spans if s.name.startswith("chat")]
    assert chats
    assert all(s.name == "chat" for s in chats)  # no model named in old journals
    assert all(s.attributes["gen_ai.provider.name"] == "unknown" for s in chats)
    assert all("gen_ai.usage.input_tokens" not in s.attributes for s in spans)
    assert all(s.start_ns <= s.end_ns for s in spans)
