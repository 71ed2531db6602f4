"""The console in a real headless browser (Debian chromium driven by Playwright), served by a
real `fsm-agent console` process over a real SQLite journal: the run list and its
filters, stepping through a run with the keyboard, the charts, a live run moved one
transition at a time by another process, an operator act from the page (journaled, shown
by `fsm-agent show`), its refusal in a read-only console and from another origin, and
hostile journal text that stays text. No request leaves the console's origin.

Skips when chromium or Playwright is missing; CI sets FSM_AGENT_BROWSER_TESTS=require.
Set FSM_AGENT_CONSOLE_SCREENSHOT=docs/console.png to write the README's screenshot (from
`test_a_live_run_moves_step_by_step_while_another_process_writes_it`; otherwise it goes
to the test's tmp directory).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from fsm_agent.errors import JournalError, NotAJournal
from fsm_agent.stores.sqlite import SqliteStore
from tests.browser_page import Watched, launch_chromium, watched_page
from tests.browser_runs import SCRIPT
from tests.console_live_child import HOSTILE_OUTPUT
from tests.console_server import Console, console, three_runs

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

ROOT = Path(__file__).resolve().parent.parent
NO_PROBLEMS: dict[str, list[str]] = {"blocked": [], "errors": [], "dialogs": []}
WAIT_MS = 30_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    yield from launch_chromium()


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return three_runs(tmp_path_factory.mktemp("console-browser"))


@pytest.fixture(scope="module")
def read_only(journal: Path) -> Iterator[Console]:
    with console(journal) as c:
        yield c


def page_on(browser: Browser, c: Console) -> Watched:
    """A watched page that may talk to the console's origin and nothing else."""
    return watched_page(browser, allowed=(c.url + "/",))


def _hostile_id(journal: Path) -> str:
    store = SqliteStore(journal, read_only=True)
    try:
        (run,) = [r for r in store.list_runs(None) if SCRIPT in r.task]
        return run.run_id
    finally:
        store.close()


def test_the_run_list_filters_in_the_browser(browser: Browser, read_only: Console) -> None:
    seen = page_on(browser, read_only)
    try:
        page = seen.page
        page.goto(read_only.url + "/")
        rows = page.locator("#runs tbody tr")
        assert rows.count() == 3
        page.select_option("select[name=halt_reason]", "max_steps")
        page.click("#filters button[type=submit]")
        page.wait_for_url("**/?*halt_reason=max_steps*")
        assert [rows.nth(i).get_attribute("data-run") for i in range(rows.count())] == [
            "capped-run"
        ]
        page.goto(read_only.url + "/")
        page.fill("input[name=text]", "</td><img")  # hostile text as a filter
        page.click("#filters button[type=submit]")
        page.wait_for_load_state()
        assert rows.count() == 1
        assert page.input_value("input[name=text]") == "</td><img"
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert page.locator("#runs img").count() == 0
        assert SCRIPT in (page.locator("#runs td.task").first.text_content() or "")
        assert seen.problems() == NO_PROBLEMS
    finally:
        seen.close()


def test_stepping_through_a_run_with_the_keyboard(
    browser: Browser, read_only: Console, journal: Path
) -> None:
    seen = page_on(browser, read_only)
    try:
        page = seen.page
        page.goto(f"{read_only.url}/runs/{_hostile_id(journal)}")
        detail = page.locator("#step-detail")
        for key, seq in (("j", "0"), ("j", "1"), ("ArrowDown", "2"), ("k", "1"),
                         ("ArrowRight", "2"), ("ArrowLeft", "1")):  # fmt: skip
            page.keyboard.press(key)
            page.wait_for_function(
                "s => document.getElementById('step-detail')?.dataset.seq === s", arg=seq
            )
            assert page.locator("#timeline tr.current").get_attribute("data-seq") == seq
        text = detail.text_content() or ""
        for part in ("Guards", "Model reply", "Meters", "Snapshot", SCRIPT):
            assert part in text, part
        _assert_readable_where_chosen(page)
        for _ in range(8):  # every step, the tool call's hostile args too
            page.keyboard.press("j")
        page.wait_for_timeout(300)
        _assert_readable_where_chosen(page)
        assert detail.locator("img, script").count() == 0
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert page.locator("#halt").is_visible()
        assert page.locator("#diagram svg").count() == 1
        assert "replay: proven" in (page.locator("#replay").text_content() or "")
        assert seen.problems() == NO_PROBLEMS
    finally:
        seen.close()


def _assert_readable_where_chosen(page: Page) -> None:
    """The step opens in the row right under the chosen timeline row, in sight, as text in
    tables (the JSON as journaled only folded away)."""
    at = page.evaluate(
        """() => {
        const row = document.querySelector('#timeline tr.current');
        const next = row.nextElementSibling;
        const box = document.getElementById('step-detail').getBoundingClientRect();
        const parts = document.querySelector('#step-detail .step-parts');
        return {under: next.classList.contains('step-detail-row')
                       && next.contains(document.getElementById('step-detail')),
                top: box.top, height: window.innerHeight,
                under_top: next.getBoundingClientRect().top,
                rowBottom: row.getBoundingClientRect().bottom,
                json: parts.innerText.includes('{"'),
                folded: !document.querySelector('#step-detail details').open,
                tables: parts.querySelectorAll('table').length};
    }"""
    )
    assert at["under"], at
    assert 0 <= at["top"] < at["height"], at  # where the reader is looking
    assert abs(at["under_top"] - at["rowBottom"]) < 4, at
    assert not at["json"], at
    assert at["folded"], at
    assert at["tables"] >= 2, at  # the meters and the snapshot at least


def test_the_charts_draw_from_the_package_alone(browser: Browser, read_only: Console) -> None:
    seen = page_on(browser, read_only)
    try:
        page = seen.page
        page.goto(read_only.url + "/charts?since=1d")
        page.wait_for_function(
            "() => document.getElementById('charts-summary').textContent.startsWith('3 runs')"
        )
        drawn = page.evaluate(
            "Array.from(document.querySelectorAll('canvas')).map(c => Boolean(Chart.getChart(c)))"
        )
        assert drawn == [True] * 5
        assert page.locator("#tools-table tbody tr").count() >= 2  # search, lookup
        assert all(u.startswith(read_only.url + "/") for u in seen.requests)
        assert seen.problems() == NO_PROBLEMS
    finally:
        seen.close()


def _start_child(db: Path, gates: Path, run_id: str, steps: int) -> subprocess.Popen[str]:
    gates.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(ROOT / "tests" / "console_live_child.py"), "--db", str(db),
           "--gates", str(gates), "--run-id", run_id, "--steps", str(steps)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env)  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until the run's first transition is journaled
        if db.exists():
            try:
                store = SqliteStore(db, read_only=True)
            except (JournalError, NotAJournal):  # being created this instant
                time.sleep(0.05)
                continue
            try:
                if store.run_ids_from(run_id, 1) and store.last_event(run_id).seq >= 1:
                    return child
            finally:
                store.close()
        assert child.poll() is None, child.communicate()
        time.sleep(0.05)
    child.kill()
    raise AssertionError("the live run did not start")


def _screenshot_path(tmp_path: Path) -> Path:
    wanted = os.environ.get("FSM_AGENT_CONSOLE_SCREENSHOT")
    path = Path(wanted) if wanted else tmp_path / "console.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _logged(page: Page) -> list[int]:
    """The seqs the live log lists, in order."""
    seqs: list[str] = page.eval_on_selector_all(
        "#live-log li", "items => items.map(i => i.dataset.seq)"
    )
    return [int(x) for x in seqs]


def _wait_timeline(page: Page, rows: int) -> None:
    page.wait_for_function(
        "n => document.querySelectorAll('#timeline tr[data-seq]').length === n",
        arg=rows, timeout=WAIT_MS,
    )  # fmt: skip


def _list_row(listing: Page, text: str) -> None:
    """Wait until the run list's row of the live run reads `text` (its status, halt, steps
    as shown), drawn again by the page's script."""
    listing.wait_for_function(
        "t => (document.querySelector('#runs tr[data-run=\"live-run\"]')?.innerText || '')"
        ".replace(/\\s+/g, ' ').includes(t)",
        arg=text, timeout=WAIT_MS,
    )  # fmt: skip


@pytest.mark.slow
def test_a_live_run_moves_step_by_step_while_another_process_writes_it(
    browser: Browser, tmp_path: Path
) -> None:
    """Every transition appears as it is journaled (with the tool call and its arguments),
    the report's parts (chain badge, usage, timeline) are drawn again with it, the running
    run is shown running (no red badge), the run list follows it, and once it halts the
    page shows its final meters, without reloading."""
    db, gates = tmp_path / "fsm-agent.db", tmp_path / "gates"
    child = _start_child(db, gates, "live-run", steps=3)
    try:
        with console(db, beside=True) as c:
            seen, listed = page_on(browser, c), page_on(browser, c)
            try:
                page, listing = seen.page, listed.page
                listing.goto(c.url + "/")
                page.goto(c.url + "/runs/live-run")
                page.evaluate("window.__kept = 1")  # gone if the page reloads
                assert page.locator("#live-step").text_content() == "step 1/6"
                assert page.locator("#live-status").text_content() == "running"
                _list_row(listing, "running — 1/6")
                for k in (1, 2):
                    (gates / f"go-{k}").touch()
                    seq = 3 * k + 1  # each step: the tool's return, its receipts, the next call
                    _wait_timeline(page, seq + 1)
                    page.wait_for_function(
                        "s => document.getElementById('live-step').textContent === s",
                        arg=f"step {k + 1}/6", timeout=WAIT_MS,
                    )  # fmt: skip
                    assert _logged(page) == list(range(2, seq + 1))  # every one, in order
                    log = page.locator("#live-log").inner_text()
                    assert f'call: gated({{"step": {k}}}) (read) -> returned' in log
                    assert f'"args": {{"step": {k + 1}}}' in log  # the next call's arguments
                    header = page.locator("#report-header").inner_text()
                    assert f"chain: ok ({seq + 1} events)" in header
                    assert "replay waits for the halt (the run is running)" in header
                    halt = page.locator("#halt").inner_text()
                    assert "no halt record yet: the run is running, in state tool_pending" in halt
                    red = "#run .badge.bad"
                    assert page.locator(red).count() == 0
                    tools = page.locator("#usage table tbody tr").first.inner_text().split()
                    assert tools[:2] == ["gated", str(k)]
                    assert page.locator(".meter[data-meter='steps'] .m-text").text_content() == (
                        f"{k + 1} / 6"
                    )
                    assert "UNVERIFIED" not in page.inner_text("body")
                    _list_row(listing, f"running — {k + 1}/6")
                page.screenshot(path=str(_screenshot_path(tmp_path)), full_page=False)
                page.screenshot(path=str(tmp_path / "live-full.png"), full_page=True)
                listing.screenshot(path=str(tmp_path / "list-live.png"))
                page.keyboard.press("j")
                page.keyboard.press("j")
                page.wait_for_function(
                    "() => document.getElementById('step-detail')?.dataset.seq === '1'"
                )
                (gates / "go-3").touch()
                page.wait_for_function(
                    "() => document.getElementById('live').dataset.final === '1'",
                    timeout=WAIT_MS,
                )
                assert page.evaluate("window.__kept") == 1  # drawn again, not reloaded
                assert page.locator("#live-status").text_content() == "halted"
                clock = page.locator("#live-clock").text_content() or ""
                assert clock.startswith("wall clock used "), clock
                assert "wall clock left" not in page.inner_text("body")
                assert _logged(page) == list(range(2, 11))
                assert "halt: completed" in page.locator("#live-log").inner_text()
                _wait_timeline(page, 11)
                assert "completed" in page.locator("#halt .badge.halt").inner_text()
                assert "replay: proven" in page.locator("#replay").inner_text()
                assert "chain: ok (11 events)" in page.locator("#report-header").inner_text()
                # the chosen step is still open under its row after the redraws
                assert page.locator("#timeline tr.current").get_attribute("data-seq") == "1"
                assert page.locator("#timeline tr.step-detail-row #step-detail").count() == 1
                assert HOSTILE_OUTPUT in (page.locator("#timeline").text_content() or "")
                assert page.locator("#timeline img, #timeline b").count() == 0
                _list_row(listing, "halted completed 4/6")
                assert listing.locator("#runs tr[data-run='live-run'] .badge.ok").count() == 1
                page.screenshot(path=str(tmp_path / "ended.png"), full_page=True)
                listing.screenshot(path=str(tmp_path / "list-ended.png"))
                assert seen.problems() == NO_PROBLEMS
                assert listed.problems() == NO_PROBLEMS
            finally:
                seen.close()
                listed.close()
        assert child.wait(timeout=60) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


#: A page of another site that tries to act through the console the browser can reach:
#: a script's POST (no-cors: the only kind it may send without asking) and a form's.
ATTACK = """<!DOCTYPE html><html><body>
<form id="f" method="POST" action="{url}/acts/pause" enctype="text/plain">
<input name='{{"run_id": "live-run", "why": "csrf", "x": "' value='"}}'></form>
<script>
fetch("{url}/acts/freeze-routing", {{method: "POST", mode: "no-cors",
  headers: {{"Content-Type": "text/plain"}}, body: '{{"why": "csrf"}}'}})
  .finally(() => document.getElementById("f").submit());
</script></body></html>"""


def _attack(browser: Browser, c: Console) -> None:
    """Open ATTACK from http://attacker.test (served by the test itself) and let it try."""
    seen = watched_page(browser, allowed=(c.url + "/",))
    try:
        html = ATTACK.format(url=c.url)
        seen.page.route(
            "http://attacker.test/**",
            lambda route: route.fulfill(status=200, content_type="text/html", body=html),
        )
        seen.page.goto("http://attacker.test/")
        seen.page.wait_for_url(c.url + "/acts/pause", timeout=WAIT_MS)
        assert "wrong console token" in (seen.page.text_content("body") or "")
        assert seen.dialogs == []
    finally:
        seen.close()


def _act_count(db: Path) -> int:
    store = SqliteStore(db, read_only=True)
    try:
        return len(store.controls("live-run"))
    finally:
        store.close()


@pytest.mark.slow
def test_an_operator_act_from_the_page_is_journaled_like_the_cli(
    browser: Browser, tmp_path: Path
) -> None:
    db, gates = tmp_path / "acts.db", tmp_path / "gates"
    child = _start_child(db, gates, "live-run", steps=3)
    try:
        with console(db) as ro:  # read-only: no form, and a POST finds no route
            seen = page_on(browser, ro)
            seen.page.goto(ro.url + "/runs/live-run")
            assert seen.page.locator("form.act").count() == 0
            status = seen.page.evaluate(
                "fetch('/acts/pause', {method: 'POST', headers: {'Content-Type':"
                " 'application/json'}, body: JSON.stringify({run_id: 'live-run', why: 'x'})})"
                ".then(r => r.status)"
            )
            assert status in (404, 405)
            seen.close()
        with console(db, "--allow-operator-acts") as c:
            _attack(browser, c)
            assert _act_count(db) == 0
            seen = page_on(browser, c)
            page = seen.page
            page.goto(c.url + "/runs/live-run")
            raising = page.locator('form.act[data-act="raise-budget"]')
            raising.locator("input[name='cap:max_steps']").fill("9")
            raising.locator("input[name=why]").fill("the furnace needs longer")
            raising.locator("input[name=who]").fill("ops-bob")
            raising.locator("button").click()
            page.wait_for_function(
                "() => document.querySelector('form.act[data-act=raise-budget] output')"
                ".textContent.startsWith('raise-budget #')"
            )
            form = page.locator('form.act[data-act="pause"]')
            form.locator("input[name=why]").fill("incident 42: <b>stop</b>")
            form.locator("input[name=who]").fill("ops-alice")
            form.locator("button").click()
            page.wait_for_function(
                "() => document.querySelector('form.act[data-act=pause] output')"
                ".textContent.startsWith('pause of live-run queued')"
            )
            assert _act_count(db) == 2
            (gates / "go-1").touch()  # the run reaches its next model call and pauses
            page.wait_for_function(
                "() => document.getElementById('live-status').textContent === 'paused'",
                timeout=WAIT_MS,
            )
            assert seen.problems() == NO_PROBLEMS
            seen.close()
        assert child.wait(timeout=60) == 75
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    shown = subprocess.run(
        [sys.executable, "-m", "fsm_agent", "show", "live-run", "--db", str(db)],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "pause" in shown
    assert "ops-alice" in shown
    assert "incident 42: <b>stop</b>" in shown
    assert "raise-budget by ops-bob: max_steps 6 -> 9; why: the furnace needs longer" in shown
