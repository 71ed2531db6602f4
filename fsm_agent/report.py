"""The incident report: one self-contained HTML page a reviewer opens offline.

The halt record comes first, then the machine with the run's path highlighted (inline SVG
from graphviz-pure), the replay verdict (the halt re-proven from the journal), and a timeline
of every transition. No scripts, fonts, images or links: inline CSS only, and a
Content-Security-Policy that forbids fetching anything. Every string from the journal is
escaped — model text is hostile input — and the SVG is checked before it is embedded.
Output is deterministic: the same journal gives the same bytes.
"""

from __future__ import annotations

import html
import json
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from fsm_agent.budgets import dollars
from fsm_agent.chain import ChainReport
from fsm_agent.diagram import run_path, to_svg
from fsm_agent.edges import taken_transition
from fsm_agent.errors import FsmAgentError
from fsm_agent.halt import HaltReason
from fsm_agent.journal import Event, GuardResult, RunRow
from fsm_agent.proposals import FinalAnswer, HandoffRequest, Proposal, Rejection, ToolCall
from fsm_agent.receipts import Receipt, receipt_ok
from fsm_agent.record import HaltRecord, atomic_write_text
from fsm_agent.replay import ReplayReport, replay_events, with_chain
from fsm_agent.replay_view import format_step
from fsm_agent.snapshot import SUCCESS_RULES, ToolOutcome
from fsm_agent.spec import MachineSpec, parse_machine

REPLY_EXCERPT = 600
#: What a tool returned, as the timeline shows it (the journal has all of it).
OBSERVATION_EXCERPT = 400
#: What Graphviz (and graphviz-pure, its port) draws with; anything else is refused.
_SVG_TAGS = frozenset({"svg", "g", "title", "polygon", "polyline", "ellipse", "path", "text"})
_PROLOG = re.compile(r"<\?xml.*?\?>|<!DOCTYPE[^>]*>|<!--.*?-->", re.DOTALL)
_PT = re.compile(r'\b(width|height)="([0-9.]+)pt"')
_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

CSS = """
:root { --ink: #111827; --muted: #4b5563; --line: #d1d5db; --ok: #166534; --ok-bg: #dcfce7;
  --bad: #991b1b; --bad-bg: #fee2e2; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1400px; padding: 1.25rem 1.5rem 3rem; color: var(--ink);
  font: 15px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; }
h1 { font-size: 1.5rem; margin: 0 0 .25rem; }
h2 { font-size: 1.15rem; margin: 1.75rem 0 .5rem; border-bottom: 2px solid var(--line); }
.sub { color: var(--muted); margin: 0; overflow-wrap: anywhere; }
code, pre, .mono { font: .85em ui-monospace, "DejaVu Sans Mono", Menlo, monospace; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; margin: .2rem 0; padding: .3rem .45rem;
  background: #f9fafb; border: 1px solid #e5e7eb; border-radius: 4px; }
.badge { display: inline-block; padding: .1rem .55rem; border-radius: 999px; font-weight: 700;
  border: 1px solid currentColor; white-space: nowrap; }
.ok { color: var(--ok); background: var(--ok-bg); } .halt { font-size: 1.25rem; }
.bad { color: var(--bad); background: var(--bad-bg); } .t, .f { font-weight: 600; }
.t { color: var(--ok); } .f { color: var(--bad); }
dl.record { display: grid; grid-template-columns: max-content 1fr; gap: .3rem 1.25rem; }
dl.record dt { color: var(--muted); } dl.record dd { margin: 0; overflow-wrap: anywhere; }
table { border-collapse: collapse; width: 100%; margin: .5rem 0; }
th, td { border: 1px solid var(--line); padding: .3rem .45rem; vertical-align: top;
  text-align: left; overflow-wrap: anywhere; }
th { background: #f3f4f6; } tr.halt-bad td { background: var(--bad-bg); }
tr.halt-ok td { background: var(--ok-bg); }
th, td.num, td.edge, .nowrap { white-space: nowrap; } td.num { text-align: right; }
ul.guards { list-style: none; margin: 0; padding: 0; } .muted { color: var(--muted); }
ul.guards li { padding: 0 .3rem; border-radius: 3px; }
li.g-ruled, li.g-ruled .t, li.g-ruled .f { color: var(--muted); font-weight: 400; }
li.g-took { background: #dbeafe; } li.g-done { background: var(--ok-bg); font-weight: 700; }
li.g-halt { background: #fecaca; color: var(--bad); font-weight: 700;
  outline: 2px solid var(--bad); }
li.g-took .t, li.g-took .f, li.g-done .t, li.g-done .f, li.g-halt .t, li.g-halt .f {
  color: inherit; }
figure { margin: .5rem 0; overflow-x: auto; border: 1px solid var(--line); border-radius: 6px;
  padding: .5rem; background: #eff6ff; }
figure svg { display: block; max-width: none; } figcaption { color: var(--muted); }
#zoom:checked ~ figure svg { width: 100%; height: auto; }
label { cursor: pointer; }
@page { size: A4 landscape; margin: 12mm; }
@media print {
  body { max-width: none; padding: 0; font-size: 9.5pt; }
  * { print-color-adjust: exact; -webkit-print-color-adjust: exact; }
  figure { overflow: visible; break-inside: avoid; } #zoom, #zoom + label { display: none; }
  figure svg { width: 100%; height: auto; }
  h2 { break-after: avoid; } tr, pre, dl.record { break-inside: avoid; }
}
"""


def _esc(value: object) -> str:
    """Any value from the journal as HTML text (quotes included: safe in attributes too)."""
    return html.escape(value if isinstance(value, str) else str(value), quote=True)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=repr)


def _excerpt(value: Any, limit: int = REPLY_EXCERPT) -> str:
    text = value if isinstance(value, str) else _json(value)
    if len(text) <= limit:
        return text
    return text[:limit] + f"… ({len(text)} chars, journal has all)"


def safe_svg(svg: str) -> str:
    """Graphviz's SVG ready to inline: no prolog, doctype or comments, and only the
    elements Graphviz draws with — no script, foreign object, link or event handler."""
    body = _PROLOG.sub("", svg).strip()
    try:
        root = ET.fromstring(body)  # noqa: S314 - our own Graphviz output; checked below
    except ET.ParseError as exc:
        raise FsmAgentError(f"Graphviz produced SVG that is not well-formed: {exc}") from exc
    for el in root.iter():
        tag = el.tag.rpartition("}")[2]
        names = [a.rpartition("}")[2].lower() for a in el.attrib]
        if tag not in _SVG_TAGS or any(n.startswith("on") or "href" in n for n in names):
            raise FsmAgentError(f"refusing to embed the diagram: unexpected <{tag}> {names}")
    if not body.startswith("<svg") or "<script" in body.lower() or "<!" in body:
        raise FsmAgentError("refusing to embed the diagram: it is not plain SVG")
    return body


def _pre(text: str | None) -> str:
    return "" if text is None else f"<pre>{_esc(text)}</pre>"


def _badge(text: str, ok: bool, extra: str = "") -> str:
    return f'<span class="badge {"ok" if ok else "bad"}{extra}">{_esc(text)}</span>'


def _dl(rows: Iterable[tuple[str, str]]) -> str:
    items = "".join(f"<dt>{_esc(k)}</dt><dd>{v}</dd>" for k, v in rows)
    return f'<dl class="record">{items}</dl>'


def _receipts(receipts: Sequence[Receipt]) -> str:
    if not receipts:
        return '<span class="muted">no receipts</span>'
    return "<br>".join(
        f'<span class="mono{"" if receipt_ok(r) else " bad"}">{_esc(r.status)}'
        f" {_esc(r.id or '(no id)')}</span>"
        + (
            f' <span class="muted">key {_esc(r.idempotency_key)}</span>'
            if r.idempotency_key
            else ""
        )
        for r in receipts
    )


def _halt_rows(rec: HaltRecord) -> list[tuple[str, str]]:
    b, m = rec.budgets, rec.meters
    rows = [
        ("halt reason", _badge(rec.halt_reason.value, rec.terminal_state == "done", " halt")),
        ("terminal state", f"<code>{_esc(rec.terminal_state)}</code>"),
        ("steps used / max", f"{rec.steps_used} / {rec.max_steps}"),
        ("wall clock", f"{m.elapsed_ms} ms of {b.wall_clock_ms} ms"),
        ("cost", f"{dollars(m.cost)} of {dollars(b.max_cost)}"),
        ("tool calls", f"{m.tool_calls} (retries {m.retries_used} of {b.max_retries})"),
        ("answer", _pre(rec.answer) or "—"),
    ]
    if rec.grounded_by:
        rows.append(("grounded by", ", ".join(f"<code>{_esc(c)}</code>" for c in rec.grounded_by)))
    if rec.unreceipted:
        pending = "".join(f"<li>{_esc(c)}</li>" for c in rec.unreceipted)
        rows.append(("without complete receipts", f'<ul class="bad">{pending}</ul>'))
    if rec.success_rules < SUCCESS_RULES:
        rows.append(
            ("success rules", f"{rec.success_rules} (recorded before rules {SUCCESS_RULES})")
        )
    rows += [("error", _pre(rec.error))] if rec.error is not None else []
    rows += [("signal", str(rec.signal))] if rec.signal is not None else []
    rows.append(("started / ended", f"{_esc(rec.started_at)} → {_esc(rec.ended_at)}"))
    return rows


def _handoff(rec: HaltRecord) -> str:
    if rec.handoff is None:
        return ""
    p = rec.handoff
    tried = "".join(f"<li>{_esc(t)}</li>" for t in p.tried) or "<li>nothing</li>"
    frozen = _pre(_json(p.frozen_args)) if p.frozen_args is not None else "none"
    rows = [("why", _esc(p.why)), ("tried", f"<ul>{tried}</ul>"), ("frozen args", frozen)]
    if p.state is not None:
        rows.append(
            ("stopped at", f"<code>{_esc(p.state)}</code> on <code>{_esc(p.trigger or '')}</code>")
        )
    if p.guards:
        rows.append(("by guard", ", ".join(f"<code>{_esc(g)}</code>" for g in p.guards)))
    return "<h3>Handoff packet</h3>" + _dl(rows)


def _tool_calls(rec: HaltRecord) -> str:
    """The record's last tool calls, one line each (the timeline has every detail)."""
    items = "".join(
        f"<li>step {c.step}: <code>{_esc(c.name)}</code>{'' if c.side_effect else ' (read)'}"
        f" {_esc(c.status)}"
        f"{' (outcome unknown)' if c.outcome_unknown else ''} · {_receipts(c.receipts)}"
        f"{_pre(_excerpt(c.args))}{_pre(c.error)}</li>"
        for c in rec.tool_calls
    )
    if rec.tool_calls_omitted:
        items = f"<li>{rec.tool_calls_omitted} earlier calls omitted</li>{items}"
    return f"<h3>Tool calls</h3><ul>{items}</ul>" if items else ""


def _halt_section(run: RunRow) -> str:
    rec = run.record
    if rec is None:
        note = f"no halt record: the run is {run.status} in state {run.state} (killed or live)"
        return f'<section id="halt"><h2>Halt record</h2><p>{_badge(note, False)}</p></section>'
    body = _dl(_halt_rows(rec)) + _handoff(rec) + _tool_calls(rec)
    return f'<section id="halt"><h2>Halt record</h2>{body}</section>'


def _diagram_section(spec: MachineSpec, run: RunRow, events: Sequence[Event]) -> str:
    svg = safe_svg(to_svg(spec, run_path(spec, run.run_id, events)))
    svg = _PT.sub(r'\1="\2"', svg, count=2)  # reading size: Graphviz's points as pixels (75%)
    caption = (
        "Blue: states visited and edges taken (with the steps they were taken at); red: "
        "the halt state. Grey edges were not taken; dashed edges are the implicit budget halts."
    )
    return (
        f'<section id="diagram"><h2>Machine <code>{_esc(spec.name)}</code> and the path taken'
        '</h2><input type="checkbox" id="zoom"><label for="zoom"> fit to width (an overview;'
        " by default the diagram is at reading size and scrolls sideways)</label>"
        f"<figure>{svg}<figcaption>{_esc(caption)}</figcaption></figure></section>"
    )


def _verdict(report: ReplayReport) -> tuple[str, bool]:
    """Proven: replay re-made every decision and reached the recorded halt."""
    if report.recorded_halt is None:  # a live or killed run: nothing to prove yet
        return "has no halt to prove", False
    return ("proven from the journal", True) if report.ok else ("NOT proven", False)


def _replay_section(report: ReplayReport) -> str:
    verdict, proven = _verdict(report)
    rows = [
        ("verdict", _badge(f"replay: {verdict}", proven)),
        ("summary", _esc(report.summary)),
        ("recorded halt", _esc(report.recorded_halt or "—")),
        ("recomputed halt", _esc(report.recomputed_halt or "—")),
        ("machine sha256", f"<code>{_esc(report.machine_sha256)}</code>"),
    ]
    if not proven and report.steps:
        rows.append(("first difference", _pre(format_step(report.steps[-1]))))
    return f'<section id="replay"><h2>Replay verification</h2>{_dl(rows)}</section>'


def _guard_item(g: GuardResult, what: str, css: str) -> str:
    result = '<span class="t">true</span>' if g.result else '<span class="f">false</span>'
    return f'<li class="{css}"><code>{_esc(g.guard)}</code> {result} <span>{_esc(what)}</span></li>'


def _guards(spec: MachineSpec, ev: Event) -> str:
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
        f"<code>{_esc(t.name)}</code> {_esc(t.status)}{unknown}"
        f' <span class="muted">{_esc(t.duration_ms)} ms</span>',
        _pre(_excerpt(t.args)),
        _receipts(t.receipts),
        f'<span class="muted">returned</span>{_pre(_excerpt(t.observation, OBSERVATION_EXCERPT))}'
        if t.observation is not None
        else "",
        _pre(t.error),
    ]
    return "".join(f"<div>{p}</div>" for p in parts if p)


def _facts(ev: Event) -> str:
    f = ev.facts
    if f is None:
        return _esc(ev.note or "")
    parts = []
    if f.action == "model":
        parts.append(_pre(_excerpt(f.reply)))
        if (parsed := _proposal(ev.snapshot.proposal)) != "":
            parts.append(f'<span class="muted">parsed as {_esc(parsed)}</span>')
    elif f.tool is not None:
        parts.append(_tool(f.tool))
    else:
        parts.append(f'<span class="muted">{_esc(f.action)}</span>')
    if f.tool is None:
        parts.append(_pre(f.error))
    if ev.note:
        parts.append(f'<span class="muted">{_esc(ev.note)}</span>')
    return "".join(f"<div>{p}</div>" for p in parts if p)


def _row(spec: MachineSpec, ev: Event, verdict: str | None) -> str:
    m, b = ev.snapshot.meters, ev.snapshot.budgets
    edge = f"{ev.source or 'start'} → {ev.dest}"
    trigger = f"<br><code>[{_esc(ev.trigger)}]</code>" if ev.trigger else ""
    halt = f"<br>{_badge('halt: ' + ev.halt.value, ev.dest == 'done')}" if ev.halt else ""
    retry = ' <span class="muted">(retry)</span>' if ev.retry else ""
    meters = "<br>".join(
        (f"tool calls {m.tool_calls}", f"retries {m.retries_used}", dollars(m.cost),
         f"{m.elapsed_ms} ms")
    )  # fmt: skip
    replayed = _badge(verdict, verdict in ("match", "external")) if verdict else "—"
    tr = f'<tr class="halt-{"ok" if ev.dest == "done" else "bad"}">' if ev.halt else "<tr>"
    return (
        f'{tr}<td class="num">{_esc(ev.seq)}</td>'
        f'<td class="num">{_esc(m.steps_used)}/{_esc(b.max_steps)}</td>'
        f'<td class="edge">{_esc(edge)}{trigger}{retry}{halt}</td>'
        f"<td>{_guards(spec, ev)}</td>"
        f'<td>{_facts(ev)}</td><td class="mono nowrap">{meters}</td><td>{replayed}</td></tr>'
    )


def _timeline_section(spec: MachineSpec, events: Sequence[Event], report: ReplayReport) -> str:
    verdicts = {s.seq: s.verdict for s in report.steps}
    head = (
        "<thead><tr><th>seq</th><th>step</th><th>transition</th><th>guards</th>"
        "<th>model reply / tool call</th><th>meters</th><th>replay</th></tr></thead>"
    )
    rows = "".join(_row(spec, ev, verdicts.get(ev.seq)) for ev in events)
    return (
        f'<section id="timeline"><h2>Timeline: {len(events)} journaled transitions</h2>'
        f"<table>{head}<tbody>{rows}</tbody></table></section>"
    )


def _chain_badge(chain: ChainReport | None) -> str:
    if chain is None:  # the caller did not check it (the CLI always does)
        return _badge("chain: not checked", False)
    if chain.ok:
        return _badge(f"chain: ok ({chain.events} events)", True)
    first = chain.findings[0]
    return _badge(f"chain DOES NOT VERIFY at seq {first.seq} ({first.kind})", False)


def _header(run: RunRow, report: ReplayReport, chain: ChainReport | None) -> str:
    verdict, proven = _verdict(report)
    reason = run.halt_reason.value if run.halt_reason else f"no halt ({run.status})"
    return (
        f"<header><h1>Incident report: run <code>{_esc(run.run_id)}</code> — {_esc(reason)}</h1>"
        f'<p class="sub">machine <code>{_esc(run.machine)}</code> '
        f'<span class="muted">sha256 {_esc(run.machine_sha256[:12])}</span> · '
        f"{_badge('replay ' + verdict, proven)} · {_chain_badge(chain)}</p>"
        f'<p class="sub">task: {_esc(run.task)}</p></header>'
    )


def incident_report(run: RunRow, events: Sequence[Event], chain: ChainReport | None = None) -> str:
    """The whole report for one run as one HTML document (see the module docstring).

    Raises `diagram.GraphvizMissing` when no SVG renderer is installed, and `FsmAgentError`
    when the journaled declaration no longer loads or the renderer's SVG is refused.
    """
    spec = parse_machine(run.machine_text, source=f"journal:{run.run_id}")
    report = with_chain(replay_events(run, events), chain)
    diagram = _diagram_section(spec, run, events)
    reason = run.halt_reason.value if run.halt_reason else run.status
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>fsm-agent incident {_esc(run.run_id)}: {_esc(reason)}</title>\n"
        f"<style>{CSS}</style></head>\n<body>\n{_header(run, report, chain)}\n"
        f"{_halt_section(run)}\n"
        f"{diagram}\n{_replay_section(report)}\n{_timeline_section(spec, events, report)}\n"
        "<footer class='muted'><p>Written by fsm-agent from the journal alone; "
        "every string above is journal data shown as text.</p></footer>\n</body></html>\n"
    )


def write_report(html_text: str, path: str | os.PathLike[str]) -> Path:
    """Write a report atomically at `path` (see `record.atomic_write_text`); made for
    review, it follows the umask."""
    return atomic_write_text(path, html_text, private=False)
