"""A person approves a waiting refund from the console's page, in a real browser: the
console journals the decision (it has no model to go on with), the run waits paused, and
`fsm-agent resume` from another process makes exactly the frozen call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from fsm_agent import HaltReason, read_record
from tests.browser_page import launch_chromium, watched_page
from tests.console_server import console
from tests.test_decisions import MODEL, TOOLS, cli, events, proven, refunds, start

if TYPE_CHECKING:
    from playwright.sync_api import Browser

NO_PROBLEMS: dict[str, list[str]] = {"blocked": [], "errors": [], "dialogs": []}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    yield from launch_chromium()


@pytest.mark.slow
def test_approve_in_the_console_then_resume_makes_the_frozen_call(
    browser: Browser, tmp_path: Path
) -> None:
    run_id, call = start(tmp_path)
    db = tmp_path / "j.db"
    with console(db) as read_only:  # a read-only console offers no decision
        seen = watched_page(browser, allowed=(read_only.url + "/",))
        seen.page.goto(read_only.url + f"/runs/{run_id}")
        assert seen.page.locator("form.act").count() == 0
        seen.close()
    with console(db, "--allow-operator-acts") as c:
        seen = watched_page(browser, allowed=(c.url + "/",))
        page = seen.page
        page.goto(c.url + "/?status=waiting")
        assert run_id in page.locator("table").inner_text()
        page.goto(c.url + f"/runs/{run_id}")
        section = page.locator("#acts")
        assert "A person's decision" in section.inner_text()
        assert call in section.inner_text()  # the frozen call, as bound
        form = page.locator('form.act[data-act="approve"]')
        form.locator("input[name=why]").fill("ticket 88: <b>checked</b>")
        form.locator("input[name=who]").fill("ops-alice")
        form.locator("button").click()
        page.wait_for_function(
            "() => document.querySelector('form.act[data-act=approve] output')"
            f".textContent.startsWith('approve of {run_id} journaled')"
        )
        page.screenshot(path=str(tmp_path / "approve.png"), full_page=True)
        denied = page.locator('form.act[data-act="deny"]')  # a second decision: refused
        denied.locator("input[name=why]").fill("too late")
        denied.locator("button").click()
        page.wait_for_function(
            "() => document.querySelector('form.act[data-act=deny] output')"
            ".textContent.startsWith('refused:')"
        )
        problems = seen.problems()
        refused = "the server responded with a status of 400"  # the refused deny, and only it
        assert [e for e in problems["errors"] if refused not in e] == []
        assert len(problems["errors"]) == 1
        assert problems | {"errors": []} == NO_PROBLEMS
        seen.close()
    assert refunds(tmp_path) == []  # the console made no call
    assert [k for k in events(tmp_path, run_id) if k[0] == "decided"] == [
        ("decided", "approved", None)
    ]
    shown = cli(tmp_path, "runs", "--db", "j.db", "--status", "paused")
    assert run_id in shown.stdout
    resumed = cli(tmp_path, "resume", run_id, *MODEL, *TOOLS, "--db", "j.db")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert refunds(tmp_path) == ["C-17 500"]
    assert read_record(tmp_path / "halt-contract.json").halt_reason is HaltReason.COMPLETED
    proven(tmp_path, run_id, "completed")
