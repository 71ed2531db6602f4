"""The incident report's timeline: one row per journaled transition, its guards coloured by
what they did, the model reply or the tool call with its receipts and what it returned."""

from __future__ import annotations

from collections.abc import Sequence

from fsm_agent.declaration.edges import taken_transition
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.halt import HaltReason
from fsm_agent.journal.store import Event, GuardResult
from fsm_agent.review.replay import ReplayReport
from fsm_agent.review.report_html import (
    OBSERVATION_EXCERPT,
    badge,
    esc,
    excerpt,
    pre,
    receipts_html,
)
from fsm_agent.review.usage import call_text
from fsm_agent.runtime.budgets import dollars
from fsm_agent.runtime.proposals import FinalAnswer, HandoffRequest, Proposal, Rejection, ToolCall
from fsm_agent.runtime.snapshot import ToolOutcome


def _guard_item(g: GuardResult, what: str, css: str) -> str:
    result = '<span class="t">true</span>' if g.result else '<span class="f">false</span>'
    return f'<li class="{css}"><code>{esc(g.guard)}</code> {result} <span>{esc(what)}</span></li>'


def guards_list(spec: MachineSpec, ev: Event) -> str:
    """Each guard evaluated, coloured by what it did: the guards of the edge taken stand out
    (red when that edge stopped the run, green when it completed it, blue otherwise); guards
    of candidates ruled out are muted; the budget check on entry is muted unless it
    tripped."""
    taken = taken_transition(spec, ev)
    by_index = {t.index: t for t in spec.transitions}
    items = []
    for g in ev.guards:
        t = by_index.get(g.transition)
        dest = t.dest if t is not None else "?"
        if taken is not None and g.transition == taken.index:
            if taken.halt is None:
                items.append(_guard_item(g, f"→ {dest}: taken", "g-took"))
            elif taken.halt is HaltReason.COMPLETED:
                items.append(_guard_item(g, "completed the run", "g-done"))
            else:
                items.append(_guard_item(g, f"stopped the run: {taken.halt.value}", "g-halt"))
        else:
            items.append(_guard_item(g, f"→ {dest}: not taken", "g-ruled"))
    for g in ev.check:
        items.append(_guard_item(g, "budget tripped on entry" if g.result else "budget: ok",
                                 "g-halt" if g.result else "g-ruled"))  # fmt: skip
    return f'<ul class="guards">{"".join(items)}</ul>' if items else ""


def _proposal(p: Proposal | None) -> str:
    if isinstance(p, ToolCall):
        return f"tool call {p.name}"
    if isinstance(p, FinalAnswer):
        return "final answer"
    if isinstance(p, HandoffRequest):
        return f"handoff: {p.why}"
    if isinstance(p, Rejection):
        return f"rejected ({p.kind}): {p.detail}"
    return ""


def _tool(t: ToolOutcome) -> str:
    unknown = " (outcome unknown)" if t.outcome_unknown else ""
    parts = [
        f"<code>{esc(t.name)}</code> {esc(t.status)}{unknown}"
        f' <span class="muted">{esc(t.duration_ms)} ms</span>',
        pre(excerpt(t.args)),
        receipts_html(t.receipts),
        f'<span class="muted">returned</span>{pre(excerpt(t.observation, OBSERVATION_EXCERPT))}'
        if t.observation is not None
        else "",
        pre(t.error),
    ]
    return "".join(f"<div>{p}</div>" for p in parts if p)


def _facts(ev: Event) -> str:
    f = ev.facts
    if f is None:
        return esc(ev.note or "")
    parts = []
    if f.action == "model":
        parts.append(pre(excerpt(f.reply)))
        if f.usage is not None:
            parts.append(f'<span class="muted">{esc(call_text(f.usage, f.reply_cost))}</span>')
        if (parsed := _proposal(ev.snapshot.proposal)) != "":
            parts.append(f'<span class="muted">parsed as {esc(parsed)}</span>')
    elif f.tool is not None:
        parts.append(_tool(f.tool))
    else:
        parts.append(f'<span class="muted">{esc(f.action)}</span>')
    if f.tool is None:
        parts.append(pre(f.error))
    if ev.note:
        parts.append(f'<span class="muted">{esc(ev.note)}</span>')
    return "".join(f"<div>{p}</div>" for p in parts if p)


def _row(spec: MachineSpec, ev: Event, verdict: str | None) -> str:
    m, b = ev.snapshot.meters, ev.snapshot.budgets
    edge = f"{ev.source or 'start'} → {ev.dest}"
    trigger = f"<br><code>[{esc(ev.trigger)}]</code>" if ev.trigger else ""
    halt = f"<br>{badge('halt: ' + ev.halt.value, ev.dest == 'done')}" if ev.halt else ""
    retry = ' <span class="muted">(retry)</span>' if ev.retry else ""
    meters = "<br>".join(
        (f"tool calls {m.tool_calls}", f"retries {m.retries_used}", dollars(m.cost),
         f"{m.elapsed_ms} ms")
    )  # fmt: skip
    replayed = badge(verdict, verdict in ("match", "external")) if verdict else "—"
    css = f' class="halt-{"ok" if ev.dest == "done" else "bad"}"' if ev.halt else ""
    tr = f'<tr id="seq-{ev.seq}" data-seq="{ev.seq}"{css}>'
    return (
        f'{tr}<td class="num">{esc(ev.seq)}</td>'
        f'<td class="num">{esc(m.steps_used)}/{esc(b.max_steps)}</td>'
        f'<td class="edge">{esc(edge)}{trigger}{retry}{halt}</td>'
        f"<td>{guards_list(spec, ev)}</td>"
        f'<td>{_facts(ev)}</td><td class="mono nowrap">{meters}</td><td>{replayed}</td></tr>'
    )


def timeline_section(
    spec: MachineSpec,
    events: Sequence[Event],
    report: ReplayReport,
    shown: range | None = None,
    pager: str = "",
) -> str:
    """The timeline: a row per event, or only those whose seq is in `shown` (the console's
    page of a long run), with `pager` (its links to the other pages) above the rows."""
    verdicts = {s.seq: s.verdict for s in report.steps}
    head = (
        "<thead><tr><th>seq</th><th>step</th><th>transition</th><th>guards</th>"
        "<th>model reply / tool call</th><th>meters</th><th>replay</th></tr></thead>"
    )
    picked = events if shown is None else [ev for ev in events if ev.seq in shown]
    rows = "".join(_row(spec, ev, verdicts.get(ev.seq)) for ev in picked)
    return (
        f'<section id="timeline"><h2>Timeline: {len(events)} journaled transitions</h2>'
        f"{pager}<table>{head}<tbody>{rows}</tbody></table></section>"
    )
