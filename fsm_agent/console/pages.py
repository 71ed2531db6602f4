"""The console's HTML pages: the run list, one run, the charts. Every journal string goes
through `esc` (the report's escaping); nothing from the journal is put in a script, a
style or an event attribute. The pages load one script and two stylesheets, all from the
package (`/static/…`); data the script needs comes as JSON from the console's API and is
shown with `textContent`, and the parts it draws again as runs move (`run_list`,
`report_parts`, a step) are drawn here, escaped the same way, and parsed by `DOMParser`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, urlencode

from fsm_agent.console.queries import STATUSES, Listed, RunFilters, RunPage
from fsm_agent.halt import HaltReason
from fsm_agent.review.report import ReportSections, live_badge
from fsm_agent.review.report_html import badge, esc, json_text
from fsm_agent.review.truth import LEGEND, MARK
from fsm_agent.runtime.budgets import BUDGET_NAMES
from fsm_agent.runtime.record import HandoffPacket
from fsm_agent.runtime.run_status import shown_status

#: The task as the list shows it (the run page has all of it).
TASK_EXCERPT = 120


def layout(title: str, page: str, body: str, *, token: str | None, where: str) -> str:
    """A whole page: `body` inside the console's frame. `token` (write mode only) is the
    secret an act must send back; None in a read-only console, whose pages cannot act."""
    meta = f'<meta name="console-token" content="{esc(token)}">\n' if token else ""
    charts = '<script src="/static/chart.umd.min.js" defer></script>\n' if page == "charts" else ""
    mode = badge("operator acts on", False) if token else badge("read-only", True)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        # no icon to fetch: a browser's own /favicon.ico request would be a 404 in the console
        '<link rel="icon" href="data:,">\n'
        f"<title>{title}</title>\n{meta}"
        '<link rel="stylesheet" href="/static/report.css">\n'
        '<link rel="stylesheet" href="/static/console.css">\n'
        f'{charts}<script src="/static/console.js" defer></script>\n</head>\n'
        f'<body data-page="{esc(page)}">\n<nav class="top"><strong>fsm-agent console</strong>'
        ' <a href="/">Runs</a> <a href="/charts">Charts</a> '
        f'{mode} <span class="muted">journal {esc(where)}</span></nav>\n'
        f"<main>\n{body}\n</main>\n</body></html>\n"
    )


def _options(values: Iterable[str], chosen: str | None, blank: str) -> str:
    items = [f'<option value="">{esc(blank)}</option>']
    for v in values:
        sel = " selected" if v == chosen else ""
        items.append(f'<option value="{esc(v)}"{sel}>{esc(v)}</option>')
    return "".join(items)


def _field(name: str, label: str, value: str | None, hint: str = "") -> str:
    return (
        f'<label>{esc(label)} <input name="{name}" value="{esc(value or "")}"'
        f' placeholder="{esc(hint)}"></label>'
    )


def filter_form(f: RunFilters, raw: dict[str, str]) -> str:
    """The run list's filters, as a GET form (each value shown back escaped)."""
    reasons = _options([r.value for r in HaltReason], raw.get("halt_reason"), "any halt")
    statuses = _options(STATUSES, f.status, "any status")
    return (
        '<form id="filters" class="filters" method="get" action="/">'
        f"{_field('machine', 'machine', f.machine)}"
        f'<label>halt reason <select name="halt_reason">{reasons}</select></label>'
        f'<label>status <select name="status">{statuses}</select></label>'
        f"{_field('since', 'since', raw.get('since'), '2d, 2025-01-31')}"
        f"{_field('until', 'until', raw.get('until'), '12h, ISO time')}"
        f"{_field('text', 'task contains', f.text)}"
        '<button type="submit">Filter</button> <a href="/">clear</a></form>'
    )


def unverified_badge(why: str | None) -> str:
    """How a run whose chain does not verify is marked wherever it is shown (the chain's
    verdict as its title)."""
    return f'<span class="badge bad unverified" title="{esc(why or "")}">UNVERIFIED</span>'


def _run_row(x: Listed) -> str:
    r = x.row
    status = shown_status(r)
    reason = r.halt_reason.value if r.halt_reason else None
    ok = r.halt_reason is HaltReason.COMPLETED and x.truth.ok
    halt = "—" if reason is None else badge(reason, ok)
    if reason is not None and status == "waiting":  # a stop a person's decision continues
        halt = live_badge(reason)
    mark, css = "", ""
    if not x.truth.ok:  # the row may have been edited: shown as what it says, marked
        mark, css = " " + unverified_badge(x.truth.why), ' class="unverified"'
        halt = f"{badge(reason + MARK, False)}" if reason else f"—{MARK}"
    task = r.task if len(r.task) <= TASK_EXCERPT else r.task[:TASK_EXCERPT] + "…"
    return (
        f'<tr data-run="{esc(r.run_id)}"{css}><td><a href="/runs/{esc(r.run_id)}">'
        f"<code>{esc(r.run_id)}</code></a></td><td>{esc(r.machine)}</td>"
        f'<td><span class="status s-{esc(status)}">{esc(status)}</span>{mark}</td>'
        f"<td>{halt}</td>"
        f'<td class="num">{x.steps_used}/{x.max_steps}</td>'
        f'<td class="nowrap">{esc(r.started_at)}</td><td class="task">{esc(task)}</td></tr>'
    )


def run_rows(runs: Iterable[Listed]) -> str:
    """The list's rows (the page's, and what its script draws again as runs move)."""
    return "".join(_run_row(x) for x in runs)


def legend(runs: Iterable[Listed]) -> str:
    """What `!` and UNVERIFIED mean, when a row shown has them."""
    doubtful = sum(1 for x in runs if not x.truth.ok)
    if not doubtful:
        return ""
    return f'<p class="bad" id="unverified-legend">{doubtful} row(s) {esc(LEGEND)}</p>'


def run_list(page: RunPage, runs: tuple[Listed, ...], raw: dict[str, str]) -> str:
    """The list itself: its legend, a page of runs, and the link to the next page (what
    the page's script draws again, from `/api/runs`, as runs move)."""
    head = (
        "<tr><th>run</th><th>machine</th><th>status</th><th>halt</th><th>steps</th>"
        "<th>started (UTC)</th><th>task</th></tr>"
    )
    empty = "" if page.runs else '<p class="muted" id="no-runs">no runs match</p>'
    more = ""
    if page.next_cursor is not None:
        kept = {
            k: v for k, v in raw.items() if k not in ("before_at", "before_id", "version") and v
        }
        at, rid = page.next_cursor
        query = urlencode({**kept, "before_at": at, "before_id": rid})
        more = f'<a id="next-page" rel="next" href="/?{esc(query)}">next page →</a>'
    return (
        f'<div id="legend">{legend(runs)}</div>'
        f'<table id="runs"><thead>{head}</thead><tbody>{run_rows(runs)}</tbody></table>'
        f'{empty}<p class="pager">{more}</p>'
    )


def runs_page(
    page: RunPage,
    runs: tuple[Listed, ...],
    f: RunFilters,
    raw: dict[str, str],
    acts: str,
    error: str,
    version: str | None = None,
) -> str:
    """The list body: filters, the list (`run_list`), kept up to date by the page's script
    (`version`: the journal's as it was read; None: no such token, the script asks anyway)."""
    problem = f'<p class="bad" id="filter-error">{esc(error)}</p>' if error else ""
    shown = "" if version is None else f' data-version="{esc(version)}"'
    return (
        f"<h1>Runs</h1>{filter_form(f, raw)}{problem}{acts}"
        f'<div id="run-list"{shown}>{run_list(page, runs, raw)}</div>'
    )


def _meter(m: dict[str, Any]) -> str:
    name = esc(m["name"])
    return (
        f'<div class="meter" data-meter="{name}"><span class="m-name">{name}</span>'
        f' <progress value="{esc(min(m["used"], m["budget"]))}" max="{esc(m["budget"])}">'
        f'</progress> <span class="m-text">{esc(m["used"])} / {esc(m["budget"])}</span></div>'
    )


def live_unverified(state: dict[str, Any]) -> str:
    """The live panel's mark of a run whose chain does not verify (empty when it does)."""
    if state["verified"]:
        return ""
    return f"{unverified_badge(state['unverified'])} {esc(state['unverified_note'])}"


def live_panel(state: dict[str, Any]) -> str:
    """The run now: state, step n/max, each meter against its budget, the wall clock (left
    while it runs, used once it ended), and whether it verifies. The script keeps it up to
    date from the run's event stream while the run is live."""
    meters = "".join(_meter(m) for m in state["meters"])
    halt = state["halt_reason"] or "—"
    log = (
        ""
        if state["ended"]
        else '<h3>Transitions since this page was drawn</h3><ol id="live-log"></ol>'
        '<p class="muted">Each one is listed as it is journaled, and the report below (the'
        " chain, the halt record, usage, the path, the timeline) is drawn again with it.</p>"
    )
    css = "" if state["verified"] else ' class="unverified"'
    return (
        f'<section id="live"{css} data-ended="{int(state["ended"])}"><h2>Now</h2>'
        f'<p id="live-unverified" class="bad">{live_unverified(state)}</p>'
        f'<p class="live-line"><span id="live-status" class="status s-{esc(state["status"])}">'
        f'{esc(state["status"])}</span> in <code id="live-state">{esc(state["state"])}</code>'
        f' · <strong id="live-step">step {state["steps_used"]}/{state["max_steps"]}</strong>'
        f' · <span id="live-clock">{esc(state["clock"])}</span>'
        f' · halt <span id="live-halt">{esc(halt)}</span> · seq <span id="live-seq">'
        f'{state["seq"]}</span></p><div id="meters">{meters}</div>{log}</section>'
    )


def _act_form(act: str, title: str, fields: str, run_id: str | None) -> str:
    target = f'<input type="hidden" name="run_id" value="{esc(run_id)}">' if run_id else ""
    return (
        f'<form class="act" data-act="{act}"><h3>{esc(title)}</h3>{target}{fields}'
        '<label>why <input name="why" required></label>'
        '<label>who <input name="who" placeholder="login name"></label>'
        f'<button type="submit">{esc(title)}</button><output></output></form>'
    )


def run_acts(run_id: str) -> str:
    """The acts on one live run (write mode only)."""
    caps = "".join(
        f'<label>{n} <input name="cap:{n}" inputmode="decimal"></label>' for n in BUDGET_NAMES
    )
    return (
        '<section id="acts"><h2>Operator acts</h2>'
        + _act_form("pause", "Pause", "", run_id)
        + _act_form("raise-budget", "Raise budget", caps, run_id)
        + "</section>"
    )


def decision_acts(run_id: str, packet: HandoffPacket) -> str:
    """A person's decision on a run that waits (write mode only): approve or deny the
    frozen call (bound to its sha256), or answer. The console only journals the decision;
    the run waits, paused, for `fsm-agent resume` with its model and tools."""
    if packet.awaits == "approval":
        call = f'<input type="hidden" name="call" value="{esc(packet.call_sha256 or "")}">'
        frozen = esc(json_text(packet.frozen_args)) if packet.frozen_args is not None else ""
        forms = (
            f"<p>frozen call <code>{esc((packet.call_sha256 or '')[:12])}</code>:"
            f" <code>{frozen}</code></p>"
            + _act_form("approve", "Approve", call, run_id)
            + _act_form("deny", "Deny", call, run_id)
        )
    else:
        text = '<label>answer <textarea name="text" required></textarea></label>'
        forms = _act_form("answer", "Answer", text, run_id)
    return (
        '<section id="acts"><h2>A person\'s decision</h2>'
        f"<p>{esc(packet.why)}</p>{forms}"
        "<p>The decision is journaled here; the run then goes on with"
        f" <code>fsm-agent resume {esc(run_id)} --model … --tools …</code>.</p></section>"
    )


def routing_acts() -> str:
    """Routing freeze and its lift, for every run on the journal (write mode only)."""
    return (
        '<section id="acts"><h2>Operator acts</h2>'
        + _act_form("freeze-routing", "Freeze routing", "", None)
        + _act_form("unfreeze-routing", "Unfreeze routing", "", None)
        + "</section>"
    )


#: How many of a run's transitions its page lists at a time (the newest, by default).
TIMELINE_PAGE = 200


def timeline_page(run_id: str, upto: int | None) -> Callable[[int], tuple[range, str]]:
    """For a run of `total` events: the seqs its page's timeline lists (the `TIMELINE_PAGE`
    ending at `upto`, default the newest) and the links to the pages before and after."""

    def window(total: int) -> tuple[range, str]:
        last = total - 1 if upto is None else max(0, min(upto, total - 1))
        first = max(0, last - TIMELINE_PAGE + 1)
        if first == 0 and last == total - 1:
            return range(first, last + 1), ""
        base = f"/runs/{quote(run_id, safe='')}"
        links = []
        if first > 0:
            links.append(f'<a href="{base}?upto={first - 1}" rel="prev">earlier</a>')
        if last < total - 1:
            later = min(total - 1, last + TIMELINE_PAGE)
            links.append(f'<a href="{base}?upto={later}" rel="next">later</a>')
            links.append(f'<a href="{base}">newest</a>')
        pager = (
            f'<p class="pager" id="timeline-pager">seq {first} to {last} of {total} ·'
            f" {' · '.join(links)}</p>"
        )
        return range(first, last + 1), pager

    return window


def report_parts(parts: ReportSections) -> dict[str, str]:
    """The report's parts by the id of what each replaces on the run page."""
    return {
        "report-header": f'<div id="report-header">{parts.header}</div>',
        "halt": parts.halt,
        "usage": parts.usage,
        "diagram": parts.diagram,
        "replay": parts.replay,
        "timeline": parts.timeline,
    }


def run_page(run_id: str, parts: ReportSections | None, problem: str, live: str, acts: str) -> str:
    """One run: the live panel, its acts, the report's parts, and the step viewer (which
    opens under the row of the timeline it shows)."""
    stepper = (
        '<p id="stepper" class="muted">Step through the transitions: j / ↓ / → next ·'
        " k / ↑ / ← previous · or click a row of the timeline; the step opens under its"
        " row.</p>"
    )
    if parts is None:
        report = f'<p class="bad" id="report-error">{esc(problem)}</p>'
        return f'<div id="run" data-run="{esc(run_id)}">{live}{acts}{report}</div>'
    p = report_parts(parts)
    return (
        f'<div id="run" data-run="{esc(run_id)}">{p["report-header"]}{live}{acts}{p["halt"]}'
        f"{p['usage']}{p['diagram']}{p['replay']}{stepper}{p['timeline']}</div>"
    )


def charts_page(since: str) -> str:
    """The charts' frames; the script draws them from `/api/charts`."""
    panels = (
        ("over-time", "Halt reasons over time"),
        ("per-machine", "Halt reasons per machine"),
        ("steps-share", "steps_used / max_steps of halted runs"),
        ("cost", "Cost and tokens per run (newest runs)"),
        ("tools", "Slowest tools (newest halted runs)"),
    )
    charts = "".join(
        f'<figure class="chart"><figcaption>{esc(t)}</figcaption>'
        f'<canvas id="chart-{k}" width="640" height="300"></canvas></figure>'
        for k, t in panels
    )
    return (
        '<h1>Across runs</h1><form class="filters" method="get" action="/charts">'
        f"{_field('since', 'runs started since', since, '7d')}"
        '<button type="submit">Show</button></form>'
        f'<p id="charts-summary" class="muted" data-since="{esc(since)}">loading…</p>'
        f'<div class="charts">{charts}</div>'
        '<table id="tools-table"><thead><tr><th>tool</th><th>calls</th><th>total ms</th>'
        "<th>max ms</th></tr></thead><tbody></tbody></table>"
    )
