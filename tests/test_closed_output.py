"""Output is not the outcome (issue 32.5): a reader that goes away (`| head -c 0`, `| head
-1`), or stdout and stderr closed outright, changes neither the halt, nor the record, nor
the exit code. Real processes and real pipes; the run spends its step budget (max_steps,
exit 3) and prints a line per step on the way."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lab import LAB_ALLOW_ARG, LAB_TOOLS

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "examples" / "halt_lab" / "looping.json"
RUN = [sys.executable, "-m", "fsm_agent", "run", "agent_loop", "--task", "Find the lab password",
       "--model", f"scripted:{SCRIPT}", "--tools", LAB_TOOLS, "--allow", LAB_ALLOW_ARG,
       "--db", "j.db", "--record", "r.json"]  # fmt: skip
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
#: how each case's output is taken: a shell pipeline around the run
CASES = {
    "stdout read by nobody (| head -c 0)": '"$@" | head -c 0',
    "stdout read for one line (| head -1)": '"$@" 2>/dev/null | head -1',
    "stderr read for one line": '"$@" 2>&1 >/dev/null | head -1',
    "stdout and stderr closed": '"$@" >&- 2>&-',
    "--json, read by nobody": '"$@" --json | head -c 0',
}


@pytest.mark.parametrize("shell", list(CASES.values()), ids=list(CASES))
def test_a_reader_that_goes_away_changes_nothing(tmp_path: Path, shell: str) -> None:
    # PIPESTATUS[0]: the run's own exit code, not the reader's
    script = f"{shell}; exit ${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", script, "run", *RUN], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 3, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    assert "BrokenPipeError" not in done.stderr
    record = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert record["halt_reason"] == "max_steps"
    assert record["steps_used"] == 8
    with sqlite3.connect(tmp_path / "j.db") as conn:
        rows = conn.execute("SELECT halt_reason, status FROM runs").fetchall()
    assert rows == [("max_steps", "halted")]


def test_a_command_that_only_prints_keeps_its_exit_code(tmp_path: Path) -> None:
    first = subprocess.run(RUN, cwd=tmp_path, env=ENV, capture_output=True, timeout=120)
    assert first.returncode == 3
    for args in (["runs", "--db", "j.db"], ["show", "@latest", "--db", "j.db"]):
        done = subprocess.run(
            ["bash", "-c", '"$@" | head -c 0; exit ${PIPESTATUS[0]}', "cmd", sys.executable,
             "-m", "fsm_agent", *args],
            cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, (args, done.stderr)
        assert "Traceback" not in done.stderr
