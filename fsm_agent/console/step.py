"""One journaled transition as the run page's step viewer shows it, readable: what was
decided (the guards, as the timeline colours them), the model's reply or the tool call with
its arguments, receipts and what it returned, the meters against their budgets and the rest
of the snapshot, each value as text in a table, not JSON. The event as journaled is there
too, folded away. Every journal string goes through `esc`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.journal import serde
from fsm_agent.journal.store import Event
from fsm_agent.review.report_html import badge, dl, esc, json_text, pre, receipts_html
from fsm_agent.review.report_timeline import guards_list
from fsm_agent.review.usage import call_text
from fsm_agent.review.view import call_kind
from fsm_agent.runtime.budgets import dollars
from fsm_agent.runtime.proposals import FinalAnswer, HandoffRequest, Rejection, ToolCall
from fsm_agent.runtime.snapshot import Snapshot, ToolOutcome

#: Nested values deeper than this are shown as one line of JSON text.
DEPTH = 4
#: Snapshot fields shown elsewhere in the step (or that say nothing on their own).
SHOWN_ELSEWHERE = frozenset({"state", "budgets", "meters", "proposal", "tool"})


def value_html(value: Any, depth: int = 0) -> str:
    """A journal value as text: a mapping as a two-column table, a list as a numbered
    list, a string as it is (line breaks kept), anything else as its JSON spelling."""
    if isinstance(value, Mapping) and value and depth < DEPTH:
        rows = "".join(
            f"<tr><th>{esc(k)}</th><td>{value_html(v, depth + 1)}</td></tr>"
            for k, v in value.items()
        )
        return f'<table class="kv">{rows}</table>'
    if isinstance(value, list | tuple) and value and depth < DEPTH:
        items = "".join(f"<li>{value_html(v, depth + 1)}</li>" for v in value)
        return f'<ol class="kv">{items}</ol>'
    if isinstance(value, str):
        return f'<span class="text">{esc(value)}</span>'
    return f"<code>{esc(json_text(value))}</code>"


def _head(ev: Event) -> str:
    m, b = ev.snapshot.meters, ev.snapshot.budgets
    edge = f"{ev.source or 'start'} → {ev.dest}"
    trigger = f" on <code>{esc(ev.trigger)}</code>" if ev.trigger else ""
    halt = f" {badge('halt: ' + ev.halt.value, ev.dest == 'done')}" if ev.halt else ""
    retry = ' <span class="muted">(a retry)</span>' if ev.retry else ""
    return (
        f'<p class="step-head"><strong>seq {ev.seq}</strong> · {esc(ev.kind)} · step'
        f" {m.steps_used}/{b.max_steps} · <code>{esc(edge)}</code>{trigger}{retry}{halt}"
        f' <span class="muted">{esc(ev.wall_time)}</span></p>'
    )


def _proposal(snap: Snapshot) -> str:
    p = snap.proposal
    if isinstance(p, ToolCall):
        return f"a call of <code>{esc(p.name)}</code> with{value_html(p.args)}"
    if isinstance(p, FinalAnswer):
        return f"the final answer {pre(p.text)}"
    if isinstance(p, HandoffRequest):
        return f"a handoff: {esc(p.why)}"
    if isinstance(p, Rejection):
        return f"rejected ({esc(p.kind)}): {esc(p.detail)}"
    return ""


def _tool(t: ToolOutcome) -> str:
    unknown = " (outcome unknown)" if t.outcome_unknown else ""
    kind = call_kind(t.side_effect, t.status, t.error) or " (side effect)"
    rows = [
        ("tool", f"<code>{esc(t.name)}</code>{esc(kind)}"),
        ("arguments", value_html(t.args) if t.args else '<span class="muted">none</span>'),
        ("status", f"{esc(t.status)}{esc(unknown)} in {esc(t.duration_ms)} ms"),
        ("receipts", receipts_html(t.receipts)),
    ]
    if t.observation is not None:
        rows.append(("returned", value_html(t.observation)))
    if t.final is not None:
        rows.append(("final", pre(t.final)))
    if t.error is not None:
        rows.append(("error", pre(t.error)))
    if t.cost:
        rows.append(("cost", dollars(t.cost)))
    return "<h3>Tool call</h3>" + dl(rows)


def _action(ev: Event) -> str:
    f = ev.facts
    if f is None:
        return ""
    if f.action == "model":
        rows = [("reply", value_html(f.reply))]
        if f.usage is not None:
            rows.append(("model call", esc(call_text(f.usage, f.reply_cost))))
        if f.repaired is not None:
            rows.append(("repaired as", value_html(f.repaired)))
        if (proposed := _proposal(ev.snapshot)) != "":
            rows.append(("parsed as", proposed))
        if f.error is not None:
            rows.append(("error", pre(f.error)))
        return "<h3>Model reply</h3>" + dl(rows)
    if f.tool is not None:
        return _tool(f.tool)
    rows = [("action", f"<code>{esc(f.action)}</code>")]
    if f.error is not None:
        rows.append(("error", pre(f.error)))
    return "<h3>Action</h3>" + dl(rows)


def _meters(snap: Snapshot) -> str:
    m, b = snap.meters, snap.budgets
    rows = (
        ("steps", str(m.steps_used), str(b.max_steps)),
        ("retries", str(m.retries_used), str(b.max_retries)),
        ("tool calls", str(m.tool_calls), "—"),
        ("cost", dollars(m.cost), dollars(b.max_cost)),
        ("wall clock", f"{m.elapsed_ms} ms", f"{b.wall_clock_ms} ms"),
    )
    body = "".join(
        f'<tr><th>{name}</th><td class="num">{esc(used)}</td><td class="num">{esc(cap)}</td></tr>'
        for name, used, cap in rows
    )
    return (
        '<h3>Meters</h3><table class="meters"><thead><tr><th>meter</th><th>used</th>'
        f"<th>budget</th></tr></thead><tbody>{body}</tbody></table>"
    )


def _said(value: Any) -> bool:
    """Whether a snapshot field says anything (empty, zero, none and false say nothing)."""
    return value not in (None, (), [], {}, False, 0, "none", "")


def _snapshot(snap: Snapshot) -> str:
    data = serde.unstructure(snap)
    rows = [("state", f"<code>{esc(snap.state)}</code>")]
    rows += [
        (name, value_html(value))
        for name, value in data.items()
        if name not in SHOWN_ELSEWHERE and _said(value)
    ]
    return "<h3>Snapshot</h3>" + dl(rows)


def step_html(spec: MachineSpec, ev: Event) -> str:
    """The step viewer's body for one journaled transition."""
    guards = guards_list(spec, ev)
    decided = f"<h3>Guards</h3>{guards}" if guards else ""
    note = f'<p class="note">{esc(ev.note)}</p>' if ev.note else ""
    raw = json_text(serde.unstructure(ev))
    return (
        f'<div class="step" data-seq="{ev.seq}">{_head(ev)}{note}'
        f'<div class="step-parts"><div>{decided}{_action(ev)}</div>'
        f"<div>{_meters(ev.snapshot)}{_snapshot(ev.snapshot)}</div></div>"
        "<details><summary>the event as journaled (JSON)</summary>"
        f"{pre(raw)}</details></div>"
    )
