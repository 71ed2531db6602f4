"""Mermaid's real parser and renderer for the tests: `mermaid.min.js` from the npm registry
(installed once into FSM_AGENT_MERMAID_DIR or the pytest cache, then reused), loaded from
`file://` into a page of the system's headless chromium (see `browser_page`)."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.browser_page import Watched, missing, watched_page

if TYPE_CHECKING:
    from playwright.sync_api import Browser

MERMAID = "mermaid@11"
NO_PROBLEMS: dict[str, list[str]] = {"blocked": [], "errors": [], "dialogs": []}


def mermaid_script(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """mermaid.min.js, installed with npm the first time (skips without npm)."""
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


def mermaid_page(browser: Browser, script: Path, directory: Path, width: int = 1366) -> Watched:
    """A local page that loads `script` from file:// and nothing else (the caller closes it)."""
    html = directory / "render.html"
    html.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8">'
        f'<script src="{script.as_uri()}"></script></head><body><div id="out"></div></body>'
        "</html>",
        encoding="utf-8",
    )
    seen = watched_page(browser, width=width)
    seen.page.goto(html.as_uri())
    assert seen.page.evaluate("typeof mermaid") == "object", seen.errors
    seen.page.evaluate('mermaid.initialize({startOnLoad: false, securityLevel: "strict"})')
    assert seen.problems() == NO_PROBLEMS
    return seen


_ids = itertools.count()


def render(seen: Watched, text: str, show: bool = False) -> dict[str, Any]:
    """`mermaid.render` in the page: {"svg": …} or {"error": …}; with `show`, the SVG is put
    in the page (to measure or screenshot it, in `#out`). Nothing fetched, and a diagram that
    renders logs no error."""
    errors_before = len(seen.errors)
    result: dict[str, Any] = seen.page.evaluate(
        "([id, text, show]) => mermaid.render(id, text).then(r => {"
        " if (show) document.getElementById('out').innerHTML = r.svg; return {svg: r.svg} },"
        " e => ({error: String(e && e.message || e)}))",
        [f"m{next(_ids)}", text, show],
    )
    assert all(u.startswith("file://") for u in seen.requests), seen.requests
    assert seen.blocked == []
    assert seen.dialogs == []
    if "svg" in result:
        assert seen.errors[errors_before:] == []
    return result
