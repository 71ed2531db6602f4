"""The SQLite journal against a real file: WAL, append-only events keyed by (run_id, seq),
values that come back equal, and failures that name the path, the run and the sequence."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

import attrs
import pytest

from fsm_agent import serde
from fsm_agent.budgets import Budgets, Meters
from fsm_agent.errors import JournalError, RunNotFound
from fsm_agent.halt import HaltReason
from fsm_agent.journal import Event, Facts, GuardResult, RunRow
from fsm_agent.proposals import FinalAnswer, ToolCall
from fsm_agent.receipts import Receipt
from fsm_agent.record import HaltRecord, HandoffPacket, ToolCallEntry
from fsm_agent.snapshot import Snapshot, ToolOutcome
from stores.sqlite import SqliteStore

BUDGETS = Budgets(
    max_steps=8, wall_clock_ms=15000, max_cost=1.0, tool_timeout_ms=5000, max_retries=2
)
RECEIPTS = (Receipt(status=200, id="cap_1", idempotency_key="k-1", checksum="sha:ab"),)


def run_row(run_id: str = "run-1", started_at: str = "2025-01-01T00:00:00Z") -> RunRow:
    return RunRow(
        run_id=run_id,
        machine="agent_loop",
        machine_sha256="f" * 64,
        machine_text="name: agent_loop\n",
        task="find the lab password",
        budgets=BUDGETS,
        state="drafting",
        status="running",
        started_at=started_at,
        pid=4242,
    )


def snapshot(state: str = "drafting", steps: int = 0, **kw: object) -> Snapshot:
    return Snapshot(
        state=state,
        outcome=None,
        next_action="model",
        clock_ms=steps * 10,
        budgets=BUDGETS,
        meters=Meters(steps_used=steps, elapsed_ms=steps * 10),
        **kw,  # type: ignore[arg-type]
    )


def started(run_id: str = "run-1") -> Event:
    return Event(
        run_id=run_id,
        seq=0,
        kind="started",
        at_ms=0,
        wall_time="2025-01-01T00:00:00Z",
        source=None,
        dest="drafting",
        trigger=None,
        snapshot=snapshot(),
        note="started by test",
    )


def transition(seq: int, run_id: str = "run-1") -> Event:
    tool = ToolOutcome(
        name="lookup",
        args={"q": "again", "n": [1, 2.5, None]},
        status="returned",
        receipts=RECEIPTS,
        observation={"text": "No exact match. Refine your query — 🔁"},
        final=None,
        cost=0.01,
        duration_ms=12,
    )
    return Event(
        run_id=run_id,
        seq=seq,
        kind="transition",
        at_ms=seq * 10,
        wall_time=f"2025-01-01T00:00:0{seq % 10}Z",
        source="drafting",
        dest="tool_pending",
        trigger="tool_call",
        snapshot=snapshot(
            steps=seq,
            proposal=ToolCall(name="lookup", args={"q": "again"}, ignored=("done",)),
            tool=tool,
            allowlist=("lookup",),
        ),
        guards=(
            GuardResult(transition=0, guard="not tool_allowed", result=False),
            GuardResult(transition=3, guard="thrashing", result=False),
        ),
        check=(GuardResult(transition=19, guard="budget_tripped", result=False),),
        facts=Facts(action="model", reply={"tool_call": {"name": "lookup"}}, reply_cost=0.002),
        retry=seq % 2 == 0,
    )


def halt_record(run_id: str = "run-1") -> HaltRecord:
    return HaltRecord(
        task="find the lab password",
        max_steps=8,
        wall_clock_ms=15000,
        steps_used=3,
        tool_calls=(
            ToolCallEntry(
                step=1, name="lookup", args={"q": "again"}, status="returned", receipts=RECEIPTS
            ),
        ),
        halt_reason=HaltReason.MAX_STEPS,
        answer="cannot: step budget",
        run_id=run_id,
        machine="agent_loop",
        machine_sha256="f" * 64,
        terminal_state="budget_exhausted",
        budgets=BUDGETS,
        meters=Meters(steps_used=3, tool_calls=1, cost=0.03, elapsed_ms=30),
        started_at="2025-01-01T00:00:00Z",
        ended_at="2025-01-01T00:00:09Z",
        journal="journal.db",
        handoff=HandoffPacket(why="cap", tried=("lookup",), frozen_args={"q": "again"}),
    )


def raw(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row
    return conn


# --- schema -----------------------------------------------------------------------------------


def test_schema_is_created_in_wal_mode(store: SqliteStore, db_path: Path) -> None:
    assert db_path.is_file()
    conn = raw(db_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"runs", "events", "_sqlite_migrations"} <= tables
        triggers = {
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")
        }
        assert {"events_no_update", "events_no_delete"} <= triggers
        pk = [r["name"] for r in conn.execute("PRAGMA table_info(events)") if r["pk"]]
        assert sorted(pk) == ["run_id", "seq"]
    finally:
        conn.close()


@pytest.mark.parametrize(("synchronous", "level"), [("NORMAL", 1), ("FULL", 2)])
def test_synchronous_mode_is_set(db_path: Path, synchronous: str, level: int) -> None:
    s = SqliteStore(db_path, synchronous=synchronous)  # type: ignore[arg-type]
    try:
        assert s.conn.execute("PRAGMA synchronous").fetchone()[0] == level
    finally:
        s.close()


def test_reopening_an_existing_journal_keeps_its_runs(db_path: Path) -> None:
    first = SqliteStore(db_path)
    first.start_run(run_row(), started())
    first.close()
    second = SqliteStore(db_path)
    try:
        assert second.get_run("run-1") == run_row()
    finally:
        second.close()


# --- writes and reads -------------------------------------------------------------------------


def test_start_append_finish_then_read_back_equal_values(store: SqliteStore) -> None:
    run = run_row()
    store.start_run(run, started())
    assert store.get_run("run-1") == run

    events = [started(), transition(1), transition(2)]
    store.append(events[1])
    store.append(events[2])
    assert store.events("run-1") == events
    assert store.get_run("run-1") == attrs.evolve(run, state="tool_pending", steps_used=2)

    record = halt_record()
    store.finish_run(record)
    finished = store.get_run("run-1")
    assert finished == attrs.evolve(
        run,
        state="budget_exhausted",
        status="halted",
        steps_used=3,
        halt_reason=HaltReason.MAX_STEPS,
        ended_at="2025-01-01T00:00:09Z",
        record=record,
    )
    assert store.list_runs() == [finished]


def test_list_runs_newest_first_with_limit(store: SqliteStore) -> None:
    for i, started_at in enumerate(["2025-01-02", "2025-01-03", "2025-01-01"]):
        store.start_run(run_row(f"run-{i}", started_at), started(f"run-{i}"))
    assert [r.run_id for r in store.list_runs()] == ["run-1", "run-0", "run-2"]
    assert [r.run_id for r in store.list_runs(limit=2)] == ["run-1", "run-0"]


def test_events_are_ordered_by_seq_and_kept_per_run(store: SqliteStore) -> None:
    store.start_run(run_row("a"), started("a"))
    store.start_run(run_row("b"), started("b"))
    for seq in (3, 1, 2):
        store.append(transition(seq, "a"))
    store.append(transition(1, "b"))
    assert [e.seq for e in store.events("a")] == [0, 1, 2, 3]
    assert [e.seq for e in store.events("b")] == [0, 1]
    assert all(e.run_id == "a" for e in store.events("a"))


def test_each_write_is_committed_and_visible_to_another_reader(
    store: SqliteStore, db_path: Path
) -> None:
    store.start_run(run_row(), started())
    store.append(transition(1))
    conn = raw(db_path)
    try:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 2
    finally:
        conn.close()
    # A live run's state and steps are read from its newest event, by any reader.
    other = SqliteStore(db_path)
    try:
        live = other.get_run("run-1")
        assert (live.status, live.state, live.steps_used) == ("running", "tool_pending", 1)
        assert [r.state for r in other.list_runs()] == ["tool_pending"]
    finally:
        other.close()


def test_duplicate_run_id_and_seq_raises_journal_error(store: SqliteStore) -> None:
    store.start_run(run_row(), started())
    store.append(transition(1))
    dup = attrs.evolve(transition(1), dest="done", note="rewritten")
    with pytest.raises(JournalError) as info:
        store.append(dup)
    assert info.value.run_id == "run-1"
    assert info.value.path == store.path
    # the failed write was rolled back whole: neither the event nor the run row changed
    assert store.events("run-1")[1] == transition(1)
    assert store.get_run("run-1").steps_used == 1
    # and the store still works afterwards
    store.append(transition(2))
    assert [e.seq for e in store.events("run-1")] == [0, 1, 2]


def test_duplicate_run_raises_journal_error(store: SqliteStore) -> None:
    store.start_run(run_row(), started())
    with pytest.raises(JournalError):
        store.start_run(run_row(), started())


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE events SET dest = 'done' WHERE run_id = 'run-1'",
        "UPDATE events SET snapshot = '{}'",
        "DELETE FROM events WHERE seq = 1",
        "DELETE FROM events",
    ],
)
def test_events_are_append_only_even_through_raw_sqlite(
    store: SqliteStore, db_path: Path, statement: str
) -> None:
    store.start_run(run_row(), started())
    store.append(transition(1))
    conn = raw(db_path)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(statement)
    finally:
        conn.close()
    assert store.events("run-1") == [started(), transition(1)]


# --- failures ---------------------------------------------------------------------------------


def test_unknown_run_raises_run_not_found(store: SqliteStore) -> None:
    store.start_run(run_row(), started())
    with pytest.raises(RunNotFound) as info:
        store.get_run("nope")
    assert info.value.run_id == "nope"
    assert info.value.path == store.path
    with pytest.raises(RunNotFound):
        store.events("nope")


def test_writes_for_a_run_not_in_the_journal_are_refused(store: SqliteStore) -> None:
    # An orphan event or a halt record that lands nowhere would lose the run's history.
    with pytest.raises(JournalError, match=r"FOREIGN KEY|no such run"):
        store.append(transition(1, run_id="ghost"))
    with pytest.raises(JournalError, match="no such run") as info:
        store.finish_run(halt_record(run_id="ghost"))
    assert info.value.run_id == "ghost"
    assert store.list_runs() == []


def test_opening_a_non_database_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database, just some garbage bytes\x00\xff" * 64)
    with pytest.raises(JournalError) as info:
        SqliteStore(path)
    assert info.value.path == str(path)
    assert str(path) in str(info.value)
    assert "cannot open as a journal" in str(info.value)


def test_opening_a_directory_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(JournalError) as info:
        SqliteStore(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_a_newer_migration_is_refused(db_path: Path) -> None:
    SqliteStore(db_path).close()
    conn = raw(db_path)
    conn.execute(
        "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) VALUES (?, ?, ?)",
        ("fsm_agent", "m999_from_the_future", "2099-01-01 00:00:00+00:00"),
    )
    conn.close()
    with pytest.raises(JournalError) as info:
        SqliteStore(db_path)
    assert "m999_from_the_future" in str(info.value)
    assert str(db_path) in str(info.value)
    assert info.value.path == str(db_path)


def test_migrations_of_another_set_are_not_ours_to_judge(db_path: Path) -> None:
    SqliteStore(db_path).close()
    conn = raw(db_path)
    conn.execute(
        "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) VALUES (?, ?, ?)",
        ("someone_else", "m999_theirs", "2099-01-01 00:00:00+00:00"),
    )
    conn.close()
    SqliteStore(db_path).close()


def _insert_event(db_path: Path, seq: int, snapshot_json: str) -> None:
    conn = raw(db_path)
    try:
        conn.execute(
            "INSERT INTO events (run_id, seq, kind, at_ms, wall_time, source, dest, trigger, halt,"
            " retry, guards, checks, snapshot, facts, note)"
            " VALUES ('run-1', ?, 'transition', 0, 'w', 'drafting', 'done', 'answer', NULL, 0,"
            " '[]', '[]', ?, NULL, NULL)",
            (seq, snapshot_json),
        )
    finally:
        conn.close()


@pytest.mark.parametrize(
    "snapshot_json",
    [
        '{"state": "drafting", "truncat',
        '{"state": 1}',
        "[]",
        serde.dumps(snapshot())[:-1] + ',"x":1}',
    ],
    ids=["bad-json", "wrong-shape", "not-an-object", "extra-key"],
)
def test_corrupt_event_row_names_the_seq(
    store: SqliteStore, db_path: Path, snapshot_json: str
) -> None:
    store.start_run(run_row(), started())
    store.append(transition(1))
    _insert_event(db_path, 7, snapshot_json)
    with pytest.raises(JournalError) as info:
        store.events("run-1")
    assert "corrupt event seq 7" in str(info.value)
    assert info.value.run_id == "run-1"
    assert str(db_path) in str(info.value)


def test_corrupt_run_row_names_the_run(store: SqliteStore, db_path: Path) -> None:
    store.start_run(run_row(), started())
    conn = raw(db_path)
    conn.execute("UPDATE runs SET budgets = '{\"max_steps\": \"8\"}' WHERE run_id = 'run-1'")
    conn.close()
    with pytest.raises(JournalError) as info:
        store.get_run("run-1")
    assert "corrupt runs row" in str(info.value)
    assert info.value.run_id == "run-1"


# --- a plain SQLite file ----------------------------------------------------------------------


def test_journal_is_a_plain_sqlite_file(store: SqliteStore, db_path: Path) -> None:
    store.start_run(run_row(), started())
    store.append(transition(1))
    store.finish_run(halt_record())

    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT seq, kind, dest FROM events ORDER BY seq").fetchall()
        assert rows == [(0, "started", "drafting"), (1, "transition", "tool_pending")]
        assert conn.execute("SELECT halt_reason FROM runs").fetchall() == [("max_steps",)]
    finally:
        conn.close()


def test_journal_is_readable_with_the_sqlite3_cli(store: SqliteStore, db_path: Path) -> None:
    cli = shutil.which("sqlite3")
    if cli is None:
        pytest.skip("the sqlite3 command-line shell is not installed")
    store.start_run(run_row(), started())
    store.finish_run(halt_record())
    tables = subprocess.run(
        [cli, str(db_path), ".tables"], capture_output=True, text=True, check=True
    )
    assert {"runs", "events"} <= set(tables.stdout.split())
    query = subprocess.run(
        [cli, str(db_path), "SELECT run_id, status, halt_reason FROM runs"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert query.stdout.strip() == "run-1|halted|max_steps"


def test_finished_run_record_round_trips(store: SqliteStore) -> None:
    store.start_run(run_row(), started())
    record = attrs.evolve(halt_record(), halt_reason=HaltReason.COMPLETED, answer="42")
    store.finish_run(record)
    back = store.get_run("run-1").record
    assert back == record
    assert isinstance(back, HaltRecord)
    assert back.handoff == HandoffPacket(why="cap", tried=("lookup",), frozen_args={"q": "again"})


def test_final_answer_proposal_survives_the_journal(store: SqliteStore) -> None:
    event = attrs.evolve(
        transition(1),
        snapshot=snapshot(steps=1, proposal=FinalAnswer(text="42", ignored=("done",))),
    )
    store.start_run(run_row(), started())
    store.append(event)
    assert store.events("run-1")[1].snapshot.proposal == FinalAnswer(text="42", ignored=("done",))
