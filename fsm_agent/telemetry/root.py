"""A run's root span (`invoke_agent <machine>`), and a whole run as one trace.

The root span is made once the run has halted (its halt record is in the journal): from the
run's start to the record's end, with the halt reason, the terminal state, the meters and
the budgets in force as `fsm_agent.*` attributes, the token totals of its model calls, and
as span events each operator act, each resume and the handoff packet. A run that has not
halted yet has its steps' spans and no root: its root comes when it halts (a backend keeps
a span id once, so a root sent early could never be corrected).

Its status is OK when the run completed, ERROR (with `error.type`, the halt reason) only
for the halts that are errors (`fsm_agent.halt.ERROR_HALTS`: a tool failed, the runtime or
its journal did), and UNSET for every other halt: a handoff the policy asked for, a budget
spent or a refusal is the declaration doing its job, not a failure of the run.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from fsm_agent.halt import ERROR_HALTS, HaltReason
from fsm_agent.journal.store import Event, RunRow
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.runtime.usage import ModelUsage, total
from fsm_agent.telemetry.content import TraceOptions, bounded, text_part, text_value
from fsm_agent.telemetry.spans import AttrValue, Span, SpanEvent
from fsm_agent.telemetry.steps import UNKNOWN_PROVIDER, RunSpans, iso_ns


def build_trace(row: RunRow, events: Sequence[Event], options: TraceOptions) -> list[Span]:
    """Every span of a run from its journal: the root (once it has halted), then the steps'."""
    steps = RunSpans(row, options)
    spans = [span for event in events for span in steps.spans(event)]
    root = root_span(row, events, options)
    return spans if root is None else [root, *spans]


def root_span(row: RunRow, events: Sequence[Event], options: TraceOptions) -> Span | None:
    """The run's root span, or None while it has no halt record."""
    record = row.record
    if record is None:
        return None
    ids = RunSpans(row, TraceOptions())
    usages = [e.facts.usage for e in events if e.facts is not None and e.facts.usage]
    attributes = _agent_attributes(row, usages) | _record_attributes(record)
    if options.content:
        attributes["gen_ai.input.messages"] = bounded(
            [{"role": "user", "parts": [text_part(row.task, options)]}], options
        )
        attributes |= text_value("input", row.task, options)
        if record.answer is not None:
            output = {"role": "assistant", "parts": [text_part(record.answer, options)],
                      "finish_reason": "stop"}  # fmt: skip
            attributes["gen_ai.output.messages"] = bounded([output], options)
            attributes |= text_value("output", record.answer, options)
    failed = record.halt_reason in ERROR_HALTS
    if failed:
        attributes["error.type"] = record.halt_reason.value
    why = record.halt_reason.value
    if failed and options.content and record.error:
        why = bounded(f"{why}: {record.error}", options)
    end = max(iso_ns(record.ended_at), iso_ns(row.started_at))
    done = record.halt_reason is HaltReason.COMPLETED
    return Span(
        f"invoke_agent {row.machine}",
        ids.trace_id,
        ids.root_id,
        None,
        iso_ns(row.started_at),
        end,
        attributes=attributes,
        events=(*_journal_events(row, events), *_handoff(record, end, options)),
        status="error" if failed else "ok" if done else "unset",
        status_description=why if failed else None,
    )


def _agent_attributes(row: RunRow, usages: Sequence[ModelUsage]) -> dict[str, AttrValue]:
    """The conventions' attributes of an agent invocation, from the run and its calls."""
    providers = [u.provider for u in usages if u.provider]
    models = [u.request_model for u in usages if u.request_model]
    attributes: dict[str, AttrValue] = {
        "openinference.span.kind": "AGENT",
        "agent.name": row.machine,
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": providers[0] if providers else UNKNOWN_PROVIDER,
        "gen_ai.agent.name": row.machine,
        "gen_ai.conversation.id": row.run_id,
        "fsm_agent.run.id": row.run_id,
        "fsm_agent.machine.sha256": row.machine_sha256,
    }
    if models:
        attributes["gen_ai.request.model"] = models[0]
    totals = total(usages)
    if totals.calls_with_tokens:
        attributes["gen_ai.usage.input_tokens"] = totals.input_tokens
        attributes["gen_ai.usage.output_tokens"] = totals.output_tokens
    attributes["fsm_agent.model_calls"] = totals.calls
    return attributes


def _record_attributes(record: HaltRecord) -> dict[str, AttrValue]:
    """How the run ended, from its halt record: reason, state, meters and budgets."""
    attributes: dict[str, AttrValue] = {
        "fsm_agent.halt.reason": record.halt_reason.value,
        "fsm_agent.terminal_state": record.terminal_state,
        "fsm_agent.success_rules": record.success_rules,
        "fsm_agent.grounded_by": record.grounded_by,
        "fsm_agent.unreceipted_calls": len(record.unreceipted),
    }
    for name, value in attrs.asdict(record.meters).items():
        attributes[f"fsm_agent.meters.{name}"] = value
    for name, value in attrs.asdict(record.budgets).items():
        attributes[f"fsm_agent.budgets.{name}"] = value
    if record.signal is not None:
        attributes["fsm_agent.signal"] = record.signal
    return attributes


def _journal_events(row: RunRow, events: Sequence[Event]) -> list[SpanEvent]:
    """Each operator act, each resume, each person's decision and a fork's start, at the
    time it was journaled."""
    found = []
    for event in events:
        if event.kind not in ("operator", "resumed", "decided", "forked"):
            continue
        attributes: dict[str, AttrValue] = {"fsm_agent.event.seq": event.seq,
                                            "fsm_agent.state": event.dest}  # fmt: skip
        if event.kind == "operator":
            attributes["fsm_agent.operator.act"] = event.trigger or ""
        if event.kind == "decided":
            attributes["fsm_agent.decision"] = event.trigger or ""
        if event.note:
            attributes["fsm_agent.note"] = event.note
        found.append(SpanEvent(f"fsm_agent.{event.kind}", iso_ns(event.wall_time), attributes))
    return found


def _handoff(record: HaltRecord, at_ns: int, options: TraceOptions) -> list[SpanEvent]:
    """The handoff packet as an event at the run's end (its free text with content only)."""
    packet = record.handoff
    if packet is None:
        return []
    attributes: dict[str, AttrValue] = {
        "fsm_agent.handoff.state": packet.state or "",
        "fsm_agent.handoff.trigger": packet.trigger or "",
        "fsm_agent.handoff.guards": packet.guards,
        "fsm_agent.handoff.tried": len(packet.tried),
    }
    if options.content:
        attributes["fsm_agent.handoff.why"] = bounded(packet.why, options)
        if packet.frozen_args is not None:
            attributes["fsm_agent.handoff.frozen_args"] = bounded(packet.frozen_args, options)
    return [SpanEvent("fsm_agent.handoff", at_ns, attributes)]
