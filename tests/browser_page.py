"""Debian's headless `chromium`, driven by Playwright, for the browser tests.

Playwright's wheel brings its own driver (a bundled node) and talks to the browser over a
pipe; it downloads nothing here: `playwright install` is never run, the browser is the
system's `chromium` (`executable_path`). Playwright's default flags already keep chromium
quiet (no background networking, component updates, sync, extensions or first-run pages).
No internet is needed: pages are opened from `file://`, and every request that would leave
`file://` is aborted and recorded, so a test can assert there was none.

Set FSM_AGENT_BROWSER_TESTS=require (CI does) to fail, not skip, when a tool is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING, NoReturn

import attrs
import pytest

if TYPE_CHECKING:
    from playwright.sync_api import (
        Browser,
        ConsoleMessage,
        Dialog,
        Error,
        Page,
        Request,
        Route,
        ViewportSize,
    )

#: Beyond Playwright's defaults: no GPU process (there is no GPU), no QUIC.
CHROMIUM_ARGS = ("--disable-gpu", "--disable-quic")
#: Generous: two cores are shared by the whole suite and whatever else runs.
TIMEOUT_MS = 20_000


def missing(what: str) -> NoReturn:
    """Skip, naming the package to install; fail instead when CI requires browser tests."""
    if os.environ.get("FSM_AGENT_BROWSER_TESTS") == "require":
        pytest.fail(f"browser tests are required here, but {what}")
    pytest.skip(what)


def chromium_path() -> str:
    """The Debian chromium binary (or FSM_AGENT_CHROMIUM), or skip."""
    found = os.environ.get("FSM_AGENT_CHROMIUM") or shutil.which("chromium")
    if found is None:
        missing("chromium missing: apt-get install chromium")
    return found


def launch_chromium(extra_args: tuple[str, ...] = ()) -> Iterator[Browser]:
    """Headless chromium for a fixture, closed after it; skips when chromium or Playwright is
    missing (Playwright is in the test extra where it has wheels). `extra_args`: more
    chromium flags (`--host-resolver-rules=…` for a test of DNS rebinding)."""
    executable = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("the playwright package is missing: pip install -e '.[test]'")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, args=[*CHROMIUM_ARGS, *extra_args], timeout=TIMEOUT_MS
        )
        try:
            yield browser
        finally:
            browser.close()


@attrs.define
class Watched:
    """A page and everything it did that a test may want to forbid."""

    page: Page
    requests: list[str] = attrs.Factory(list)  # every URL requested, in order
    blocked: list[str] = attrs.Factory(list)  # requests that would have left what is allowed
    errors: list[str] = attrs.Factory(list)  # console errors, uncaught exceptions
    dialogs: list[str] = attrs.Factory(list)  # alert(), confirm(), prompt()

    def problems(self) -> dict[str, list[str]]:
        """What went wrong, by kind; empty lists when the page behaved."""
        return {"blocked": self.blocked, "errors": self.errors, "dialogs": self.dialogs}

    def close(self) -> None:
        """Close the page and its context."""
        self.page.context.close()


def watched_page(
    browser: Browser, width: int = 1366, height: int = 900, allowed: tuple[str, ...] = ("file://",)
) -> Watched:
    """A fresh page in its own context that records requests, console errors (CSP violations
    and failed loads included: chromium logs them to the console), uncaught exceptions and
    dialogs, and aborts every request whose URL starts with none of `allowed` (by default:
    every request not for a `file://` URL; a server's tests allow its own origin)."""
    viewport: ViewportSize = {"width": width, "height": height}
    context = browser.new_context(viewport=viewport, device_scale_factor=1)
    context.set_default_timeout(TIMEOUT_MS)
    seen = Watched(context.new_page())

    def route(route: Route) -> None:
        if route.request.url.startswith(allowed):
            route.continue_()
        else:
            seen.blocked.append(route.request.url)
            route.abort("blockedbyclient")

    def console(message: ConsoleMessage) -> None:
        if message.type in ("error", "assert"):
            seen.errors.append(f"console.{message.type}: {message.text}")

    def page_error(error: Error) -> None:
        seen.errors.append(f"uncaught: {error}")

    def dialog(opened: Dialog) -> None:
        seen.dialogs.append(f"{opened.type}: {opened.message}")
        opened.dismiss()

    def request(sent: Request) -> None:
        seen.requests.append(sent.url)

    context.route("**/*", route)
    seen.page.on("console", console)
    seen.page.on("pageerror", page_error)
    seen.page.on("dialog", dialog)
    seen.page.on("request", request)
    return seen
