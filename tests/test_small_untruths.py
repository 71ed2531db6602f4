"""The smaller untruths of review (issue 27.8), each a regression case through the real CLI:
a call refused before it was made is not labelled a read; the report's "error" row is an
error only for an error halt; `replay --step` says what it did not show, and says when it
cannot step; `show` takes a run file as `replay` and `report` do."""

from __future__ import annotations

import html
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner, Result

from fsm_agent.cli.main import cli
from tests.lab import lab_run

REPO = Path(__file__).resolve().parent.parent
BAD_ARGS = {"tool_call": {"name": "lookup", "args": {"no_such_argument": 1}}}
LOOKUP = {"tool_call": {"name": "lookup", "args": {"q": "vault"}}}


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_a_call_refused_before_it_was_made_is_not_called_not_a_read(tmp_path: Path) -> None:
    record = lab_run(tmp_path, [BAD_ARGS, {"handoff": {"why": "stuck"}}])
    db = str(tmp_path / "j.db")
    shown = invoke("show", record.run_id, "--db", db).output
    assert "call: lookup" in shown
    assert "(not called)" in shown
    assert "(read)" not in shown.split("arguments refused")[0].splitlines()[-1]
    invoke("report", record.run_id, "--db", db, "-o", str(tmp_path / "r.html"))
    page = html.unescape((tmp_path / "r.html").read_text("utf-8"))
    assert "(read)" not in page  # nor in the report (its timeline has the call)


def test_a_read_is_still_a_read(tmp_path: Path) -> None:
    record = lab_run(tmp_path, [LOOKUP, {"handoff": {"why": "stuck"}}])
    shown = invoke("show", record.run_id, "--db", str(tmp_path / "j.db")).output
    assert "(read) -> returned" in shown


def test_the_error_row_is_an_error_only_for_an_error_halt(tmp_path: Path) -> None:
    record = lab_run(tmp_path, [LOOKUP] * 8)  # spends the step budget: max_steps
    assert record.halt_reason.value == "max_steps"
    invoke("report", record.run_id, "--db", str(tmp_path / "j.db"), "-o", str(tmp_path / "r.html"))
    page = (tmp_path / "r.html").read_text("utf-8")
    halt = page.split('<section id="halt">')[1].split("</section>")[0]
    assert "<dt>why</dt>" in halt
    assert "<dt>error</dt>" not in halt


def test_show_takes_a_run_file(tmp_path: Path) -> None:
    record = lab_run(tmp_path, [LOOKUP, {"handoff": {"why": "stuck"}}])
    out = tmp_path / "run.json"
    assert (
        invoke("export", record.run_id, "--db", str(tmp_path / "j.db"), "-o", str(out)).exit_code
        == 0
    )
    shown = invoke("show", str(out))
    assert shown.exit_code == 0, shown.output
    assert f"run {record.run_id}" in shown.output
    assert "chain: ok" in shown.output


def test_replay_step_without_a_terminal_says_it_prints_every_step(tmp_path: Path) -> None:
    record = lab_run(tmp_path, [LOOKUP, {"handoff": {"why": "stuck"}}])
    done = subprocess.run(
        [sys.executable, "-m", "fsm_agent", "replay", record.run_id, "--db",
         str(tmp_path / "j.db"), "--step"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "note: --step walks a terminal; stdin and stdout are not a terminal" in done.stderr
    assert "replay matches" in done.stdout


def test_replay_step_quit_says_what_was_not_shown(tmp_path: Path) -> None:
    record = lab_run(tmp_path, [LOOKUP, {"handoff": {"why": "stuck"}}])
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fsm_agent", "replay", record.run_id, "--db",
         str(tmp_path / "j.db"), "--step"],
        stdin=slave, stdout=slave, stderr=slave, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 60
    try:
        while b"q: quit" not in seen and time.monotonic() < deadline:
            if select.select([master], [], [], 1)[0]:
                seen += os.read(master, 4096)
        time.sleep(1)  # as a person would: the prompt is up before the terminal goes raw
        os.write(master, b"q")
        while proc.poll() is None and time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                try:
                    seen += os.read(master, 4096)
                except OSError:
                    break
        proc.wait(timeout=30)
        while select.select([master], [], [], 0.2)[0]:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    text = seen.decode("utf-8", "replace")
    assert proc.returncode == 0, text
    assert "quit after 1 of " in text
    assert "not shown); the verdict re-decided them all:" in text
    assert "replay matches" in text
