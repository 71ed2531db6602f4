"""A library call writes files only where it is asked to: `run`, `arun` and `resume_run`
write the journal they are given and a halt record only at `record_path` (none by default,
none for `record_path=None`); the read side (`replay_events`, `incident_report`,
`fsm_agent.testing`) writes nothing. Each test runs in an empty working directory and
lists every file that appeared, anywhere under it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fsm_agent import (
    HaltReason,
    RunPaused,
    ScriptedModel,
    load_tools,
    read_record,
    resume_run,
    run,
)
from fsm_agent import arun as arun_
from fsm_agent.journal.store import Control, Event
from fsm_agent.review.replay import replay_events
from fsm_agent.review.report import incident_report
from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.testing import assert_replays

LOOKUP = {"tool_call": {"name": "lookup", "args": {"q": "lab password"}}}
ANSWER = {"answer": "The lab password is swordfish"}
TASK = "Find the lab password"


def appeared(folder: Path) -> set[str]:
    """Every file under `folder`, the journal's -wal/-shm/-journal files left out (SQLite's
    own, beside the journal it was given)."""
    return {
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and not p.name.endswith(("-wal", "-shm", "-journal"))
    }


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cwd"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def lab(store: object, **options: object) -> object:
    return run(
        "agent_loop",
        task=TASK,
        model=ScriptedModel([LOOKUP, ANSWER]),
        tools=load_tools("fsm_agent.examples.halt_lab.tools"),
        allow=("lookup", "slow_lookup", "hang"),
        store=store,  # type: ignore[arg-type]
        **options,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("how", ["default", "none"])
def test_run_writes_the_journal_it_is_given_and_no_record_unless_asked(cwd: Path, how: str) -> None:
    options = {} if how == "default" else {"record_path": None}
    record = lab("j.db", **options)
    assert record.halt_reason is HaltReason.COMPLETED  # type: ignore[attr-defined]
    assert appeared(cwd) == {"j.db"}  # no ./halt-contract.json
    store = SqliteStore(cwd / "j.db")
    try:  # the record is in the journal all the same
        assert store.get_run(record.run_id).record == record  # type: ignore[attr-defined]
    finally:
        store.close()


def test_a_run_without_a_journal_named_is_refused_and_writes_nothing(cwd: Path) -> None:
    """No `./fsm-agent.db` appears unasked: `store` has no default in the library."""
    tools = load_tools("fsm_agent.examples.halt_lab.tools")
    model = ScriptedModel([ANSWER])
    with pytest.raises(TypeError, match="store"):
        run("agent_loop", task=TASK, model=model, tools=tools)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="store"):
        resume_run("abc", model=model, tools=tools)  # type: ignore[call-arg]
    assert appeared(cwd) == set()


def test_run_writes_its_record_where_it_is_asked_and_nowhere_else(cwd: Path) -> None:
    record = lab("j.db", record_path=Path("out") / "r.json")
    assert appeared(cwd) == {"j.db", "out/r.json"}
    assert read_record(cwd / "out" / "r.json") == record


def test_arun_writes_no_record_unless_asked(cwd: Path) -> None:
    record = asyncio.run(
        arun_(
            "agent_loop",
            task=TASK,
            model=ScriptedModel([LOOKUP, ANSWER]),
            tools=load_tools("fsm_agent.examples.halt_lab.tools"),
            allow=("lookup", "slow_lookup", "hang"),
            store="j.db",
        )
    )
    assert record.halt_reason is HaltReason.COMPLETED
    assert appeared(cwd) == {"j.db"}


def test_a_paused_run_resumed_writes_no_record_unless_asked(cwd: Path) -> None:
    store = SqliteStore(cwd / "j.db")

    def pause_once(event: Event) -> None:
        if event.seq == 1:
            store.add_control(
                Control(id=0, run_id=event.run_id, kind="pause", payload={}, who="test",
                        why="a change window", at="2026-01-01T00:00:00+00:00")
            )  # fmt: skip

    try:
        with pytest.raises(RunPaused) as paused:
            lab(store, on_transition=pause_once)
        run_id = paused.value.run_id
        record = resume_run(
            run_id,
            model=ScriptedModel([LOOKUP, ANSWER]),
            tools=load_tools("fsm_agent.examples.halt_lab.tools"),
            store=store,
        )
        assert record.halt_reason is HaltReason.COMPLETED
        assert appeared(cwd) == {"j.db"}
        # the read side writes nothing either
        row, events = store.get_run(run_id), store.events(run_id)
        assert replay_events(row, events).ok
        assert "<html" in incident_report(row, events).lower()
    finally:
        store.close()
    assert_replays(cwd / "j.db", run_id)
    assert appeared(cwd) == {"j.db"}
