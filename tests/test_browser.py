"""In a real headless browser (Debian chromium over the DevTools protocol, no internet): the
incident report opens offline and safely, and the Mermaid text renders with the real
`mermaid` library, installed from the npm registry at test time.

Skips when chromium, npm or an SVG renderer is missing, naming the package; CI sets
FSM_AGENT_BROWSER_TESTS=require so that a missing tool fails instead.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm_agent.declaration.load import load_machine, parse_machine
from fsm_agent.journal.store import Event, RunRow
from fsm_agent.review.diagram import run_path, to_mermaid
from fsm_agent.review.report import incident_report, write_report
from fsm_agent.review.svg_render import find_renderer
from tests.browser_cdp import Browser, Page, missing, start_browser
from tests.browser_runs import SCRIPT, completed_run, hostile_names_run, hostile_run

MERMAID = "mermaid@11"

#: What the page shows, measured in the page.
PROBE = """(() => {
  const shown = (el) => {
    if (!el) return false;
    const r = el.getBoundingClientRect(), s = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && s.visibility === "visible" && s.display !== "none";
  };
  const svg = document.querySelector("#diagram svg");
  const halt = document.querySelector("#halt .badge.halt");
  return {
    pwned: typeof window.__pwned,
    scripts: document.querySelectorAll("script").length,
    images: document.images.length,
    svg_shown: shown(svg),
    svg_nodes: svg ? svg.querySelectorAll("g.node").length : 0,
    halt: halt ? halt.textContent : null,
    halt_in_first_screen: shown(halt) && halt.getBoundingClientRect().bottom < innerHeight,
    markup_as_text: document.body.innerText.includes(%s),
    page_fits_width: document.documentElement.scrollWidth <= innerWidth,
    chain_badge: [...document.querySelectorAll("header .badge")].map(b => b.textContent)
      .filter(t => t.startsWith("chain"))[0] || null,
    halting_guard_shown: shown(
      document.querySelector("tr.halt-bad li.g-halt, tr.halt-ok li.g-done")),
  };
})()"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    yield from start_browser(tmp_path_factory.mktemp("chromium-profile"))


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    tab = browser.new_page()
    try:
        yield tab
    finally:
        tab.close()


@pytest.fixture
def graphviz() -> None:
    if find_renderer() is None:
        missing("no SVG renderer: pip install graphviz-pure (or apt-get install graphviz)")


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
    browser: Browser,
    tmp_path: Path,
    make_run: Callable[[Path], tuple[RunRow, list[Event]]],
    halt: str,
    shows: str,
) -> None:
    row, events = make_run(tmp_path)
    report = write_report(incident_report(row, events), tmp_path / "incident.html")
    page = browser.new_page(width=1280)  # the laptop width an on-call engineer reads it at
    page.open(report.as_uri())
    seen = page.evaluate(PROBE % json.dumps(shows))
    shot = page.screenshot(tmp_path / "incident.png")
    print(f"screenshot: {shot}")
    pdf = page.send("Page.printToPDF", landscape=True, printBackground=True)["data"]
    (tmp_path / "incident.pdf").write_bytes(base64.b64decode(pdf))
    assert page.console_errors() == []
    assert page.requested_urls() == [report.as_uri()]
    assert page.events("Page.javascriptDialogOpening") == []  # no alert() ran either
    assert seen == {
        "pwned": "undefined",
        "scripts": 0,
        "images": 0,
        "svg_shown": True,
        "svg_nodes": 7,  # six states and the start point
        "halt": halt,
        "halt_in_first_screen": True,
        "markup_as_text": True,
        "page_fits_width": True,  # at 1280 px: only the diagram scrolls, inside its frame
        "chain_badge": "chain: not checked",  # the library call was given no chain verdict
        # the guard that decided the halt stands out (a model's handoff request has none)
        "halting_guard_shown": halt != "handoff_requested",
    }
    assert shot.stat().st_size > 10_000
    assert (tmp_path / "incident.pdf").read_bytes().startswith(b"%PDF")


# --- Mermaid -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def mermaid_js(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mermaid.min.js from the npm registry, installed once into FSM_AGENT_MERMAID_DIR or the
    pytest cache (.pytest_cache/d/fsm-agent-mermaid) and reused by later sessions."""
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    prefix = Path(
        os.environ.get("FSM_AGENT_MERMAID_DIR")
        or (cache.mkdir("fsm-agent-mermaid") if cache else tmp_path_factory.mktemp("npm"))
    )
    script = prefix / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"
    if not script.exists():
        npm = shutil.which("npm")
        if npm is None:
            missing("npm missing: apt-get install npm (mermaid comes from the npm registry)")
        command = [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", MERMAID]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, f"npm install {MERMAID} failed:\n{done.stderr[-3000:]}"
    return script


@pytest.fixture(scope="module")
def mermaid_page(
    browser: Browser, mermaid_js: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Page]:
    """A local page that loads mermaid.min.js from file:// and nothing else."""
    html = tmp_path_factory.mktemp("mermaid") / "render.html"
    html.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8">'
        f'<script src="{mermaid_js.as_uri()}"></script></head><body></body></html>',
        encoding="utf-8",
    )
    tab = browser.new_page()
    try:
        tab.open(html.as_uri())
        assert tab.evaluate("typeof mermaid") == "object", tab.console_errors()
        tab.evaluate('mermaid.initialize({startOnLoad: false, securityLevel: "strict"}), 1')
        yield tab
    finally:
        tab.close()


_ids = itertools.count()


def render(page: Page, text: str) -> dict[str, Any]:
    """`mermaid.render` in the page: {"svg": …} or {"error": …}. Nothing fetched."""
    result: dict[str, Any] = page.evaluate(
        f"mermaid.render('m{next(_ids)}', {json.dumps(text)})"
        ".then(r => ({svg: r.svg}), e => ({error: String(e && e.message || e)}))"
    )
    assert all(u.startswith("file://") for u in page.requested_urls()), page.requested_urls()
    return result


@pytest.mark.parametrize("machine", ["agent_loop", "examples/payments_retry/payments.yaml"])
def test_mermaid_renders_a_machine(mermaid_page: Page, machine: str) -> None:
    result = render(mermaid_page, to_mermaid(load_machine(machine)))
    assert "error" not in result, result
    assert result["svg"].startswith("<svg")
    assert "drafting" in result["svg"]
    assert "budget_exhausted" in result["svg"]


def test_mermaid_renders_a_highlighted_run(mermaid_page: Page, tmp_path: Path) -> None:
    row, events = hostile_run(tmp_path)
    spec = parse_machine(row.machine_text, source="journal")
    result = render(mermaid_page, to_mermaid(spec, run_path(spec, row.run_id, events)))
    assert "error" not in result, result
    assert "halted" in result["svg"]
    assert "taken (step 3)" in result["svg"]
    assert f"run {row.run_id}: halt handoff_requested" in result["svg"]


def test_the_mermaid_check_fails_a_broken_diagram(mermaid_page: Page) -> None:
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
"""


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(_names, min_size=2, max_size=2, unique=True),
    triggers=st.lists(_names, min_size=2, max_size=2, unique=True).filter(
        lambda ts: not {"budget"} & set(ts)
    ),
)
def test_mermaid_is_valid_for_every_name_the_loader_accepts(
    mermaid_page: Page, names: list[str], triggers: list[str]
) -> None:
    spec = parse_machine(_generated_machine(names, triggers), source="generated.yaml")
    text = to_mermaid(spec)
    assert text.count("\n") == len(text.splitlines())  # no name broke a line
    result = render(mermaid_page, text)
    assert "error" not in result, (text, result)
    assert result["svg"].startswith("<svg")
    assert result["svg"].count("<script") == 0
