"""A simulation always ends, as the live runs it stands for would.

- A loop through a user action that no model call or counted retry ends (its wait is
  instant in code, but a live run's wait takes time): the wall clock ends each run, as it
  would live, instead of the run going on at no time, forever, filling the journal.
- A signal stops the whole simulation (exit 128+N, one line that says where), not only the
  run it landed in.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from fsm_agent.declaration.load import load_machine

REPO = Path(__file__).resolve().parent.parent
PAYMENTS = REPO / "examples" / "payments_retry" / "payments.yaml"
PAYMENT_TOOLS = "fsm_agent.examples.payments_retry.tools"
#: a user action whose wait never sees the webhook: it returns at once, every time
WAIT = """
from fsm_agent import ActionResult

def wait(snapshot):
    return ActionResult(outcome="no_webhook")
"""


@pytest.fixture
def looping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The payments machine whose webhook wait goes back to itself on `no_webhook`, with a
    user action (a module of its own, on sys.path) that never sees the webhook."""
    name = f"wait_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(WAIT, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(REPO)]))
    text = PAYMENTS.read_text(encoding="utf-8")
    edits = {
        '"fsm_agent.examples.payments_retry.webhook:await_capture_webhook"': f'"{name}:wait"',
        "{trigger: no_webhook, source: awaiting_webhook, dest: drafting}": (
            "{trigger: no_webhook, source: awaiting_webhook, dest: awaiting_webhook}"
        ),
        "policy: halt-policy.yml": f"policy: {PAYMENTS.parent / 'halt-policy.yml'}",
    }
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "looping.yaml"
    path.write_text(text, encoding="utf-8")
    load_machine(str(path))  # the variant is a valid declaration
    return path


def test_a_user_action_loop_no_model_call_ends_is_ended_by_the_wall_clock(
    tmp_path: Path, looping: Path
) -> None:
    # In a child with a deadline: a loop that never ends would otherwise fill the disk.
    db = tmp_path / "sim.db"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "fsm_agent", "simulate", str(looping), "--tools",
             PAYMENT_TOOLS, "--runs", "30", "--db", str(db), "--json", "-q", "-o",
             str(tmp_path / "out")],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("a simulation of a user-action loop did not end in 120 s")
    assert done.returncode == 0, done.stdout + done.stderr
    halts = json.loads(done.stdout)["halts"]
    assert halts.get("wall_clock", 0) > 0, halts  # the loop's runs end as a live run's would
    with sqlite3.connect(db) as conn:
        per_run = dict(conn.execute("SELECT run_id, COUNT(*) FROM events GROUP BY run_id"))
        loops = conn.execute(
            "SELECT COUNT(*) FROM events WHERE source = 'awaiting_webhook'"
            " AND dest = 'awaiting_webhook'"
        ).fetchone()[0]
    assert len(per_run) == 30
    assert loops > 0  # the loop was taken
    # Each wait takes at least 10 ms of the 10 s wall clock: at most 1,000 turns a run.
    assert max(per_run.values()) <= 2 * (10_000 // 10) + 50


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_whole_simulation(looping: Path, sig: signal.Signals) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "fsm_agent", "simulate", str(looping), "--tools", PAYMENT_TOOLS,
         "--runs", "400"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=looping.parent,
    )  # fmt: skip
    assert proc.stderr is not None
    first = proc.stderr.readline()  # the first progress line: runs are under way
    assert first.startswith("run "), first
    time.sleep(0.5)
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"simulate went on after {sig.name}")
    assert proc.returncode == 128 + sig, err
    lines = [line for line in err.splitlines() if not line.startswith("run ")]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"simulate: stopped by {sig.name} in run ")
    assert "/400 (seed 0); no summary" in lines[0]
    assert "Traceback" not in err
    assert out == ""
