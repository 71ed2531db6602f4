"""Only a person raises a cap: raise-budget on a live run in another process, journaled."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from fsm_agent import HaltReason, read_record
from fsm_agent.cli import cli
from fsm_agent.replay import replay_events
from stores.sqlite import SqliteStore

ROOT = Path(__file__).parent.parent
CHILD = Path(__file__).parent / "child_raise.py"


def test_raise_budget_on_a_live_run_in_another_process(tmp_path: Path) -> None:
    db, record = tmp_path / "j.db", tmp_path / "r.json"
    ready, go = tmp_path / "ready", tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(db), str(record), str(ready), str(go)], cwd=ROOT, env=env
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():  # the run is live and inside its first tool call
            assert child.poll() is None, "the child run ended early"
            assert time.monotonic() < deadline, "the child run never got going"
            time.sleep(0.01)
        runner = CliRunner()
        lower = runner.invoke(cli, ["raise-budget", "raise-run", "--max-steps", "2",
                                    "--why", "x", "--db", str(db)])  # fmt: skip
        assert lower.exit_code == 2
        assert "does not raise the current 3" in lower.output
        raised = runner.invoke(cli, ["raise-budget", "raise-run", "--max-steps", "5", "--why",
                                     "incident 42: needs two more lookups", "--who", "alice",
                                     "--db", str(db)])  # fmt: skip
        assert raised.exit_code == 0, raised.output
        assert "max_steps 3 -> 5" in raised.output
        go.touch()
        assert child.wait(timeout=60) == 3  # budget_exhausted, at the raised cap
    finally:
        go.touch()
        if child.poll() is None:
            child.kill()
    halt = read_record(record)
    assert halt.halt_reason is HaltReason.MAX_STEPS
    assert (halt.steps_used, halt.max_steps) == (5, 5)
    store = SqliteStore(db)
    try:
        events = store.events("raise-run")
        row = store.get_run("raise-run")
    finally:
        store.close()
    [act] = [e for e in events if e.kind == "operator"]
    assert act.note == (
        "raise-budget by alice: max_steps 3 -> 5; why: incident 42: needs two more lookups"
    )
    assert act.snapshot.budgets.max_steps == 5
    assert act.snapshot.meters.steps_used == 1  # applied before the second model call
    assert row.budgets.max_steps == 3  # the frozen start budgets are never rewritten
    report = replay_events(row, events)
    assert report.ok, report.summary
    assert any(s.verdict == "external" and "alice" in (s.detail or "") for s in report.steps)
    halted = CliRunner().invoke(cli, ["raise-budget", "raise-run", "--max-steps", "9",
                                      "--why", "late", "--db", str(db)])  # fmt: skip
    assert halted.exit_code == 2
    assert "only a live run's caps can be raised" in halted.output


def test_raise_budget_needs_a_cap_and_a_reason(tmp_path: Path) -> None:
    runner = CliRunner()
    db = tmp_path / "j.db"
    SqliteStore(db).close()
    none = runner.invoke(cli, ["raise-budget", "r", "--why", "x", "--db", str(db)])
    assert none.exit_code == 2
    assert "say which cap to raise" in none.output
    missing = runner.invoke(cli, ["raise-budget", "r", "--max-steps", "9", "--db", str(db)])
    assert missing.exit_code == 2
    assert "--why" in missing.output
