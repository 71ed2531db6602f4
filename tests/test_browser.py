"""In a real headless browser (Debian chromium driven by Playwright, no internet): the
incident report opens offline and safely, and the Mermaid text renders with the real
`mermaid` library, installed from the npm registry at test time.

Skips when chromium, Playwright, npm or an SVG renderer is missing, naming the package; CI
sets FSM_AGENT_BROWSER_TESTS=require so that a missing tool fails instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fsm_agent.declaration.load import load_machine, parse_machine
from fsm_agent.journal.store import Event, RunRow
from fsm_agent.review.diagram import run_path, to_mermaid
from fsm_agent.review.report import incident_report, write_report
from fsm_agent.review.svg_render import find_renderer
from tests.browser_mermaid import NO_PROBLEMS, mermaid_script, render
from tests.browser_mermaid import mermaid_page as open_mermaid
from tests.browser_page import Watched, launch_chromium, missing, watched_page
from tests.browser_runs import SCRIPT, completed_run, hostile_names_run, hostile_run
from tests.test_diagram_render import GUARD, MERMAID_BOXES

if TYPE_CHECKING:
    from playwright.sync_api import Browser


#: What the page shows that a locator cannot say, measured in the page.
PROBE = """() => ({
  pwned: typeof window.__pwned,
  page_fits_width: document.documentElement.scrollWidth <= innerWidth,
})"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One chromium for every browser test (they are all in this module). Not session-scoped:
    while Playwright's sync API runs, its event loop is marked running on this thread, and
    `asyncio.run` in a later module (the async adapter's tests) would refuse to start."""
    yield from launch_chromium()


@pytest.fixture
def laptop_page(browser: Browser) -> Iterator[Watched]:
    """A fresh page 1280 px wide: the laptop width an on-call engineer reads a report at."""
    seen = watched_page(browser, width=1280)
    try:
        yield seen
    finally:
        seen.close()


@pytest.fixture
def graphviz() -> None:
    if find_renderer() is None:
        missing("no SVG renderer: pip install graphviz-pure (or apt-get install graphviz)")


def test_the_page_watch_catches_requests_errors_and_dialogs(
    laptop_page: Watched, tmp_path: Path
) -> None:
    """The assertions below can fail: a page without the report's defences is caught."""
    html = tmp_path / "leaky.html"
    html.write_text(
        '<!DOCTYPE html><img src="http://192.0.2.1/pixel.png"><script>'
        'console.error("boom"); fetch("https://example.invalid/x").catch(() => {});'
        'alert("hi"); throw new Error("uncaught!")</script>',
        encoding="utf-8",
    )
    laptop_page.page.goto(html.as_uri())
    laptop_page.page.wait_for_function("performance.getEntriesByType('resource').length >= 2")
    assert sorted(laptop_page.blocked) == [
        "http://192.0.2.1/pixel.png",
        "https://example.invalid/x",
    ]
    assert laptop_page.requests[0] == html.as_uri()
    assert laptop_page.dialogs == ["alert: hi"]
    assert "console.error: boom" in laptop_page.errors
    assert "uncaught: uncaught!" in laptop_page.errors


@pytest.mark.parametrize(
    ("make_run", "halt", "shows"),
    [
        (hostile_run, "handoff_requested", SCRIPT),
        (hostile_names_run, "completed", f"evil {SCRIPT}"),
        (completed_run, "completed", "30 days from delivery"),
    ],
)
@pytest.mark.usefixtures("graphviz")
def test_the_report_opens_offline_shows_the_halt_and_runs_no_injected_script(
    laptop_page: Watched,
    tmp_path: Path,
    make_run: Callable[[Path], tuple[RunRow, list[Event]]],
    halt: str,
    shows: str,
) -> None:
    from playwright.sync_api import expect

    row, events = make_run(tmp_path)
    report = write_report(incident_report(row, events), tmp_path / "incident.html")
    page = laptop_page.page
    page.goto(report.as_uri())
    shot = tmp_path / "incident.png"
    page.screenshot(path=shot, full_page=True)
    print(f"screenshot: {shot}")
    pdf = page.pdf(path=tmp_path / "incident.pdf", landscape=True, print_background=True)
    badge = page.locator("#halt .badge.halt")
    expect(badge).to_have_text(halt)
    expect(badge).to_be_in_viewport(ratio=1)  # in the first screen, whole
    expect(page.locator("#diagram svg")).to_be_visible()
    # six states, the start, and a label node for each of drafting's two self-loops
    expect(page.locator("#diagram svg g.node")).to_have_count(9)
    expect(page.locator("script")).to_have_count(0)
    expect(page.locator("img")).to_have_count(0)
    expect(page.locator("body")).to_contain_text(shows, use_inner_text=True)  # as text
    # the library call was given no chain verdict
    chain = page.locator("header .badge").filter(has_text=re.compile(r"^chain"))
    expect(chain).to_have_text("chain: not checked")
    # the guard that decided the halt stands out (a model's handoff request has none)
    guard = page.locator("tr.halt-bad li.g-halt, tr.halt-ok li.g-done").first
    if halt == "handoff_requested":
        expect(guard).to_be_hidden()
    else:
        expect(guard).to_be_visible()
    # at 1280 px only the diagram scrolls, inside its frame
    assert page.evaluate(PROBE) == {"pwned": "undefined", "page_fits_width": True}
    assert laptop_page.problems() == NO_PROBLEMS  # no request left file://, no alert() ran
    assert laptop_page.requests == [report.as_uri()]
    assert shot.stat().st_size > 10_000
    assert pdf.startswith(b"%PDF")


# --- Mermaid -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def mermaid_js(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mermaid.min.js from the npm registry (see `browser_mermaid`)."""
    return mermaid_script(request, tmp_path_factory)


@pytest.fixture(scope="module")
def mermaid_page(
    browser: Browser, mermaid_js: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Watched]:
    """A local page that loads mermaid.min.js from file:// and nothing else."""
    seen = open_mermaid(browser, mermaid_js, tmp_path_factory.mktemp("mermaid"))
    try:
        yield seen
    finally:
        seen.close()


@pytest.mark.parametrize("machine", ["agent_loop", "examples/payments_retry/payments.yaml"])
def test_mermaid_renders_a_machine(mermaid_page: Watched, machine: str) -> None:
    result = render(mermaid_page, to_mermaid(load_machine(machine)))
    assert "error" not in result, result
    assert result["svg"].startswith("<svg")
    assert "drafting" in result["svg"]
    assert "budget_exhausted" in result["svg"]


def test_mermaid_renders_a_highlighted_run(mermaid_page: Watched, tmp_path: Path) -> None:
    row, events = hostile_run(tmp_path)
    spec = parse_machine(row.machine_text, source="journal")
    result = render(mermaid_page, to_mermaid(spec, run_path(spec, row.run_id, events)))
    assert "error" not in result, result
    assert "halted" in result["svg"]
    assert "taken (step 3)" in result["svg"]
    assert f"run {row.run_id}: halt handoff_requested" in result["svg"]


def test_the_mermaid_check_fails_a_broken_diagram(mermaid_page: Watched) -> None:
    good = "stateDiagram-v2\n    drafting --> done: answer [answer_grounded] / completed\n"
    assert "svg" in render(mermaid_page, good)
    result = render(mermaid_page, good.replace("--> done", "--> --> ((done"))
    assert "svg" not in result
    assert "Parse error" in result["error"]


# --- every declaration the loader accepts exports as Mermaid the real parser accepts ----------

_AWKWARD = [
    "needs-review", "note", "class", "default", "style", "state", "end", "direction", "Note",
    ":", ": x", "[*]", "a --> b", "x: y", "%% not a comment", "#1", "a;b", '"quoted"',
    "<b>bold</b>",
    "9lives", "3", "naïve café", "日本語の状態", "s1", "s0", "{curly}", "back\\slash", "a`b",
    "graph", "subgraph", "linkStyle", "flowchart", "x", "o", "box", "start_", "lacking_",
    "loop6_", "A---oB", "a -.-> b", "a|b", "&lt;", "&amp;", "`md`", "**bold**", "%%{init: {}}%%",
    "#quot;", "mod:fn",
]  # fmt: skip
_names = st.one_of(
    st.sampled_from(_AWKWARD),
    st.from_regex(r"[a-z]+(-[a-z0-9]+)+", fullmatch=True),
    st.from_regex(r"[0-9][a-z0-9_]{0,10}", fullmatch=True),
    st.text(st.characters(categories=["L", "N", "P", "S", "Zs"]), min_size=1, max_size=120),
).filter(
    lambda n: bool(n.strip()) and len(n) <= 200 and n not in ("done", "budget_exhausted", "handoff")
)


def _generated_machine(names: list[str], triggers: list[str]) -> str:
    def q(name: str) -> str:
        return json.dumps(name, ensure_ascii=False)

    a, b = q(names[0]), q(names[1])
    action = "fsm_agent.examples.payments_retry.webhook:await_capture_webhook"
    return f"""name: generated
initial: {a}
budgets: {{max_steps: 3, wall_clock_ms: 1000, max_cost: 1.0, tool_timeout_ms: 500, max_retries: 1}}
states:
  {a}: {{action: model}}
  {b}: {{action: {action}}}
  done: {{terminal: true}}
  budget_exhausted: {{terminal: true}}
  handoff: {{terminal: true}}
transitions:
  - {{trigger: tool_call, source: {a}, dest: {b}}}
  - {{trigger: answer, source: {a}, dest: done, guards: [answer_grounded], halt: completed}}
  - {{trigger: handoff, source: {a}, dest: handoff, halt: handoff_requested}}
  - {{trigger: rejected, source: {a}, dest: handoff, halt: schema_fail}}
  - {{trigger: {q(triggers[0])}, source: {b}, dest: {a}}}
  - {{trigger: {q(triggers[1])}, source: {b}, dest: handoff, halt: tool_error}}
  - {{trigger: {q(triggers[0])}, source: {b}, dest: {b}, guards: [{q(GUARD)}]}}
"""


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(_names, min_size=2, max_size=2, unique=True),
    triggers=st.lists(_names, min_size=2, max_size=2, unique=True).filter(
        lambda ts: not {"budget"} & set(ts)
    ),
)
@example(names=["needs-review", "note"], triggers=["needs-review", " 0"])  # CI found it
@example(names=["needs-review", "0\xa0"], triggers=["needs-review", "note"])  # and this
@example(names=["\u3000x", "y\u2003"], triggers=["a\u00a0", "\u205fb"])  # other end spaces
def test_mermaid_is_valid_for_every_name_the_loader_accepts(
    mermaid_page: Watched, names: list[str], triggers: list[str]
) -> None:
    spec = parse_machine(_generated_machine(names, triggers), source="generated.yaml")
    text = to_mermaid(spec)
    assert text.count("\n") == len(text.splitlines())  # no name broke a line
    result = render(mermaid_page, text, show=True)
    assert "error" not in result, (text, result)
    assert result["svg"].startswith("<svg")
    assert result["svg"].count("<script") == 0
    # every name is drawn exactly as declared, each on a line of its own (a space at either
    # end drawn as a no-break space, which the label keeps: the two look the same)
    boxes = mermaid_page.page.evaluate(MERMAID_BOXES)
    lines = {_seen(line) for box in boxes for line in box["lines"]}
    assert {_seen(n) for n in (*names, *triggers, f"[{GUARD}]")} <= lines, text


def _seen(text: str) -> str:
    """What a person sees of a name: a no-break space looks like a space."""
    return text.replace("\xa0", " ")
