"""The pictures show exactly the path, readably — checked on what the real tools draw:
Mermaid's own parser and renderer in headless chromium, Graphviz's `dot` and graphviz-pure,
measured in the browser (computed colours, bounding boxes), with screenshots to look at.

Each test is a defect that was found: a Mermaid path that was grey once rendered, self-loops
drawn on top of each other, guard names rewritten (`mod:fn` as `mod.fn`), a report diagram cut
off at 1280 px, and `diagram FILE --run RUN` drawing the journaled declaration instead of FILE.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest
from click.testing import CliRunner

from fsm_agent.cli.main import cli
from fsm_agent.declaration.load import load_machine, parse_machine
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.journal.store import Event, RunRow
from fsm_agent.review.diagram import RunPath, run_path, to_dot, to_mermaid
from fsm_agent.review.mermaid import NOT_TAKEN, TAKEN
from fsm_agent.review.replay import load_run
from fsm_agent.review.report import incident_report, write_report
from fsm_agent.review.svg_render import find_renderer
from tests.browser_mermaid import mermaid_page, mermaid_script, render
from tests.browser_page import Watched, launch_chromium, missing, watched_page
from tests.lab import MISS, lab_run
from tests.test_diagram import links, styled

if TYPE_CHECKING:
    from playwright.sync_api import Browser

BLUE, GREY = "rgb(29, 78, 216)", "rgb(156, 163, 175)"
ROOT = Path(__file__).parent.parent
#: rejected (retried), answer (ungrounded, retried), a lookup that misses, a handoff: the run
#: takes both of drafting's self-loops, the tool round trip and the handoff edge.
LOOPING_REPLIES: list[Any] = ["just prose", {"answer": "it is 42"}, MISS, {"handoff": {"why": "x"}}]
GUARD = "tests.fixture_guards:always_true"
HOSTILE = (
    'a "quoted" #35; &lt; <img src=x onerror=alert(1)> %%{init: {"theme": "dark"}}%% | `x`'
    " back\\slash \\N \\l"  # Graphviz's escapes: the node's name, a left-justified line
)

#: Every label's lines as drawn, measured in the page. Mermaid: each node and edge label with
#: its box (lines split at <br>); Graphviz: each <text> with its group (a node, an edge, the
#: graph's title).
MERMAID_BOXES = """() => [...document.querySelectorAll('#out g.node, #out g.edgeLabel')].map(g => {
  const lines = []; let line = '';
  const walk = n => { for (const c of n.childNodes) {
    if (c.nodeName.toLowerCase() === 'br') { lines.push(line); line = ''; }
    else if (c.nodeType === 3) line += c.nodeValue; else walk(c); } };
  walk(g.querySelector('.nodeLabel, .edgeLabel span, span') || g); lines.push(line);
  const r = g.getBoundingClientRect();
  return {id: g.id, kind: g.classList.contains('node') ? 'node' : 'label', lines,
          box: [r.left, r.top, r.right, r.bottom]};
}).filter(b => b.box[2] > b.box[0])"""
SVG_TEXTS = """() => [...document.querySelectorAll('svg text')].map(t => {
  const r = t.getBoundingClientRect(), g = t.closest('g.node, g.edge, g.graph');
  return {text: t.textContent, group: g.id, box: [r.left, r.top, r.right, r.bottom]};
})"""

#: Where a drawn line passes through a label: each path sampled every 2 px against the boxes
#: of every label but its own edge's; each crossing as [path, box, the box's text], both named
#: by their group's id and title.
CROSSINGS = """([paths, boxes]) => {
  const name = e => { const g = e.closest('g.node, g.edge, g.graph') || e;
    const t = g.querySelector(':scope > title');
    return [g, g.id + ' ' + (t ? t.textContent : '')]; };
  const bs = [...document.querySelectorAll(boxes)].map(e => { const [g, n] = name(e);
    return {g, n, text: e.textContent, r: e.getBoundingClientRect()}; }).filter(b => b.r.width > 0);
  const out = new Set();
  for (const p of document.querySelectorAll(paths)) {
    const [g, n] = name(p), m = p.getScreenCTM(), len = p.getTotalLength();
    for (let l = 0; l <= len; l += 2) {
      const q = p.getPointAtLength(l);
      const x = m.a * q.x + m.c * q.y + m.e, y = m.b * q.x + m.d * q.y + m.f;
      for (const b of bs) { const r = b.r;
        if (b.g !== g && x > r.left + 2 && x < r.right - 2 && y > r.top + 2 && y < r.bottom - 2)
          out.add(JSON.stringify([p.id + ' ' + n, b.n, b.text])); } } }
  return [...out].map(s => JSON.parse(s));
}"""


def overlap(a: list[float], b: list[float]) -> bool:
    """Two boxes [left, top, right, bottom] share more than half a pixel each way."""
    return min(a[2], b[2]) - max(a[0], b[0]) > 0.5 and min(a[3], b[3]) - max(a[1], b[1]) > 0.5


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    yield from launch_chromium()


@pytest.fixture(scope="module")
def mermaid(
    browser: Browser, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Watched]:
    script = mermaid_script(request, tmp_path_factory)
    seen = mermaid_page(browser, script, tmp_path_factory.mktemp("mermaid"), width=1600)
    try:
        yield seen
    finally:
        seen.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Watched]:
    """A fresh page 1280 px wide: the laptop width an on-call engineer reads a report at."""
    seen = watched_page(browser, width=1280)
    try:
        yield seen
    finally:
        seen.close()


@pytest.fixture(scope="module")
def looping(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunRow, list[Event], Path]:
    tmp = tmp_path_factory.mktemp("looping")
    record = lab_run(tmp, LOOPING_REPLIES)
    assert record.halt_reason == "handoff_requested"
    row, events = load_run(tmp / "j.db", record.run_id)
    return row, events, tmp / "j.db"


def _path(row: RunRow, events: list[Event]) -> tuple[MachineSpec, RunPath]:
    spec = parse_machine(row.machine_text, source="journal", resolve=False)
    return spec, run_path(spec, row.run_id, events)


def _with_loops(extra: int) -> MachineSpec:
    """agent_loop with `extra` more self-loops on drafting (2 + extra in all), one of them
    guarded by a user guard."""
    loops = [
        "  - {trigger: handoff, source: drafting, dest: drafting, guards: [retries_left],"
        " retry: true}",
        f"  - {{trigger: tool_call, source: drafting, dest: drafting, guards: ['{GUARD}',"
        " retries_left], retry: true}",
    ][:extra]
    text = load_machine("agent_loop").text.replace(
        "transitions:\n", "transitions:\n" + "".join(line + "\n" for line in loops), 1
    )
    return parse_machine(text, source="loops.yaml")


def _shot(seen: Watched, tmp_path: Path, name: str, selector: str | None = None) -> None:
    shot = tmp_path / f"{name}.png"
    if selector is None:
        seen.page.screenshot(path=shot, full_page=True)
    else:
        seen.page.locator(selector).screenshot(path=shot)
    print(f"screenshot: {shot}")


# --- Mermaid: the path is coloured once rendered ---------------------------------------------


def test_mermaid_colours_every_taken_edge_and_greys_the_rest_once_rendered(
    mermaid: Watched, looping: tuple[RunRow, list[Event], Path], tmp_path: Path
) -> None:
    row, events, _ = looping
    spec, path = _path(row, events)
    text = to_mermaid(spec, path)
    result = render(mermaid, text, show=True)
    assert "error" not in result, result
    _shot(mermaid, tmp_path, "mermaid-path", "#out")
    drawn = mermaid.page.evaluate(
        "() => [...document.querySelectorAll('#out .edgePaths path')]"
        ".map(p => getComputedStyle(p).stroke)"
    )
    assert len(drawn) == len(links(text))  # one path per link, in the text's order
    blue = {i for i, stroke in enumerate(drawn) if stroke == BLUE}
    assert blue == styled(text, TAKEN)
    assert {i for i, stroke in enumerate(drawn) if stroke == GREY} == styled(text, NOT_TAKEN)
    # taken: tool_call, tool_returned, collected, handoff, and both self-loops (out and back)
    assert len(blue) == 4 + 2 * 2
    taken_labels = mermaid.page.evaluate(
        "() => [...document.querySelectorAll('#out g.edgeLabel span')]"
        f".filter(s => s.textContent && getComputedStyle(s).color === '{BLUE}')"
        ".map(s => s.textContent)"
    )
    assert sorted(taken_labels) == sorted(
        ["tool_calltaken (step 3)", "tool_returnedtaken (step 3)", "collectedtaken (step 3)",
         "handoff/ handoff_requestedtaken (step 4)"]
    )  # fmt: skip
    loop_labels = mermaid.page.evaluate(
        "() => [...document.querySelectorAll('#out g.node.loop_taken .nodeLabel')]"
        ".map(s => [s.textContent, getComputedStyle(s).color])"
    )
    assert sorted(loop_labels) == [
        ["answer[retries_left] (retry)taken (step 2)", BLUE],
        ["rejected[retries_left] (retry)taken (step 1)", BLUE],
    ]


# --- self-loops never overlap ----------------------------------------------------------------


@pytest.mark.parametrize("extra", [0, 2])
def test_mermaid_self_loops_each_have_their_own_place(
    mermaid: Watched, extra: int, tmp_path: Path
) -> None:
    spec = _with_loops(extra)
    result = render(mermaid, to_mermaid(spec), show=True)
    assert "error" not in result, result
    _shot(mermaid, tmp_path, f"mermaid-loops-{extra}", "#out")
    boxes = mermaid.page.evaluate(MERMAID_BOXES)
    loops = [b for b in boxes if "-flowchart-loop" in b["id"]]
    assert len(loops) == 2 + extra
    for loop in loops:
        clashes = [b["lines"] for b in boxes if b is not loop and overlap(loop["box"], b["box"])]
        assert clashes == [], (loop["lines"], clashes)
    loop_paths = mermaid.page.evaluate(
        "() => [...document.querySelectorAll('#out .edgePaths path')]"
        ".filter(p => p.id.includes('loop')).map(p => p.getAttribute('d'))"
    )
    assert len(set(loop_paths)) == 2 * (2 + extra)  # out and back, each its own curve
    crossings = mermaid.page.evaluate(
        CROSSINGS, ["#out .edgePaths path", "#out g.node, #out g.edgeLabel"]
    )
    assert [c for c in crossings if "loop" in c[0] or "loop" in c[1]] == []


def _renderers() -> list[Any]:
    pure = find_renderer()
    dot = shutil.which("dot")
    return [
        pytest.param(
            pure.path if pure is not None and pure.name == "graphviz-pure" else None,
            id="graphviz-pure",
        ),
        pytest.param(dot, id="dot"),
    ]


def _svg_page(seen: Watched, program: str | None, dot_text: str, tmp_path: Path) -> str:
    if program is None:
        missing(
            "this renderer is not installed (pip install graphviz-pure; apt-get install graphviz)"
        )
    done = subprocess.run(
        [program, "-Tsvg"], input=dot_text, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    svg = done.stdout[done.stdout.index("<svg") :]
    html = tmp_path / "svg.html"
    html.write_text(f"<!DOCTYPE html><html><body>{svg}</body></html>", encoding="utf-8")
    seen.page.goto(html.as_uri())
    return svg


@pytest.mark.parametrize("program", _renderers())
@pytest.mark.parametrize("extra", [0, 2])
def test_graphviz_self_loops_and_labels_never_overlap(
    page: Watched,
    program: str | None,
    extra: int,
    looping: tuple[RunRow, list[Event], Path],
    tmp_path: Path,
) -> None:
    row, events, _ = looping
    spec = _with_loops(extra)
    path = run_path(spec, row.run_id, events) if extra == 0 else None
    _svg_page(page, program, to_dot(spec, path), tmp_path)
    _shot(page, tmp_path, f"graphviz-loops-{extra}")
    texts = page.page.evaluate(SVG_TEXTS)
    clashes = [
        (a["text"], b["text"])
        for i, a in enumerate(texts)
        for b in texts[i + 1 :]
        if a["group"] != b["group"] and overlap(a["box"], b["box"])
    ]
    assert clashes == []  # no label lies on another: each loop's label is a node of its own
    crossings = page.page.evaluate(CROSSINGS, ["svg g.edge path", "svg text"])
    # no loop runs through a label, and no line through a loop's label
    assert [c for c in crossings if "__loop" in c[0] or "__loop" in c[1]] == []
    labels = page.page.evaluate(
        "() => [...document.querySelectorAll('g.node')].filter(g =>"
        " g.querySelector('title').textContent.startsWith('__loop')).map(g => g.textContent)"
    )
    assert len(labels) == 2 + extra
    shown = "".join(labels).replace("\n", "")
    assert ("rejected[retries_left] (retry)" + ("taken (step 1)" if path else "")) in shown


# --- names exactly as declared ----------------------------------------------------------------


def _hostile_spec() -> MachineSpec:
    quoted = HOSTILE.replace("'", "''")
    text = (
        load_machine("agent_loop")
        .text.replace("tool_pending", f"'{quoted}'")
        .replace(
            "{trigger: tool_returned, source:",
            f"{{trigger: tool_returned, guards: ['{GUARD}'], source:",
        )
    )
    return parse_machine(text, source="hostile.yaml")


def test_mermaid_shows_names_exactly_and_runs_none_of_them(mermaid: Watched) -> None:
    spec = _hostile_spec()
    text = to_mermaid(spec)
    assert GUARD.replace(":", ".") not in text  # the old rewrite
    result = render(mermaid, text, show=True)
    assert "error" not in result, result
    lines = {line for b in mermaid.page.evaluate(MERMAID_BOXES) for line in b["lines"]}
    assert HOSTILE in lines
    assert f"[{GUARD}]" in lines
    assert mermaid.page.locator("#out img").count() == 0
    assert mermaid.dialogs == []
    theme = mermaid.page.evaluate("() => getComputedStyle(document.querySelector('#out svg')"
                                  " .querySelector('g.node rect')).fill")  # fmt: skip
    assert theme != "rgb(31, 32, 32)"  # no directive in a name set the dark theme


@pytest.mark.parametrize("program", _renderers())
def test_graphviz_shows_names_exactly(page: Watched, program: str | None, tmp_path: Path) -> None:
    spec = _hostile_spec()
    dot = to_dot(spec)
    assert f"[{GUARD}]" in dot
    svg = _svg_page(page, program, dot, tmp_path)
    assert "<img" not in svg
    texts = {t["text"] for t in page.page.evaluate(SVG_TEXTS)}
    assert HOSTILE in texts
    assert f"[{GUARD}]" in texts


# --- the report's diagram fits its frame at 1280 px ------------------------------------------

FIT = """() => {
  const f = document.querySelector('#diagram figure'), svg = f.querySelector('svg');
  const s = svg.getBoundingClientRect();
  const texts = [...svg.querySelectorAll('text')]
    .map(t => [t.textContent, t.getBoundingClientRect()]);
  const size = name => parseFloat(svg.getAttribute(name));
  return {scrolls: f.scrollWidth > f.clientWidth, width: s.width,
          natural: size('width'), height: size('height'),
          viewBox: svg.getAttribute('viewBox').split(' ').map(parseFloat),
          clipped: texts.filter(([_, r]) => r.left < s.left - .5 || r.right > s.right + .5
                                || r.top < s.top - .5 || r.bottom > s.bottom + .5).map(t => t[0]),
          offscreen: texts.filter(([_, r]) => r.right > innerWidth).map(t => t[0]),
          texts: texts.map(t => t[0])};
}"""


def _wide(row: RunRow) -> RunRow:
    """The run's row with its declaration's state names made long (a wider diagram)."""
    long = "tool_pending_" + "and_waiting_for_the_lookup_service_to_answer_" * 3
    return attrs.evolve(row, machine_text=row.machine_text.replace("tool_pending", long))


@pytest.mark.parametrize("wide", [False, True], ids=["agent_loop", "wider-than-the-frame"])
def test_the_report_diagram_fits_its_frame_at_1280_px(
    page: Watched, looping: tuple[RunRow, list[Event], Path], tmp_path: Path, wide: bool
) -> None:
    if find_renderer() is None:
        missing("no SVG renderer: pip install graphviz-pure (or apt-get install graphviz)")
    row, events, _ = looping
    shown = _wide(row) if wide else row
    report = write_report(incident_report(shown, events), tmp_path / "incident.html")
    page.page.goto(report.as_uri())
    _shot(page, tmp_path, "report-diagram", "#diagram")
    fit = page.page.evaluate(FIT)
    assert fit["viewBox"][2:] == [fit["natural"], fit["height"]]  # drawn in the same units
    assert not fit["scrolls"]
    assert fit["clipped"] == []
    assert fit["offscreen"] == []
    assert "handoff" in fit["texts"]
    assert f"run {row.run_id}: halt handoff_requested" in fit["texts"]
    if wide:
        assert fit["natural"] > 1280
    else:  # fitted, yet at (nearly) Graphviz's own size: legible
        assert fit["width"] / fit["natural"] > 0.9
    page.page.check("#zoom")  # full size: Graphviz's size, scrolling inside its frame
    full = page.page.evaluate(FIT)
    assert full["width"] == pytest.approx(full["natural"])
    if wide:
        assert full["scrolls"]
    assert page.problems() == {"blocked": [], "errors": [], "dialogs": []}


# --- `diagram FILE --run RUN` draws FILE ------------------------------------------------------


def _edited(tmp_path: Path) -> Path:
    """agent_loop without the retried `rejected` self-loop, and with a guard on the
    `collected` edge back to drafting: two edges the looping run took that it lacks."""
    text = load_machine("agent_loop").text
    text = "".join(
        line
        for line in text.splitlines(keepends=True)
        if "trigger: rejected, source: drafting, dest: drafting" not in line
    ).replace(
        "{trigger: collected, source: awaiting_receipts, dest: drafting}",
        "{trigger: collected, source: awaiting_receipts, dest: drafting, guards: [retries_left]}",
    )
    path = tmp_path / "edited.yaml"
    path.write_text(text, encoding="utf-8")
    return path


LACKING = [
    "2 taken edges this declaration lacks (not drawn):",
    "drafting → drafting: rejected [retries_left] (retry), taken (step 1)",
    "awaiting_receipts → drafting: collected, taken (step 3)",
]


def test_diagram_of_another_declaration_draws_it_and_names_the_taken_edges_it_lacks(
    looping: tuple[RunRow, list[Event], Path], tmp_path: Path, mermaid: Watched
) -> None:
    row, _, db = looping
    edited = _edited(tmp_path)
    runner = CliRunner()
    done = runner.invoke(cli, ["diagram", str(edited), "--run", row.run_id, "--db", str(db)],
                         catch_exceptions=False)  # fmt: skip
    assert done.exit_code == 0, done.output
    sha = load_machine(str(edited)).sha256
    assert done.stderr.splitlines() == [
        f"note: {edited} is not the declaration run {row.run_id} journaled (sha256 {sha[:12]},"
        f" it ran {row.machine_sha256[:12]}): its path is drawn where the two declare the same"
        " edges",
        *(f"note: {line}" for line in LACKING),
    ]
    text = done.stdout
    assert [line.strip() for line in text.splitlines() if line.strip().startswith("%%")] == [
        f"%% {line}" for line in LACKING
    ]
    # FILE is drawn: its guarded `collected` edge, not the journaled one, and no `rejected` loop
    assert 'awaiting_receipts -->|"collected<br>[retries_left]"| drafting' in links(text)
    assert "rejected<br>[retries_left] (retry)" not in text
    blue = sorted(links(text)[i] for i in styled(text, TAKEN))
    loop = next(n for n in re.findall(r"(loop\d+_)\[", text) if f"{n} --> drafting" in text)
    assert blue == sorted([
        'drafting -->|"tool_call<br>taken (step 3)"| tool_pending',
        'tool_pending -->|"tool_returned<br>taken (step 3)"| awaiting_receipts',
        'drafting -->|"handoff<br>/ handoff_requested<br>taken (step 4)"| handoff',
        f"drafting --- {loop}", f"{loop} --> drafting",  # the answer loop, out and back
    ])  # fmt: skip
    assert f'{loop}["answer<br>[retries_left] (retry)<br>taken (step 2)"]' in text
    assert "drawn on a declaration other than the one it ran" in text
    result = render(mermaid, text, show=True)
    assert "error" not in result, result
    caption = [b["lines"] for b in mermaid.page.evaluate(MERMAID_BOXES) if "lacking" in b["id"]]
    assert caption == [LACKING]

    dot = runner.invoke(cli, ["diagram", str(edited), "--run", row.run_id, "--db", str(db),
                              "--format", "dot"], catch_exceptions=False)  # fmt: skip
    assert dot.exit_code == 0
    assert [f"  // {line}" for line in LACKING] == [
        line for line in dot.stdout.splitlines() if line.startswith("  //")
    ]
    if find_renderer() is not None:
        svg = tmp_path / "d.svg"
        drew = runner.invoke(cli, ["diagram", str(edited), "--run", row.run_id, "--db", str(db),
                                   "--format", "svg", "-o", str(svg)])  # fmt: skip
        assert drew.exit_code == 0, drew.output
        assert "lacks" in drew.stderr
        drawn = re.findall(r">([^<]*)</text>", svg.read_text(encoding="utf-8"))
        assert {html.unescape(d) for d in drawn} >= set(LACKING)


def test_diagram_of_the_declaration_that_ran_says_nothing_more(
    looping: tuple[RunRow, list[Event], Path],
) -> None:
    row, _, db = looping
    done = CliRunner().invoke(cli, ["diagram", "agent_loop", "--run", row.run_id, "--db", str(db)])
    assert done.exit_code == 0
    assert done.stderr == ""
    assert "%%" not in done.stdout
    assert "lacks" not in done.stdout
    assert "other than the one it ran" not in done.stdout
