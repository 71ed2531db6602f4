"""A tiny Chrome DevTools Protocol client for the browser tests.

Debian's headless `chromium` is started with a fresh profile and every flag that stops it
from reaching the network on its own; one websocket (the `websockets` package's sync
client, a test-only dependency) carries commands and events for every page. No internet is
needed: pages are opened from `file://`.

Set FSM_AGENT_BROWSER_TESTS=require (CI does) to fail, not skip, when a tool is missing.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, NoReturn

import pytest

#: Headless as root in a sandbox, and quiet: no background fetches, updates, sync or QUIC.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--mute-audio",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
)
TIMEOUT_S = 20.0


def missing(what: str) -> NoReturn:
    """Skip, naming the package to install; fail instead when CI requires browser tests."""
    if os.environ.get("FSM_AGENT_BROWSER_TESTS") == "require":
        pytest.fail(f"browser tests are required here, but {what}")
    pytest.skip(what)


def chromium_path() -> str:
    """The Debian chromium binary, or skip."""
    found = os.environ.get("FSM_AGENT_CHROMIUM") or shutil.which("chromium")
    if found is None:
        missing("chromium missing: apt-get install chromium")
    return found


class CdpError(RuntimeError):
    """A DevTools command failed, or an awaited event did not come."""


class Browser:
    """One headless chromium process and the DevTools websocket to it."""

    def __init__(self, executable: str, profile: Path) -> None:
        from websockets.sync.client import connect

        profile.mkdir(parents=True, exist_ok=True)
        self.log = (profile / "chromium.log").open("wb")
        self.proc = subprocess.Popen(
            [executable, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.events: list[dict[str, Any]] = []
        self._next_id = 0
        self._ws = ExitStack()
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + TIMEOUT_S
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise CdpError(f"chromium did not start; see {profile / 'chromium.log'}")
            time.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        url = f"ws://127.0.0.1:{port}{path}"
        self.ws = self._ws.enter_context(
            connect(url, max_size=None, open_timeout=TIMEOUT_S, proxy=None)
        )

    def send(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and return its result; events that arrive meanwhile are kept."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        while True:
            reply = self._receive(TIMEOUT_S)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise CdpError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result

    def _receive(self, timeout: float) -> dict[str, Any]:
        try:
            raw = self.ws.recv(timeout=timeout)
        except TimeoutError as exc:
            raise CdpError(f"no message from chromium within {timeout} s") from exc
        message: dict[str, Any] = json.loads(raw)
        if "method" in message:
            self.events.append(message)
        return message

    def wait_for(self, method: str, session: str, since: int = 0) -> dict[str, Any]:
        """The first event `method` of `session` from `self.events[since]` on, kept or still
        to come."""
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            for event in self.events[since:]:
                if event["method"] == method and event.get("sessionId") == session:
                    return event
            left = deadline - time.monotonic()
            if left <= 0:
                raise CdpError(f"no {method} within {TIMEOUT_S} s")
            self._receive(left)

    def new_page(self, width: int = 1366, height: int = 900) -> Page:
        """A fresh tab with console, log, network and page events on."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session)
        self.send(
            "Emulation.setDeviceMetricsOverride",
            session,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        return Page(self, session, target)

    def close(self) -> None:
        self._ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.log.close()


class Page:
    """One tab, attached with a flat session."""

    def __init__(self, browser: Browser, session: str, target: str) -> None:
        self.browser, self.session, self.target = browser, session, target

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        return self.browser.send(method, self.session, **params)

    def open(self, url: str) -> None:
        """Navigate and wait for this navigation's load event (not about:blank's)."""
        since = len(self.browser.events)
        self.send("Page.navigate", url=url)
        self.browser.wait_for("Page.loadEventFired", self.session, since)

    def evaluate(self, expression: str) -> Any:
        """The JSON value of `expression` (promises awaited); a thrown error fails."""
        done = self.send(
            "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in done:
            raise CdpError(f"{expression[:80]}…: {done['exceptionDetails']}")
        return done["result"].get("value")

    def events(self, *methods: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.browser.events
            if e.get("sessionId") == self.session and e["method"] in methods
        ]

    def requested_urls(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events("Network.requestWillBeSent")]

    def console_errors(self) -> list[str]:
        """Console errors, uncaught exceptions and browser log errors (CSP, failed loads)."""
        errors = [
            json.dumps(e["params"].get("args"))
            for e in self.events("Runtime.consoleAPICalled")
            if e["params"]["type"] in ("error", "assert")
        ]
        errors += [json.dumps(e["params"]) for e in self.events("Runtime.exceptionThrown")]
        errors += [
            e["params"]["entry"]["text"]
            for e in self.events("Log.entryAdded")
            if e["params"]["entry"]["level"] == "error"
        ]
        return errors

    def screenshot(self, path: Path) -> Path:
        """The whole page (beyond the viewport) as a PNG."""
        size = self.send("Page.getLayoutMetrics")["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                         clip=clip)  # fmt: skip
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        self.browser.send("Target.closeTarget", targetId=self.target)


def start_browser(profile: Path) -> Iterator[Browser]:
    """A browser for a fixture: skips when chromium or websockets is missing."""
    executable = chromium_path()
    try:
        import websockets.sync.client  # noqa: F401
    except ImportError:
        missing("the websockets package is missing: pip install -e '.[test]'")
    browser = Browser(executable, profile)
    try:
        yield browser
    finally:
        browser.close()
