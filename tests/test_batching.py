"""Commit batching under a real SIGKILL: what the journal holds is what `deferrable` says.

A read's result and the receipts check after it are committed together, before the next
model call; what a call with a side effect returned is committed at once. A kill between
loses only transitions after the last commit, and resume never re-issues a call whose
outcome it does not have.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fsm_agent import HaltReason, ScriptedModel, resume_run
from fsm_agent.stores.sqlite import SqliteStore
from tests.batch_kill_child import ANSWER, LOOKUP, tools

ROOT = Path(__file__).resolve().parent.parent


def killed_at(tmp_path: Path, point: str, effect: str) -> list[str | None]:
    """Run the child to its SIGKILL at `point`; the triggers the journal holds."""
    db = tmp_path / "j.db"
    child = subprocess.run(
        [sys.executable, "-m", "tests.batch_kill_child", str(db), str(tmp_path / "r.json"),
         point, effect],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert not (tmp_path / "r.json").exists()  # killed: no record was written
    store = SqliteStore(db)
    try:
        events = store.events("killed")
    finally:
        store.close()
    assert [e.seq for e in events] == list(range(len(events)))
    return [e.trigger for e in events]


@pytest.mark.parametrize("effect", ["read", "write"])
def test_a_kill_at_the_next_model_call_finds_every_transition_before_it(
    tmp_path: Path, effect: str
) -> None:
    assert killed_at(tmp_path, "model", effect) == [None, "tool_call", "tool_returned", "collected"]


def test_a_kill_after_a_read_loses_its_result_and_resume_makes_the_read_again(
    tmp_path: Path,
) -> None:
    # The read's result waits for the receipts check: both are lost, the run is where it
    # was when the lookup was made (as a kill before today's commit of that result left it).
    # A read changes nothing (side_effect=False), so resume makes it again: the same rule the
    # live run follows (`fsm_agent.runtime.contract.may_reissue`), idempotent or not.
    assert killed_at(tmp_path, "receipts", "read") == [None, "tool_call"]
    calls: list[str] = []
    record = resume_run("killed", model=ScriptedModel([LOOKUP, ANSWER]), tools=tools("read", calls),
                        store=tmp_path / "j.db", record_path=tmp_path / "r2.json")  # fmt: skip
    assert record.halt_reason is HaltReason.COMPLETED
    assert len(calls) == 1


def test_a_kill_after_a_call_with_a_side_effect_keeps_what_it_returned(tmp_path: Path) -> None:
    assert killed_at(tmp_path, "receipts", "write") == [None, "tool_call", "tool_returned"]
    calls: list[str] = []
    record = resume_run("killed", model=ScriptedModel([LOOKUP, ANSWER]),
                        tools=tools("write", calls), store=tmp_path / "j.db",
                        record_path=tmp_path / "r2.json")  # fmt: skip
    assert record.halt_reason is HaltReason.COMPLETED  # from the receipts check, on the result
    assert calls == []  # never made again
