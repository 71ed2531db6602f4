"""The incident report: one self-contained HTML page a reviewer opens offline.

The halt record comes first, then the machine with the run's path highlighted (inline SVG
from graphviz-pure), the replay verdict (the halt re-proven from the journal), and a timeline
of every transition. No scripts, fonts, images or links: inline CSS only, and a
Content-Security-Policy that forbids fetching anything. Every string from the journal is
escaped — model text is hostile input — and the SVG is checked before it is embedded.
Output is deterministic: the same journal gives the same bytes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from fsm_agent.declaration.load import parse_machine
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.halt import ERROR_HALTS
from fsm_agent.journal.chain import ChainReport
from fsm_agent.journal.store import Event, RunRow
from fsm_agent.review.diagram import path_of_run, to_svg
from fsm_agent.review.lineage import ParentFacts, fork_html, fork_view
from fsm_agent.review.replay import ReplayReport, replay_events, with_chain
from fsm_agent.review.report_html import (
    CSP,
    CSS,
    PT_SIZE,
    badge,
    dl,
    esc,
    excerpt,
    json_text,
    pre,
    receipts_html,
    safe_svg,
)
from fsm_agent.review.report_timeline import timeline_section
from fsm_agent.review.report_usage import usage_section
from fsm_agent.review.truth import Truth, headline_halt
from fsm_agent.review.view import call_kind, format_step
from fsm_agent.runtime.budgets import dollars
from fsm_agent.runtime.record import HaltRecord, atomic_write_text
from fsm_agent.runtime.run_status import shown_status
from fsm_agent.runtime.snapshot import SUCCESS_RULES

__all__ = ["ReportSections", "incident_report", "report_sections", "safe_svg", "write_report"]


def _halt_rows(rec: HaltRecord) -> list[tuple[str, str]]:
    b, m = rec.budgets, rec.meters
    waits = rec.handoff is not None and rec.handoff.awaits is not None
    shown = (
        live_badge(f"{rec.halt_reason.value}: waiting")
        if waits
        else badge(rec.halt_reason.value, rec.terminal_state == "done", " halt")
    )
    rows = [
        ("halt reason", shown),
        ("terminal state", f"<code>{esc(rec.terminal_state)}</code>"),
        ("steps used / max", f"{rec.steps_used} / {rec.max_steps}"),
        ("wall clock", f"{m.elapsed_ms} ms of {b.wall_clock_ms} ms"),
        ("cost", f"{dollars(m.cost)} of {dollars(b.max_cost)}"),
        ("tool calls", f"{m.tool_calls} (retries {m.retries_used} of {b.max_retries})"),
        ("answer", pre(rec.answer) or "—"),
    ]
    if rec.grounded_by:
        rows.append(("grounded by", ", ".join(f"<code>{esc(c)}</code>" for c in rec.grounded_by)))
    if rec.unreceipted:
        pending = "".join(f"<li>{esc(c)}</li>" for c in rec.unreceipted)
        rows.append(("without complete receipts", f'<ul class="bad">{pending}</ul>'))
    if rec.success_rules < SUCCESS_RULES:
        rows.append(
            ("success rules", f"{rec.success_rules} (recorded before rules {SUCCESS_RULES})")
        )
    if rec.error is not None:  # the record's text of why it halted: an error only for errors
        rows.append(("error" if rec.halt_reason in ERROR_HALTS else "why", pre(rec.error)))
    rows += [("signal", str(rec.signal))] if rec.signal is not None else []
    rows.append(("started / ended", f"{esc(rec.started_at)} → {esc(rec.ended_at)}"))
    return rows


def _handoff(rec: HaltRecord) -> str:
    if rec.handoff is None:
        return ""
    p = rec.handoff
    tried = "".join(f"<li>{esc(t)}</li>" for t in p.tried) or "<li>nothing</li>"
    frozen = pre(json_text(p.frozen_args)) if p.frozen_args is not None else "none"
    rows = [("why", esc(p.why)), ("tried", f"<ul>{tried}</ul>"), ("frozen args", frozen)]
    if p.state is not None:
        rows.append(
            ("stopped at", f"<code>{esc(p.state)}</code> on <code>{esc(p.trigger or '')}</code>")
        )
    if p.guards:
        rows.append(("by guard", ", ".join(f"<code>{esc(g)}</code>" for g in p.guards)))
    if p.call_sha256 is not None:
        rows.append(("frozen call", f"<code>{esc(p.call_sha256)}</code>"))
    if p.awaits is not None:
        until = f" until {esc(p.wait_until)}" if p.wait_until else ""
        rows.append(("waits for", live_badge(f"a person's {p.awaits}") + until))
    return "<h3>Handoff packet</h3>" + dl(rows)


def _tool_calls(rec: HaltRecord) -> str:
    """The record's last tool calls, one line each (the timeline has every detail)."""
    items = "".join(
        f"<li>step {c.step}: <code>{esc(c.name)}</code>"
        f"{call_kind(c.side_effect, c.status, c.error)} {esc(c.status)}"
        f"{' (outcome unknown)' if c.outcome_unknown else ''} · {receipts_html(c.receipts)}"
        f"{pre(excerpt(c.args))}{pre(c.error)}</li>"
        for c in rec.tool_calls
    )
    if rec.tool_calls_omitted:
        items = f"<li>{rec.tool_calls_omitted} earlier calls omitted</li>{items}"
    return f"<h3>Tool calls</h3><ul>{items}</ul>" if items else ""


def _going(run: RunRow) -> str | None:
    """`running` or `paused` while the run goes on (its process is there, or it waits to be
    resumed): it has no halt yet, and that is no failure. None once it halted, or when its
    process is gone (`interrupted`: killed, resume it)."""
    status = shown_status(run)
    return status if status in ("running", "paused") else None


def live_badge(text: str) -> str:
    """A badge for what is neither proven nor failed: a run that goes on."""
    return f'<span class="badge live">{esc(text)}</span>'


def _halt_section(run: RunRow, truth: Truth) -> str:
    rec = run.record
    warn = (
        ""
        if truth.ok
        else (f"<p>{badge(f'UNVERIFIED: read from the run row, and {truth.why}', False)}</p>")
    )
    if rec is None:
        going = _going(run)
        if going is not None:
            note = live_badge(f"no halt record yet: the run is {going}, in state {run.state}")
        else:
            status = shown_status(run)
            note = badge(f"no halt record: the run is {status} in state {run.state}", False)
        return f'<section id="halt"><h2>Halt record</h2>{warn}<p>{note}</p></section>'
    body = dl(_halt_rows(rec)) + _handoff(rec) + _tool_calls(rec)
    return f'<section id="halt"><h2>Halt record</h2>{warn}{body}</section>'


def _diagram_section(spec: MachineSpec, run: RunRow, events: Sequence[Event]) -> str:
    svg = safe_svg(to_svg(spec, path_of_run(spec, run, events)))  # a fork's: by stretches
    svg = PT_SIZE.sub(r'\1="\2"', svg, count=2)  # full size: Graphviz's points as pixels (75%)
    caption = (
        "Blue: states visited and edges taken (with the steps they were taken at); red: "
        "the halt state. Grey edges were not taken; dashed edges are the implicit budget halts;"
        " a self-loop runs out to its label and back."
    )
    return (  # fitted to the frame's width by default (report_html.CSS): nothing is cut off
        f'<section id="diagram"><h2>Machine <code>{esc(spec.name)}</code> and the path taken'
        '</h2><input type="checkbox" id="zoom"><label for="zoom"> full size (the diagram'
        " at Graphviz's size, scrolling sideways in its frame)</label>"
        f"<figure>{svg}<figcaption>{esc(caption)}</figcaption></figure></section>"
    )


def _verdict(report: ReplayReport) -> tuple[str, bool]:
    """Proven: replay re-made every decision and reached the recorded halt."""
    if report.not_run is not None:  # the machine's own modules do not import here
        return "not run", False
    if report.recorded_halt is None:  # a live or killed run: nothing to prove yet
        return "has no halt to prove", False
    return ("proven from the journal", True) if report.ok else ("NOT proven", False)


def _verdict_badge(run: RunRow, report: ReplayReport, sep: str) -> str:
    """The replay verdict's badge; a run that goes on waits for its halt (no failure)."""
    going = _going(run)
    if going is not None and report.recorded_halt is None and report.not_run is None:
        return live_badge(f"replay{sep}waits for the halt (the run is {going})")
    verdict, proven = _verdict(report)
    return badge(f"replay{sep}{verdict}", proven)


def _replay_section(run: RunRow, report: ReplayReport) -> str:
    _, proven = _verdict(report)
    rows = [
        ("verdict", _verdict_badge(run, report, ": ")),
        ("summary", esc(report.summary)),
        ("recorded halt", esc(report.recorded_halt or "—")),
        ("recomputed halt", esc(report.recomputed_halt or "—")),
        ("machine sha256", f"<code>{esc(report.machine_sha256)}</code>"),
    ]
    if not proven and report.steps and _going(run) is None:
        rows.append(("first difference", pre(format_step(report.steps[-1]))))
    return f'<section id="replay"><h2>Replay verification</h2>{dl(rows)}</section>'


def _chain_badge(chain: ChainReport | None) -> str:
    if chain is None:  # the caller did not check it (the CLI always does)
        return badge("chain: not checked", False)
    if chain.ok:
        keyed = ", keyed" if chain.mode == "keyed" else ""
        return badge(f"chain: ok ({chain.events} events{keyed})", True)
    if not chain.findings and not chain.checked:
        return badge("chain: keyed, not checked (key not given)", False)
    if not chain.findings:
        return badge(f"chain: not proven ({chain.unproven})", False)
    first = chain.findings[0]
    return badge(f"chain DOES NOT VERIFY at seq {first.seq} ({first.kind})", False)


def _truth(run: RunRow, chain: ChainReport | None) -> Truth:
    if chain is None:
        return Truth(run.run_id, False, "its chain was not checked")
    return Truth.of(chain)


def _header(run: RunRow, report: ReplayReport, chain: ChainReport | None) -> str:
    truth = _truth(run, chain)
    reason = headline_halt(run, truth)
    shown = esc(reason) if truth.ok else f'<span class="bad">{esc(reason)}</span>'
    return (
        f"<header><h1>Incident report: run <code>{esc(run.run_id)}</code> — {shown}</h1>"
        f'<p class="sub">machine <code>{esc(run.machine)}</code> '
        f'<span class="muted">sha256 {esc(run.machine_sha256[:12])}</span> · '
        f"{_verdict_badge(run, report, ' ')} · {_chain_badge(chain)}</p>"
        f'<p class="sub">task: {esc(run.task)}</p></header>'
    )


@attrs.frozen
class ReportSections:
    """The incident report's parts, each HTML with every journal string escaped: the offline
    report (`incident_report`) and the console's run page put the same parts on a page."""

    title: str
    header: str
    halt: str
    usage: str
    diagram: str
    replay: str
    timeline: str
    #: the replay the parts show (its verdict decides a report's exit code)
    verdict: ReplayReport | None = attrs.field(default=None, eq=False, repr=False)

    def body(self) -> str:
        """Every part in the report's order."""
        parts = (self.header, self.halt, self.usage, self.diagram, self.replay, self.timeline)
        return "\n".join(p for p in parts if p)


def report_sections(
    run: RunRow,
    events: Sequence[Event],
    chain: ChainReport | None = None,
    parent: ParentFacts | None = None,
    timeline: Callable[[int], tuple[range, str]] | None = None,
) -> ReportSections:
    """The report's parts for one run (raises as `incident_report` does); a fork's header
    shows its lineage, compared with its `parent`'s facts when they are given. `timeline`:
    given the number of events, which seqs the timeline shows and the links to the rest
    (the console's pages of a long run; default: every event)."""
    spec = parse_machine(run.machine_text, source=f"journal:{run.run_id}", resolve=False)
    report = with_chain(replay_events(run, events), chain)
    reason = run.halt_reason.value if run.halt_reason else run.status
    if not _truth(run, chain).ok:
        reason = f"UNVERIFIED {reason}"
    return ReportSections(
        title=f"fsm-agent incident {esc(run.run_id)}: {esc(reason)}",
        header=_header(run, report, chain) + fork_html(fork_view(events, parent)),
        halt=_halt_section(run, _truth(run, chain)),
        usage=usage_section(events),
        diagram=_diagram_section(spec, run, events),
        replay=_replay_section(run, report),
        timeline=timeline_section(
            spec, events, report, *(timeline(len(events)) if timeline else ())
        ),
        verdict=report,
    )


def incident_report(run: RunRow, events: Sequence[Event], chain: ChainReport | None = None) -> str:
    """The whole report for one run as one HTML document (see the module docstring).

    Raises `diagram.GraphvizMissing` when no SVG renderer is installed, and `FsmAgentError`
    when the journaled declaration no longer loads or the renderer's SVG is refused.
    """
    return report_page(report_sections(run, events, chain))


def report_page(parts: ReportSections) -> str:
    """The report's parts as one HTML document."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{parts.title}</title>\n"
        f"<style>{CSS}</style></head>\n<body>\n{parts.header}\n"
        f"{parts.halt}\n{parts.usage}\n"
        f"{parts.diagram}\n{parts.replay}\n{parts.timeline}\n"
        "<footer class='muted'><p>Written by fsm-agent from the journal alone; "
        "every string above is journal data shown as text.</p></footer>\n</body></html>\n"
    )


def write_report(html_text: str, path: str | os.PathLike[str]) -> Path:
    """Write a report atomically at `path` (see `record.atomic_write_text`); made for
    review, it follows the umask."""
    return atomic_write_text(path, html_text, private=False)
