"""Pause and resume across real processes, and what resume does with a side effect that was
cut off: a non-idempotent tool is never re-issued (handoff, side_effect_unknown); an
idempotent one is re-issued with the same idempotency key."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fsm_agent import HaltReason, read_record
from fsm_agent.cli.main import cli
from fsm_agent.errors import RunPaused
from fsm_agent.journal.chain import verify_run
from fsm_agent.runtime.operator_acts import signed_control
from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.testing import assert_replays
from tests.fixture_resume import GATE_ENV, HANG_ENV, IDEMPOTENT_ENV, LEDGER_ENV
from tests.lab import LOOKUP, lab_run

ROOT = Path(__file__).parent.parent
WAIT_S = 60.0  # generous: a child on a loaded 2-core machine


def fsm_agent(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`fsm-agent ARGS` in a real child process."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    full = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), **(env or {}))
    return subprocess.Popen(
        [sys.executable, "-m", "fsm_agent", *args],
        cwd=ROOT, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def charge_run(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> list[str]:
    return [
        "run", "agent_loop", "--task", "charge order ord_1 once", "--tools",
        "tests.fixture_resume", "--allow", "charge", "--db", str(tmp_path / "j.db"), "--record",
        str(tmp_path / "first.json"), "--quiet", *extra,
    ]  # fmt: skip


def resume_args(tmp_path: Path, run_id: str, model: str = "oracle") -> list[str]:
    return [
        "resume", run_id, "--model", f"python:tests.fixture_resume:{model}", "--tools",
        "tests.fixture_resume", "--db", str(tmp_path / "j.db"), "--record",
        str(tmp_path / "resumed.json"),
    ]  # fmt: skip


def wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"child exited {proc.returncode} early: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{path} did not appear within {WAIT_S} s")
        time.sleep(0.01)  # polling a handshake file, not a timing assumption


def test_pause_then_resume_in_another_process(tmp_path: Path) -> None:
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    env = {LEDGER_ENV: str(ledger), GATE_ENV: str(gate)}
    child = fsm_agent(*charge_run(tmp_path, "--model", "python:tests.fixture_resume:gated_oracle",
                                  "--max-steps", "6"), env=env)  # fmt: skip
    assert child.stdout is not None
    first = child.stdout.readline()  # "run ID started (agent_loop, journal …)"
    run_id = first.split()[1]
    paused = CliRunner().invoke(
        cli, ["pause", run_id, "--why", "change window", "--who", "ops", "--db",
              str(tmp_path / "j.db")],
    )  # fmt: skip
    assert paused.exit_code == 0, paused.output
    gate.touch()  # the first model call returns now; the pause is read before the next
    out, err = child.communicate(timeout=WAIT_S)
    assert child.returncode == 75, (out, err)
    assert f"run {run_id} paused at step" in out
    assert f"fsm-agent resume {run_id}" in out
    assert not (tmp_path / "first.json").exists()  # a pause is not a halt: no record

    store = SqliteStore(tmp_path / "j.db")
    row = store.get_run(run_id)
    assert row.status == "paused"
    budgets = row.budgets
    store.close()
    listing = CliRunner().invoke(cli, ["runs", "--db", str(tmp_path / "j.db")])
    assert "(paused)" in listing.output

    resumed = fsm_agent(*resume_args(tmp_path, run_id), env=env)
    out, err = resumed.communicate(timeout=WAIT_S)
    assert resumed.returncode == 0, (out, err)
    record = read_record(tmp_path / "resumed.json")
    assert record.halt_reason is HaltReason.COMPLETED
    assert record.answer == "ch_ord_1"
    assert record.budgets == budgets
    assert ledger.read_text().splitlines() == ["ord_1 k-1"]  # charged once in all

    store = SqliteStore(tmp_path / "j.db")
    events = store.events(run_id)
    kinds = [(e.kind, e.trigger) for e in events]
    assert ("operator", "pause") in kinds
    assert ("resumed", None) in kinds
    assert kinds.index(("operator", "pause")) < kinds.index(("resumed", None))
    assert verify_run(store, run_id).ok
    assert store.get_run(run_id).pid == resumed.pid
    store.close()
    assert_replays(tmp_path / "j.db", run_id)


def killed_mid_charge(tmp_path: Path) -> tuple[str, Path]:
    """A run SIGKILLed inside `charge`, after its side effect and before its receipt."""
    ledger, hang = tmp_path / "ledger", tmp_path / "hang"
    child = fsm_agent(
        *charge_run(tmp_path, "--model", "python:tests.fixture_resume:oracle"),
        env={LEDGER_ENV: str(ledger), HANG_ENV: str(hang)},
    )
    assert child.stdout is not None
    run_id = child.stdout.readline().split()[1]
    wait_for(hang, child)
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=WAIT_S)
    assert ledger.read_text().splitlines() == ["ord_1 k-1"]
    listing = CliRunner().invoke(cli, ["runs", "--db", str(tmp_path / "j.db")])
    assert "(interrupted)" in listing.output
    return run_id, ledger


def test_a_cut_off_charge_is_not_reissued_when_it_is_not_idempotent(tmp_path: Path) -> None:
    run_id, ledger = killed_mid_charge(tmp_path)
    os.environ[LEDGER_ENV] = str(ledger)
    try:
        result = CliRunner().invoke(cli, resume_args(tmp_path, run_id))
    finally:
        del os.environ[LEDGER_ENV]
    assert result.exit_code == 4, result.output
    assert "halted: side_effect_unknown (handoff)" in result.output
    record = read_record(tmp_path / "resumed.json")
    assert record.handoff is not None
    assert "tool 'charge' was issued" in record.handoff.why
    assert "not declared idempotent" in record.handoff.why
    assert ledger.read_text().splitlines() == ["ord_1 k-1"]  # never charged twice
    assert_replays(tmp_path / "j.db", run_id)


def test_a_cut_off_idempotent_charge_is_reissued_with_the_same_key(tmp_path: Path) -> None:
    run_id, ledger = killed_mid_charge(tmp_path)
    os.environ[LEDGER_ENV], os.environ[IDEMPOTENT_ENV] = str(ledger), "1"
    try:
        result = CliRunner().invoke(cli, resume_args(tmp_path, run_id))
    finally:
        del os.environ[LEDGER_ENV], os.environ[IDEMPOTENT_ENV]
    assert result.exit_code == 0, result.output
    assert read_record(tmp_path / "resumed.json").answer == "ch_ord_1"
    assert ledger.read_text().splitlines() == ["ord_1 k-1", "ord_1 k-1"]  # the same key
    assert_replays(tmp_path / "j.db", run_id)


def test_resume_refuses_a_halted_a_live_and_a_tampered_run(tmp_path: Path) -> None:
    db = tmp_path / "j.db"
    done = lab_run(tmp_path, [LOOKUP, {"answer": "swordfish"}]).run_id
    refused = CliRunner().invoke(cli, resume_args(tmp_path, done))
    assert refused.exit_code == 2
    assert f"run {done} has already halted (completed); nothing to resume" in refused.output

    conn = sqlite3.connect(db)
    conn.execute("UPDATE runs SET status = 'running', record = NULL, pid = ?", (os.getpid(),))
    conn.commit()
    live = CliRunner().invoke(cli, resume_args(tmp_path, done))
    assert live.exit_code == 2
    assert f"is still running, held by pid {os.getpid()}@" in live.output

    conn.execute("UPDATE runs SET pid = 2147483647")  # no such process
    conn.execute("DROP TRIGGER events_no_update")
    conn.execute("UPDATE events SET note = 'edited' WHERE seq = 1")
    conn.commit()
    conn.close()
    tampered = CliRunner().invoke(cli, resume_args(tmp_path, done))
    assert tampered.exit_code == 2
    assert "its journal does not verify (seq 1:" in tampered.output


def test_resume_writes_the_record_of_a_run_killed_after_its_halt_was_journaled(
    tmp_path: Path,
) -> None:
    record = lab_run(tmp_path, [LOOKUP, {"answer": "swordfish"}])
    conn = sqlite3.connect(tmp_path / "j.db")  # what a kill between the two writes leaves
    conn.execute(
        "UPDATE runs SET status = 'running', record = NULL, record_hash = NULL,"
        " halt_reason = NULL, ended_at = NULL, pid = 2147483647"
    )
    conn.commit()
    conn.close()
    result = CliRunner().invoke(cli, resume_args(tmp_path, record.run_id))
    assert result.exit_code == 0, result.output
    again = read_record(tmp_path / "resumed.json")
    assert again.halt_reason is HaltReason.COMPLETED
    assert again.answer == record.answer
    assert again.steps_used == record.steps_used
    store = SqliteStore(tmp_path / "j.db")
    assert store.get_run(record.run_id).status == "halted"
    assert len(store.events(record.run_id)) == 5  # nothing journaled twice
    store.close()


def test_pause_refuses_a_run_that_is_not_running(tmp_path: Path) -> None:
    done = lab_run(tmp_path, [LOOKUP, {"answer": "swordfish"}]).run_id
    result = CliRunner().invoke(cli, ["pause", done, "--why", "x", "--db", str(tmp_path / "j.db")])
    assert result.exit_code == 2
    assert f"run {done} is halted; only a running run pauses" in result.output


class _PausedAtStart(SqliteStore):
    """A journal where an operator pauses each run the moment it starts: the pause lands
    between the run's first commit and its first step (the narrowest window there is)."""

    def start_run(self, run: Any, event: Any) -> str:
        head = super().start_run(run, event)
        self.add_control(signed_control(run.run_id, "pause", {}, "ops", "right after start"))
        return head


def test_a_pause_that_lands_as_the_run_starts_is_not_lost(tmp_path: Path) -> None:
    store = _PausedAtStart(tmp_path / "j.db")
    with pytest.raises(RunPaused):
        lab_run(tmp_path, [LOOKUP, {"answer": "swordfish"}], store=store)
    (row,) = store.list_runs()
    assert row.status == "paused"
    assert [e.kind for e in store.events(row.run_id)] == ["started", "operator"]
    store.close()
