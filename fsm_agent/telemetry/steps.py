"""The spans of a run's steps: one per transition, a child per model call and per tool call.

`RunSpans` reads a run's events in order, one at a time, and gives each one's spans: the
journal export feeds it every event, a live run each event as it is journaled — the same
spans with the same ids and times either way. Times come from the journal: an event's
`at_ms` (the run's clock) placed on the wall clock by the `started` or latest `resumed`
event (`wall_time` minus `at_ms`); a step spans from the event before it to its own; a
model call ends with its step and starts `latency_ms` earlier, a tool call `duration_ms`.
"""

from __future__ import annotations

import datetime
import re
from typing import Any, Final

from fsm_agent.journal.store import Event, Facts, RunRow
from fsm_agent.runtime.actions import failure_note, proposal_note, receipts_note
from fsm_agent.runtime.proposals import Proposal, Rejection, ToolCall
from fsm_agent.runtime.snapshot import ToolOutcome
from fsm_agent.runtime.usage import ModelUsage
from fsm_agent.telemetry.content import (
    Message,
    TraceOptions,
    bounded,
    fitted,
    json_value,
    note_message,
    reply_parts,
    text_part,
)
from fsm_agent.telemetry.spans import AttrValue, Span, SpanRole, span_id, trace_id

#: `gen_ai.provider.name` when the adapter named none (a scripted or hand-written model).
UNKNOWN_PROVIDER: Final = "unknown"
#: `error.type` of a failure with no better name (the conventions' fallback).
OTHER_ERROR: Final = "_OTHER"
_FAULT = re.compile(r"model call failed: ([A-Za-z_][A-Za-z0-9_]*):")
#: The conventions' finish reasons of an output message, from an OpenAI-style one.
_FINISH = {"tool_calls": "tool_call", "function_call": "tool_call"}
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def iso_ns(text: str) -> int:
    """An ISO 8601 time as the journal writes it, in nanoseconds since the epoch."""
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return (moment - _EPOCH) // datetime.timedelta(microseconds=1) * 1000


def model_error(facts: Facts) -> str | None:
    """A failed model call's `error.type`: the adapter's fault kind (`timeout`,
    `http_error` …), `timeout` for a call abandoned at the deadline, else `_OTHER`."""
    if facts.error is None:
        return None
    named = _FAULT.match(facts.error)
    if named:
        return named.group(1)
    return "timeout" if "abandoned" in facts.error else OTHER_ERROR


def tool_error(tool: ToolOutcome) -> str | None:
    """A tool call's `error.type`: None when it returned, `timeout` at its time cap, else
    its status (`failed`, `interrupted`)."""
    if tool.status == "returned":
        return None
    return "timeout" if tool.status == "timed_out" else tool.status


class RunSpans:
    """The spans of one run's events, built in the order the run journaled them."""

    def __init__(self, row: RunRow, options: TraceOptions) -> None:
        self.run_id, self.started_at = row.run_id, row.started_at
        self.options = options
        self.trace_id = trace_id(row.run_id, row.started_at)
        self.root_id = span_id(row.run_id, row.started_at, 0, "run")
        self._origin_ns = iso_ns(row.started_at)
        self._previous_ns: int | None = None
        #: the model's conversation so far (content capture only): the task, then the notes
        self.history: list[Message] = []
        if options.content:
            self.history.append({"role": "user", "parts": [text_part(row.task, options)]})

    def _id(self, event: Event, role: SpanRole) -> bytes:
        return span_id(self.run_id, self.started_at, event.seq, role)

    def place(self, event: Event) -> tuple[int, int]:
        """Where `event`'s step lies on the wall clock: (start, end) in ns."""
        if event.kind in ("started", "resumed", "decided", "forked"):  # its clock goes on here
            self._origin_ns = iso_ns(event.wall_time) - event.at_ms * 1_000_000
        end = self._origin_ns + event.at_ms * 1_000_000
        start = self._previous_ns if self._previous_ns is not None else end
        self._previous_ns = end
        return min(start, end), end

    def spans(self, event: Event) -> list[Span]:
        """The spans of `event`: none for `started`, `resumed`, `decided`, `forked` and
        `operator` events (they are the root span's start and events), else its step and the
        calls it made."""
        start, end = self.place(event)
        if event.kind != "transition":
            return []
        step_id = self._id(event, "step")
        found = [self._step(event, step_id, start, end)]
        facts = event.facts
        if facts is not None and facts.action == "model":
            found.append(self._model(event, facts, step_id, start, end))
        elif facts is not None and facts.tool is not None:
            found.append(self._tool(event, facts, facts.tool, step_id, start, end))
        if self.options.content and facts is not None:
            self._remember(event, facts)
        return found

    def _step(self, event: Event, step_id: bytes, start: int, end: int) -> Span:
        snap = event.snapshot
        attributes: dict[str, AttrValue] = {
            "openinference.span.kind": "CHAIN",
            "fsm_agent.run.id": self.run_id,
            "fsm_agent.event.seq": event.seq,
            "fsm_agent.step": snap.meters.steps_used,
            "fsm_agent.transition.source": event.source or "",
            "fsm_agent.transition.dest": event.dest,
            "fsm_agent.transition.trigger": event.trigger or "",
            "fsm_agent.transition.retry": event.retry,
            "fsm_agent.guards": tuple(f"{g.guard}={str(g.result).lower()}" for g in event.guards),
            "fsm_agent.meters.cost": snap.meters.cost,
        }
        if event.facts is not None:
            attributes["fsm_agent.action"] = event.facts.action
        if event.halt is not None:
            attributes["fsm_agent.halt.reason"] = event.halt.value
        if event.note and self.options.content:
            attributes["fsm_agent.note"] = bounded(event.note, self.options)
        name = f"transition {event.source} -> {event.dest}"
        return Span(name, self.trace_id, step_id, self.root_id, start, end,
                    attributes=attributes)  # fmt: skip

    def _model(self, event: Event, facts: Facts, parent: bytes, start: int, end: int) -> Span:
        usage = facts.usage or ModelUsage()
        attributes = model_attributes(usage, self.run_id)
        attributes["fsm_agent.cost"] = facts.reply_cost
        attributes["llm.cost.total"] = facts.reply_cost
        proposal = event.snapshot.proposal
        attributes["fsm_agent.proposal"] = (
            proposal.kind if isinstance(proposal, Rejection) else event.trigger or ""
        )
        error = model_error(facts)
        if error is not None:
            attributes["error.type"] = error
        if self.options.content:
            parts = reply_parts(proposal, facts.reply, self.options)
            output = {"role": "assistant", "parts": parts,
                      "finish_reason": _finish(usage, proposal, error)}  # fmt: skip
            messages = fitted(self.history), bounded([output], self.options)
            attributes["gen_ai.input.messages"], attributes["gen_ai.output.messages"] = messages
            attributes |= json_value("input", messages[0]) | json_value("output", messages[1])
        began = max(start, end - usage.latency_ms * 1_000_000) if facts.usage else start
        name = f"chat {usage.request_model}" if usage.request_model else "chat"
        return Span(name, self.trace_id, self._id(event, "model"), parent, began, end,
                    kind="client", attributes=attributes, **_status(error, facts.error,
                    self.options))  # fmt: skip

    def _tool(
        self, event: Event, facts: Facts, tool: ToolOutcome, parent: bytes, start: int, end: int
    ) -> Span:
        attributes: dict[str, AttrValue] = {
            "openinference.span.kind": "TOOL",
            "tool.name": tool.name,
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool.name,
            "gen_ai.tool.type": "function",
            "fsm_agent.tool.kind": "tool" if facts.action == "tool" else "action",
            "fsm_agent.tool.status": tool.status,
            "fsm_agent.tool.side_effect": tool.side_effect,
            "fsm_agent.tool.outcome_unknown": tool.outcome_unknown,
            "fsm_agent.tool.receipt_statuses": tuple(r.status for r in tool.receipts),
            "fsm_agent.cost": tool.cost,
        }
        error = tool_error(tool)
        if error is not None:
            attributes["error.type"] = error
        if self.options.content:
            args = bounded(tool.args, self.options)
            attributes["gen_ai.tool.call.arguments"] = args
            attributes |= json_value("input", args)
            if tool.status == "returned":
                result = bounded({"observation": tool.observation, "final": tool.final},
                                 self.options)  # fmt: skip
                attributes["gen_ai.tool.call.result"] = result
                attributes |= json_value("output", result)
        began = max(start, end - tool.duration_ms * 1_000_000)
        return Span(f"execute_tool {tool.name}", self.trace_id, self._id(event, "tool"), parent,
                    began, end, attributes=attributes,
                    **_status(error, tool.error, self.options))  # fmt: skip

    def _remember(self, event: Event, facts: Facts) -> None:
        """Add what this step told the model to the conversation (as resume rebuilds it)."""
        snap = event.snapshot
        note = None
        if facts.action == "model" and snap.proposal is not None:
            note = proposal_note(snap.proposal)
        elif facts.action == "receipts" and snap.tool is not None:
            note = receipts_note(snap.tool) if snap.tool.status == "returned" else None
        elif facts.action == "tool" and facts.tool is not None:
            note = failure_note(facts.tool)
        if note is not None:
            self.history.append(note_message(note, self.options))


def _finish(usage: ModelUsage, proposal: Proposal | None, error: str | None) -> str:
    """An output message's `finish_reason`: the server's (`tool_calls` as the conventions'
    `tool_call`), else what the reply was (`tool_call`, `error`, `stop`)."""
    if usage.finish_reason:
        return _FINISH.get(usage.finish_reason, usage.finish_reason)
    if error is not None:
        return "error"
    return "tool_call" if isinstance(proposal, ToolCall) else "stop"


def model_attributes(usage: ModelUsage, run_id: str) -> dict[str, AttrValue]:
    """A model call's `gen_ai.*` attributes, and OpenInference's `llm.*` beside them (what
    Phoenix reads and prices: the model, its provider, the token counts): the ones its
    usage knows."""
    attributes: dict[str, AttrValue] = {
        "openinference.span.kind": "LLM",
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": usage.provider or UNKNOWN_PROVIDER,
        "gen_ai.conversation.id": run_id,
    }
    optional: dict[str, Any] = {
        "gen_ai.request.model": usage.request_model,
        "gen_ai.response.model": usage.response_model,
        "gen_ai.response.id": usage.response_id,
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
    }
    tokens = (usage.input_tokens, usage.output_tokens)
    optional |= {
        "llm.model_name": usage.response_model or usage.request_model,
        "llm.provider": usage.provider,
        "llm.system": usage.provider,
        "llm.token_count.prompt": usage.input_tokens,
        "llm.token_count.completion": usage.output_tokens,
        "llm.token_count.total": None if None in tokens else sum(t or 0 for t in tokens),
    }
    attributes.update({k: v for k, v in optional.items() if v is not None})
    if usage.finish_reason is not None:
        attributes["gen_ai.response.finish_reasons"] = (usage.finish_reason,)
    if usage.latency_ms:
        attributes["fsm_agent.latency_ms"] = usage.latency_ms
    return attributes


def _status(error: str | None, detail: str | None, options: TraceOptions) -> dict[str, Any]:
    """A call's span status: ERROR with its `error.type` (and, with content capture, the
    error's text), else UNSET."""
    if error is None:
        return {}
    shown = bounded(detail, options) if options.content and detail else error
    return {"status": "error", "status_description": shown}
