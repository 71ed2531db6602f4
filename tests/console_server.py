"""The console as a real process for the console tests: `fsm-agent console` on a free port
(the OS picks it; the command prints its URL), against a real journal file."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parent.parent
#: Generous: two cores are shared by the whole suite.
START_S = 30.0


@attrs.frozen
class Console:
    """A running console: its base URL (no trailing slash) and its process."""

    url: str
    process: subprocess.Popen[str]


@contextmanager
def console(db: Path, *args: str, beside: bool = False) -> Iterator[Console]:
    """`fsm-agent console --db DB --port 0 ARGS…`, stopped (SIGTERM) afterwards; `beside`:
    run it in the journal's directory with `--db NAME` (as a user would, and as the page
    then names the journal)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    where = str(db.name if beside else db)
    cmd = [sys.executable, "-m", "fsm_agent", "console", "--db", where, "--port", "0", *args]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env, cwd=db.parent if beside else None)  # fmt: skip
    try:
        url = _url(process)
        yield Console(url, process)
    finally:
        stop(process)


def stop(process: subprocess.Popen[str]) -> None:
    """SIGTERM, and SIGKILL if the console has not exited within 15 s."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def controls(db: Path) -> list[tuple[object, ...]]:
    """The operator controls journaled in `db`, oldest first: (kind, who, why)."""
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT kind, who, why FROM controls ORDER BY id").fetchall()
    finally:
        conn.close()


def _url(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + START_S
    line = process.stdout.readline()
    if "http://" not in line:
        process.kill()
        _, err = process.communicate(timeout=10)
        raise AssertionError(f"the console did not start: {line!r} {err}")
    url = line.strip().rsplit(" ", 1)[-1].rstrip("/")
    while time.monotonic() < deadline:  # the socket listens before the app is ready
        if _answers(url):
            return url
        time.sleep(0.05)
    raise AssertionError(f"the console at {url} did not answer within {START_S} s")


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url + "/static/console.css", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


SEARCH = {"tool_call": {"name": "search", "args": {"q": "refund window"}}}
MISS = {"tool_call": {"name": "lookup", "args": {"q": "again"}}}


def three_runs(tmp: Path) -> Path:
    """The console tests' journal in `tmp`: a completed run (`done-run`), a hostile handoff
    and a max_steps one (`capped-run`)."""
    from tests.browser_runs import hostile_run, journaled
    from tests.lab import lab_run

    journaled(tmp, [SEARCH, {"answer": "30 days"}], run_id="done-run")
    hostile_run(tmp)
    db = tmp / "journal.db"
    lab_run(tmp, [MISS] * 3, store=db, budgets={"max_steps": 2}, run_id="capped-run")
    return db
