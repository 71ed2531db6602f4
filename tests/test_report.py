"""The incident report: the halt record first, every transition, the replay verdict; every
journal string escaped, nothing fetched, no script; the same journal gives the same bytes."""

from __future__ import annotations

import html
from html.parser import HTMLParser
from pathlib import Path

import attrs
import pytest

from fsm_agent.errors import FsmAgentError
from fsm_agent.journal.store import GuardResult
from fsm_agent.review.diagram import GraphvizMissing
from fsm_agent.review.report import incident_report, safe_svg, write_report
from tests.browser_runs import (
    HOSTILE,
    IMG,
    SCRIPT,
    completed_run,
    hostile_names_run,
    hostile_run,
    needs_dot,
)
from tests.lab import granted

#: Every element the report may contain: its own HTML and what Graphviz draws with.
# fmt: off
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "header", "footer", "section", "h1", "h2",
    "h3", "p", "span", "code", "pre", "dl", "dt", "dd", "ul", "li", "table", "thead", "tbody",
    "tr", "th", "td", "br", "div", "figure", "figcaption", "input", "label",
    "svg", "g", "polygon", "polyline", "ellipse", "path", "text",
}
# fmt: on
FETCHING_ATTRS = {"src", "href", "xlink:href", "srcset", "action", "formaction", "poster", "data"}


class Markup(HTMLParser):
    """The tags and attribute names a browser's parser would see."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.attrs: set[str] = set()
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs.update(name for name, _ in attrs)


@pytest.fixture
def hostile(tmp_path: Path) -> str:
    return incident_report(*hostile_run(tmp_path))


@needs_dot
def test_the_halt_record_comes_first_then_the_diagram_replay_and_every_transition(
    tmp_path: Path,
) -> None:
    row, events = hostile_run(tmp_path)
    page = incident_report(row, events)
    order = [page.index(f'<section id="{s}">') for s in ("halt", "diagram", "replay", "timeline")]
    assert order == sorted(order)
    assert '<span class="badge bad halt">handoff_requested</span>' in page
    assert "<dt>terminal state</dt><dd><code>handoff</code></dd>" in page
    assert "<dt>steps used / max</dt><dd>3 / 8</dd>" in page
    assert f"<dt>why</dt><dd>needs a human {html.escape(HOSTILE)}</dd>" in page
    assert '<span class="badge ok">replay: proven from the journal</span>' in page
    assert '<span class="badge ok">replay proven from the journal</span>' in page
    assert f"Timeline: {len(events)} journaled transitions" in page
    for e in events:
        assert f'<td class="num">{e.seq}</td>' in page
        assert f"{e.source or 'start'} → {e.dest}" in page
    assert '<code>not tool_allowed</code> <span class="f">false</span>' in page
    assert page.count('<span class="badge ok">match</span>') == len(events)


@needs_dot
def test_every_journal_string_is_text_and_nothing_can_run_or_fetch(hostile: str) -> None:
    for markup in (SCRIPT, IMG, HOSTILE):
        assert markup not in hostile
    assert html.escape(SCRIPT) in hostile  # the reply, the tool args, the task, the handoff
    assert hostile.count(html.escape(IMG)) >= 5
    assert "<script" not in hostile.lower()
    seen = Markup(hostile)
    assert seen.tags <= ALLOWED_TAGS
    assert not seen.attrs & FETCHING_ATTRS
    assert not [a for a in seen.attrs if a.startswith("on")]
    assert "default-src 'none'" in hostile  # and the browser is told to fetch nothing


@needs_dot
def test_no_external_reference_but_the_svg_namespaces(hostile: str) -> None:
    rest = hostile.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
        'xmlns:xlink="http://www.w3.org/1999/xlink"', ""
    )
    assert "http://" not in rest
    assert "https://" not in rest
    assert "url(" not in rest
    assert "@import" not in rest
    assert "<!DOCTYPE svg" not in hostile
    assert "<?xml" not in hostile
    assert "<!--" not in hostile  # Graphviz's comments (its version, node names) are gone


@needs_dot
def test_markup_in_the_run_id_machine_and_state_names_reaches_the_svg_as_text(
    tmp_path: Path,
) -> None:
    page = incident_report(*hostile_names_run(tmp_path))
    assert "<script" not in page.lower()
    assert "<img" not in page
    svg = page[page.index("<svg") : page.index("</svg>")]
    assert "r1&lt;/svg&gt;&lt;script&gt;window.__pwned=1&lt;/script&gt;" in svg
    assert "tool &lt;img src=x onerror=alert(2)&gt;" in svg
    assert Markup(page).tags <= ALLOWED_TAGS


@needs_dot
def test_a_completed_run_shows_its_answer_and_receipts(tmp_path: Path) -> None:
    page = incident_report(*completed_run(tmp_path))
    assert '<span class="badge ok halt">completed</span>' in page
    assert "<pre>30 days from delivery</pre>" in page
    assert '<span class="mono">200 kb:refunds#window</span>' in page


@needs_dot
def test_the_same_journal_gives_the_same_bytes(tmp_path: Path) -> None:
    row, events = hostile_run(tmp_path)
    assert incident_report(row, events) == incident_report(row, events)


@needs_dot
def test_a_journal_that_does_not_replay_gets_a_red_verdict(tmp_path: Path) -> None:
    row, events = hostile_run(tmp_path)
    i = next(i for i, e in enumerate(events) if e.guards)
    flipped = tuple(GuardResult(g.transition, g.guard, not g.result) for g in events[i].guards)
    events[i] = attrs.evolve(events[i], guards=flipped)
    page = incident_report(row, events)
    assert '<span class="badge bad">replay: NOT proven</span>' in page
    assert "<dt>first difference</dt>" in page
    assert '<span class="badge bad">diverged</span>' in page


@needs_dot
def test_a_run_without_a_halt_record_says_so(tmp_path: Path) -> None:
    row, events = hostile_run(tmp_path)
    live = attrs.evolve(row, record=None, status="running", halt_reason=None, state="drafting")
    page = incident_report(live, events[:-1])  # its process (this one) is there: it goes on
    assert "no halt record yet: the run is running, in state drafting" in page
    assert '<span class="badge live">replay waits for the halt (the run is running)</span>' in page
    assert 'badge bad">replay' not in page  # no chain given here: that badge is red
    gone = attrs.evolve(live, pid=2**22 + 1)  # no such process: killed
    page = incident_report(gone, events[:-1])
    assert "no halt record: the run is interrupted in state drafting" in page
    assert '<span class="badge bad">replay has no halt to prove</span>' in page


def test_without_graphviz_the_report_refuses_instead_of_degrading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    row, events = hostile_run(tmp_path)
    monkeypatch.setattr("fsm_agent.review.svg_render.find_renderer", lambda: None)
    with pytest.raises(GraphvizMissing, match="pip install graphviz-pure"):
        incident_report(row, events)


GRAPHVIZ = (
    '<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n<!DOCTYPE svg PUBLIC "-//W3C//DTD'
    ' SVG 1.1//EN"\n "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">\n<!-- Title: g -->\n'
    '<svg width="8pt" height="8pt" xmlns="http://www.w3.org/2000/svg">\n<g id="graph0">'
    "<title>g</title><!-- a --><text>a</text>{}</g>\n</svg>\n"
)


def test_safe_svg_strips_the_prolog_and_comments() -> None:
    assert safe_svg(GRAPHVIZ.format("")) == (
        '<svg width="8pt" height="8pt" xmlns="http://www.w3.org/2000/svg">\n'
        '<g id="graph0"><title>g</title><text>a</text></g>\n</svg>'
    )


@pytest.mark.parametrize(
    "extra",
    [
        "<script>alert(1)</script>",
        '<polygon onload="alert(1)"/>',
        '<a xmlns:xlink="http://www.w3.org/1999/xlink" xlink:href="https://x.test/"><text/></a>',
        "<foreignObject><div>hi</div></foreignObject>",
        '<image href="https://x.test/a.png"/>',
        "<text>unclosed",
    ],
)
def test_safe_svg_refuses_anything_graphviz_does_not_draw_with(extra: str) -> None:
    with pytest.raises(FsmAgentError, match=r"diagram|not well-formed"):
        safe_svg(GRAPHVIZ.format(extra))


@needs_dot
def test_write_report_writes_the_file_atomically(tmp_path: Path, hostile: str) -> None:
    target = write_report(hostile, tmp_path / "out" / "incident.html")
    assert target.read_text(encoding="utf-8") == hostile
    assert [p.name for p in target.parent.iterdir()] == ["incident.html"]  # no temp file left


def test_the_report_shows_what_on_call_needs_at_a_glance(tmp_path: Path) -> None:
    """Tool observations, guards coloured by what they did, the run's frozen budgets in the
    diagram's title, costs with sensible precision, incomplete receipts marked."""
    from fsm_agent import ScriptedModel, run
    from fsm_agent.stores.sqlite import SqliteStore
    from tests.fixture_tickets import new_tools

    close = {"tool_call": {"name": "close_ticket", "args": {"ticket": "T-200"}}}
    lookup = {"tool_call": {"name": "lookup_ticket", "args": {"ticket": "T-200"}}}
    done = {"answer": "Done: ticket T-200 is closed."}
    record = run(
        "agent_loop", task="Close T-200", **granted(new_tools()), store=tmp_path / "j.db",
        model=ScriptedModel([lookup, close, done, done, done], cost_per_call=0.00005),
        budgets={"max_steps": 7}, record_path=tmp_path / "r.json",
    )  # fmt: skip
    assert record.halt_reason == "side_effect_unknown"
    store = SqliteStore(tmp_path / "j.db")
    try:
        page = incident_report(store.get_run(record.run_id), store.events(record.run_id))
    finally:
        store.close()
    assert "Printer on fire" in page  # what lookup_ticket returned
    assert "run budgets: max_steps 7" in page  # the frozen budgets, not the default 8
    assert "$0.00025 of $1.00" in page  # five calls at $0.00005, not $0.0000
    assert '<span class="mono bad">206 (no id)</span>' in page
    halting = page.split("<tr ")[-1]
    assert halting.count('class="g-halt"') == 1  # the guard that decided the halt
    assert "stopped the run: side_effect_unknown" in halting
    assert 'class="g-ruled"><code>not tool_allowed</code>' in page  # healthy: muted
