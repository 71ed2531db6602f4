"""The store contract: every journal backend passes the same tests.

The `store` fixture is parametrized over the backends: SQLite (a fresh file) and
PostgreSQL (a fresh schema on the server `FSM_AGENT_TEST_PG` names, default
`postgresql://postgres@127.0.0.1:5432/test`, dropped afterwards). Without a reachable server
the PostgreSQL cases are skipped, saying why, unless `FSM_AGENT_PG_TESTS=require` (CI), which
makes that a failure. A `Backend` gives each test what it needs beside the store: more stores
on the same journal, and raw SQL as someone with the database in hand.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner

from fsm_agent.adapters.models import ScriptedModel
from fsm_agent.cli.main import cli
from fsm_agent.encoding import text_sha256
from fsm_agent.errors import JournalError, NotAJournal
from fsm_agent.halt import HaltReason
from fsm_agent.journal import serde
from fsm_agent.journal.chain import verify_run
from fsm_agent.journal.chain_hash import UNKEYED_4, record_link
from fsm_agent.journal.runfile import (
    RunExistsError,
    RunFileError,
    export_run,
    import_run,
    read_run_file,
)
from fsm_agent.journal.store import Control, Event, Facts, GuardResult, RunRow, Store
from fsm_agent.journal.witness import read_log
from fsm_agent.review.replay import replay_events
from fsm_agent.run_ids import RunNotFound
from fsm_agent.runtime.budgets import Budgets, Meters
from fsm_agent.runtime.proposals import FinalAnswer, ToolCall
from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.record import HaltRecord, HandoffPacket, ToolCallEntry, read_record
from fsm_agent.runtime.snapshot import Snapshot, ToolOutcome
from fsm_agent.runtime.usage import ModelUsage
from fsm_agent.stores import open_store, postgres_schema, sqlite_schema
from fsm_agent.stores.dsn import is_dsn, redact_dsn
from fsm_agent.stores.postgres_schema import _HEAD as _PG_HEAD
from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.stores.sqlite_schema import APPEND_ROWS_MAX
from tests.child_writer import expected_halt
from tests.child_writer import run_id as writer_run_id
from tests.lab import LOOKUP, MISS, lab_run

ROOT = Path(__file__).parent.parent
PG_DSN = os.environ.get("FSM_AGENT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
PG_REQUIRED = os.environ.get("FSM_AGENT_PG_TESTS") == "require"
ANSWER = {"answer": "swordfish"}

# --- sample journal entries (also used by tests/test_store_sqlite.py) ---------------------------

BUDGETS = Budgets(
    max_steps=8, wall_clock_ms=15000, max_cost=1.0, tool_timeout_ms=5000, max_retries=2
)
#: the sample declaration and its real sha256 (`verify` checks one against the other)
MACHINE_TEXT = "name: agent_loop\n"
MACHINE_SHA256 = text_sha256(MACHINE_TEXT)
RECEIPTS = (Receipt(status=200, id="cap_1", idempotency_key="k-1", checksum="sha:ab"),)


def run_row(run_id: str = "run-1", started_at: str = "2025-01-01T00:00:00Z") -> RunRow:
    return RunRow(
        run_id=run_id,
        machine="agent_loop",
        machine_sha256=MACHINE_SHA256,
        machine_text=MACHINE_TEXT,
        task="find the lab password",
        budgets=BUDGETS,
        state="drafting",
        status="running",
        started_at=started_at,
        pid=4242,
        chain=UNKEYED_4,  # what a store without a chain key writes
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
        machine_sha256=MACHINE_SHA256,
        terminal_state="budget_exhausted",
        budgets=BUDGETS,
        meters=Meters(steps_used=3, tool_calls=1, cost=0.03, elapsed_ms=30),
        started_at="2025-01-01T00:00:00Z",
        ended_at="2025-01-01T00:00:09Z",
        journal="journal.db",
        handoff=HandoffPacket(why="cap", tried=("lookup",), frozen_args={"q": "again"}),
    )


# --- the backends ------------------------------------------------------------------------------


class Backend:
    """One journal of one backend, and raw access to it."""

    name: str
    location: str
    #: What the database raises when raw SQL breaks a rule of the schema.
    integrity_error: type[Exception]

    def open(self) -> Store:
        return open_store(self.location)

    def sql(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement (`?` placeholders) as the journal's owner, committed."""
        raise NotImplementedError

    def tamper(self, *statements: str) -> None:
        """What someone with the database in hand can do: switch off the append-only
        triggers, then edit."""
        raise NotImplementedError

    def migrations(self) -> list[str]:
        """The names of the applied migrations, in order."""
        raise NotImplementedError

    def add_migration(self, name: str) -> None:
        """Record a migration this fsm-agent does not know (a newer one's)."""
        raise NotImplementedError


class SqliteBackend(Backend):
    name = "sqlite"
    integrity_error = sqlite3.IntegrityError

    def __init__(self, path: Path) -> None:
        self.location = str(path)

    def sql(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.location, isolation_level=None)
        try:
            return conn.execute(statement, tuple(params)).fetchall()
        finally:
            conn.close()

    def tamper(self, *statements: str) -> None:
        self.sql("DROP TRIGGER IF EXISTS events_no_update")
        self.sql("DROP TRIGGER IF EXISTS events_no_delete")
        for statement in statements:
            self.sql(statement)

    def migrations(self) -> list[str]:
        rows = self.sql("SELECT name FROM _sqlite_migrations WHERE migration_set = 'fsm_agent'")
        return [r[0] for r in rows]

    def add_migration(self, name: str) -> None:
        self.sql(
            "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) VALUES (?, ?, ?)",
            ("fsm_agent", name, "2099-01-01 00:00:00+00:00"),
        )


class PostgresBackend(Backend):
    name = "postgres"

    def __init__(self, location: str) -> None:
        import psycopg

        self.location = location
        self.integrity_error = psycopg.errors.IntegrityConstraintViolation

    def sql(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.location, autocommit=True) as conn:
            cursor = conn.execute(statement.replace("?", "%s"), tuple(params) or None)
            return cursor.fetchall() if cursor.description else []

    def tamper(self, *statements: str) -> None:
        self.sql("ALTER TABLE events DISABLE TRIGGER events_no_update")
        self.sql("ALTER TABLE events DISABLE TRIGGER events_no_delete")
        for statement in statements:
            self.sql(statement)

    def migrations(self) -> list[str]:
        return [r[0] for r in self.sql("SELECT name FROM fsm_agent_migrations ORDER BY name")]

    def add_migration(self, name: str) -> None:
        self.sql("INSERT INTO fsm_agent_migrations (name) VALUES (?)", (name,))


def _pg_unavailable(dsn: str) -> str | None:
    """Why the PostgreSQL tests cannot run here, or None."""
    try:
        import psycopg
    except ModuleNotFoundError:
        return "psycopg is not installed (pip install -e '.[test]')"
    try:
        psycopg.connect(dsn, connect_timeout=3).close()
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return (
            f"no PostgreSQL server at {redact_dsn(dsn)} ({first}); set FSM_AGENT_TEST_PG to"
            " a DSN of a database the tests may create schemas in"
        )
    return None


@pytest.fixture(scope="session")
def pg_server() -> str:
    """The DSN of the test server, once it answered; skips (fails under
    FSM_AGENT_PG_TESTS=require) when there is none."""
    why = _pg_unavailable(PG_DSN)
    if why is not None:
        if PG_REQUIRED:
            pytest.fail(f"FSM_AGENT_PG_TESTS=require: {why}")
        pytest.skip(why)
    return PG_DSN


def with_search_path(dsn: str, schema: str) -> str:
    """`dsn` with its tables looked up (and created) in `schema`."""
    if dsn.lower().startswith(("postgresql://", "postgres://")):
        return f"{dsn}{'&' if '?' in dsn else '?'}options=-csearch_path%3D{schema}"
    return f"{dsn} options=-csearch_path={schema}"


@pytest.fixture
def pg_location(pg_server: str) -> Iterator[str]:
    """A fresh, empty schema on the test server (dropped afterwards), as a DSN."""
    import psycopg
    from psycopg import sql

    schema = f"fsm_test_{secrets.token_hex(6)}"
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield with_search_path(pg_server, schema)
    finally:
        with psycopg.connect(pg_server, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return SqliteBackend(tmp_path / "journal.db")
    return PostgresBackend(request.getfixturevalue("pg_location"))


@pytest.fixture
def store(backend: Backend) -> Iterator[Store]:
    s = backend.open()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def other(backend: Backend) -> Iterator[Store]:
    """A second store on the same journal (another process's connection)."""
    s = backend.open()
    try:
        yield s
    finally:
        s.close()


# --- writes and reads --------------------------------------------------------------------------


def test_start_append_finish_then_read_back_equal_values(store: Store) -> None:
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
    head = store.chain("run-1")[2]
    assert head is not None
    assert finished == attrs.evolve(
        run,
        state="budget_exhausted",
        status="halted",
        steps_used=3,
        halt_reason=HaltReason.MAX_STEPS,
        ended_at="2025-01-01T00:00:09Z",
        record=record,
        record_hash=record_link(head, record),  # sealed onto the head, with the record
    )
    assert store.list_runs() == [finished]


def test_reopening_a_journal_keeps_its_runs(backend: Backend) -> None:
    first = backend.open()
    first.start_run(run_row(), started())
    first.close()
    second = backend.open()
    try:
        assert second.get_run("run-1") == run_row()
        assert second.read_only is False  # type: ignore[attr-defined]
    finally:
        second.close()


def test_list_runs_newest_first_with_limit(store: Store) -> None:
    for i, started_at in enumerate(["2025-01-02", "2025-01-03", "2025-01-01"]):
        store.start_run(run_row(f"run-{i}", started_at), started(f"run-{i}"))
    assert [r.run_id for r in store.list_runs()] == ["run-1", "run-0", "run-2"]
    assert [r.run_id for r in store.list_runs(limit=2)] == ["run-1", "run-0"]
    assert store.run_ids() == ["run-2", "run-0", "run-1"]  # oldest first


def test_list_runs_pages_by_key_and_finds_text_in_the_task(store: Store) -> None:
    """`before` is a keyset cursor (ties on started_at broken by run id); `task_contains`
    folds case and takes `%`, `_` and `\\` literally, in both stores."""
    tasks = ["Refund 100% of it", "refund_window", "a\\b", "REFUND later", "other"]
    for i, task in enumerate(tasks):
        row = attrs.evolve(run_row(f"run-{i}", "2025-01-01" if i < 3 else "2025-01-02"),
                           task=task)  # fmt: skip
        store.start_run(row, started(f"run-{i}"))
    everything = [r.run_id for r in store.list_runs(None)]
    assert everything == ["run-4", "run-3", "run-2", "run-1", "run-0"]
    walked, before = [], None
    while page := store.list_runs(2, before=before):
        walked += [r.run_id for r in page]
        before = (page[-1].started_at, page[-1].run_id)
    assert walked == everything

    def found(text: str) -> list[str]:
        return [r.run_id for r in store.list_runs(None, task_contains=text)]

    assert found("refund") == ["run-3", "run-1", "run-0"]
    assert found("100%") == ["run-0"]
    assert found("d_w") == ["run-1"]
    assert found("_") == ["run-1"]
    assert found("a\\b") == ["run-2"]
    assert found("%") == ["run-0"]
    after = store.list_runs(None, task_contains="refund", before=("2025-01-02", "run-3"))
    assert [r.run_id for r in after] == ["run-1", "run-0"]


def test_ids_and_times_sort_as_bytes_whatever_the_locale(store: Store) -> None:
    # SQLite compares text as bytes; a server's locale must not reorder the same journal.
    for run_id in ["b", "B", "a-2", "a_1", "A"]:
        store.start_run(run_row(run_id), started(run_id))
    assert store.run_ids() == sorted(["b", "B", "a-2", "a_1", "A"])


def test_events_are_ordered_by_seq_and_kept_per_run(store: Store) -> None:
    store.start_run(run_row("a"), started("a"))
    store.start_run(run_row("b"), started("b"))
    with pytest.raises(JournalError, match="head is no longer"):  # only onto the head
        store.append(transition(3, "a"))
    for seq in (1, 2, 3):
        store.append(transition(seq, "a"))
    store.append(transition(1, "b"))
    assert [e.seq for e in store.events("a")] == [0, 1, 2, 3]
    assert [e.seq for e in store.events("b")] == [0, 1]
    assert all(e.run_id == "a" for e in store.events("a"))
    assert store.last_event("a") == store.events("a")[-1]
    assert store.last_event("b").seq == 1
    with pytest.raises(RunNotFound):
        store.last_event("nope")


def test_each_write_is_committed_and_visible_to_another_reader(
    store: Store, other: Store, backend: Backend
) -> None:
    store.start_run(run_row(), started())
    store.append(transition(1))
    assert backend.sql("SELECT count(*) FROM events") == [(2,)]
    # A live run's state and steps are read from its newest event, by any reader.
    live = other.get_run("run-1")
    assert (live.status, live.state, live.steps_used) == ("running", "tool_pending", 1)
    assert [r.state for r in other.list_runs()] == ["tool_pending"]
    store.finish_run(halt_record())  # a halted run's come from its row
    assert (other.get_run("run-1").state, other.get_run("run-1").steps_used) == (
        "budget_exhausted",
        3,
    )


def test_duplicate_run_id_and_seq_raises_journal_error(store: Store) -> None:
    store.start_run(run_row(), started())
    store.append(transition(1))
    dup = attrs.evolve(transition(1), dest="done", note="rewritten")
    with pytest.raises(JournalError) as info:
        store.append(dup)
    assert info.value.run_id == "run-1"
    assert info.value.path == store.location
    # the failed write was rolled back whole: neither the event nor the run row changed
    assert store.events("run-1")[1] == transition(1)
    assert store.get_run("run-1").steps_used == 1
    # and the store still works afterwards
    store.append(transition(2))
    assert [e.seq for e in store.events("run-1")] == [0, 1, 2]


def test_duplicate_run_raises_journal_error(store: Store) -> None:
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
def test_events_are_append_only_even_through_raw_sql(
    store: Store, backend: Backend, statement: str
) -> None:
    store.start_run(run_row(), started())
    store.append(transition(1))
    with pytest.raises(backend.integrity_error, match="append-only"):
        backend.sql(statement)
    assert store.events("run-1") == [started(), transition(1)]


def test_finished_run_record_round_trips(store: Store) -> None:
    store.start_run(run_row(), started())
    record = attrs.evolve(halt_record(), halt_reason=HaltReason.COMPLETED, answer="42")
    store.finish_run(record)
    back = store.get_run("run-1").record
    assert back == record
    assert isinstance(back, HaltRecord)
    assert back.handoff == HandoffPacket(why="cap", tried=("lookup",), frozen_args={"q": "again"})


def test_final_answer_proposal_survives_the_journal(store: Store) -> None:
    event = attrs.evolve(
        transition(1),
        snapshot=snapshot(steps=1, proposal=FinalAnswer(text="42", ignored=("done",))),
    )
    store.start_run(run_row(), started())
    store.append(event)
    assert store.events("run-1")[1].snapshot.proposal == FinalAnswer(text="42", ignored=("done",))


def test_mark_run_sets_a_live_runs_owner_never_a_halted_ones(store: Store) -> None:
    store.start_run(run_row(), started())
    store.mark_run("run-1", "paused", None, None)
    assert (store.get_run("run-1").status, store.get_run("run-1").pid) == ("paused", None)
    store.mark_run("run-1", "running", 7, "host-b")
    row = store.get_run("run-1")
    assert (row.status, row.pid, row.host) == ("running", 7, "host-b")
    store.finish_run(halt_record())
    with pytest.raises(JournalError) as info:
        store.mark_run("run-1", "running", 8, "host-c")
    assert info.value.run_id == "run-1"
    assert store.get_run("run-1").status == "halted"


def test_claim_run_is_a_compare_and_set_on_the_owner_and_the_head(store: Store) -> None:
    head = store.start_run(run_row(), started())
    store.mark_run("run-1", "running", 7, "host-a")  # its process died: someone resumes it
    was = ("running", 7, "host-a")
    assert store.claim_run("run-1", was=was, head=head, pid=8, host="host-b")
    row = store.get_run("run-1")
    assert (row.status, row.pid, row.host) == ("running", 8, "host-b")
    # A second process that read the same row loses, and writes nothing.
    assert not store.claim_run("run-1", was=was, head=head, pid=9, host="host-c")
    assert (store.get_run("run-1").pid, store.get_run("run-1").host) == (8, "host-b")
    # A paused run (no owner): the head must be the one its claimant verified.
    store.mark_run("run-1", "paused", None, None)
    paused = ("paused", None, None)
    assert not store.claim_run("run-1", was=paused, head="0" * 64, pid=9, host="host-c")
    assert store.claim_run("run-1", was=paused, head=head, pid=9, host="host-c")
    assert store.get_run("run-1").status == "running"
    store.finish_run(halt_record())
    halted = ("halted", 9, "host-c")
    assert not store.claim_run("run-1", was=halted, head=head, pid=10, host="host-d")
    assert store.get_run("run-1").status == "halted"
    assert not store.claim_run("ghost", was=paused, head=head, pid=10, host="host-d")


def test_reopen_run_continues_a_halted_run_only_under_its_seal(
    backend: Backend, store: Store
) -> None:
    """A person's decision (`Store.reopen_run`): the row's compare-and-set on the record's
    seal and the decided event's append are one transaction; of two decisions on the same
    seal one wins, and a stale seal or a run that is not halted writes nothing."""
    store.start_run(run_row(), started())
    store.append(transition(1))
    store.finish_run(halt_record())
    sealed = store.get_run("run-1").record_hash
    assert sealed is not None
    decided = attrs.evolve(transition(2), kind="decided", source="handoff", note="approved")
    assert store.reopen_run(decided, seal="0" * 64, pid=1, host="h") is None  # stale seal
    assert len(store.events("run-1")) == 2
    other = backend.open()
    try:
        head = store.reopen_run(decided, seal=sealed, pid=5, host="host-a")
        assert head is not None
        assert other.reopen_run(decided, seal=sealed, pid=6, host="host-b") is None  # lost
    finally:
        other.close()
    row = store.get_run("run-1")
    assert (row.status, row.pid, row.host, row.record, row.halt_reason) == (
        "running",
        5,
        "host-a",
        None,
        None,
    )
    assert [e.kind for e in store.events("run-1")] == ["started", "transition", "decided"]
    assert store.chain("run-1")[2] == head
    store.append(transition(3))  # the run goes on from the decided event
    store.finish_run(halt_record())
    assert store.get_run("run-1").status == "halted"


def test_of_concurrent_claims_of_one_run_exactly_one_wins(backend: Backend, store: Store) -> None:
    head = store.start_run(run_row(), started())
    store.mark_run("run-1", "paused", None, None)
    stores = [backend.open() for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    won: list[int] = []

    def claim(n: int) -> None:
        barrier.wait()
        if stores[n].claim_run("run-1", was=("paused", None, None), head=head, pid=100 + n,
                               host="h"):  # fmt: skip
            won.append(100 + n)

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert len(won) == 1
    assert store.get_run("run-1").pid == won[0]


def test_run_summaries_filter_by_machine_and_start(store: Store) -> None:
    store.start_run(run_row("a", "2025-01-01"), started("a"))
    store.start_run(attrs.evolve(run_row("b", "2025-02-01"), machine="other"), started("b"))
    store.start_run(run_row("c", "2025-03-01"), started("c"))
    store.finish_run(halt_record("c"))
    summaries = store.run_summaries()
    assert [(s.run_id, s.machine) for s in summaries] == [
        ("a", "agent_loop"),
        ("c", "agent_loop"),
        ("b", "other"),
    ]
    c = summaries[1]
    assert (c.status, c.halt_reason, c.steps_used, c.max_steps, c.cost) == (
        "halted",
        HaltReason.MAX_STEPS,
        3,
        8,
        0.03,
    )
    assert (summaries[0].status, summaries[0].cost) == ("running", None)
    assert [s.run_id for s in store.run_summaries(machine="agent_loop")] == ["a", "c"]
    assert [s.run_id for s in store.run_summaries(since="2025-02-01")] == ["c", "b"]


# --- failures ----------------------------------------------------------------------------------


def test_run_summaries_add_up_the_tokens_model_calls_reported(store: Store) -> None:
    def model_call(seq: int, run_id: str, usage: ModelUsage | None) -> Event:
        facts = Facts(action="model", reply={"answer": "x"}, usage=usage)
        return attrs.evolve(transition(seq, run_id), facts=facts)

    store.start_run(run_row("t"), started("t"))
    store.append(model_call(1, "t", ModelUsage(input_tokens=100, output_tokens=7)))
    store.append(model_call(2, "t", ModelUsage(latency_ms=5)))  # no counts reported
    store.append(model_call(3, "t", ModelUsage(input_tokens=20, output_tokens=None)))
    store.start_run(run_row("u"), started("u"))
    store.append(model_call(1, "u", None))  # journaled before usage was kept
    by_id = {s.run_id: s for s in store.run_summaries()}
    assert (by_id["t"].input_tokens, by_id["t"].output_tokens) == (120, 7)
    assert (by_id["u"].input_tokens, by_id["u"].output_tokens) == (None, None)


def test_unknown_run_raises_run_not_found(store: Store) -> None:
    store.start_run(run_row(), started())
    with pytest.raises(RunNotFound) as info:
        store.get_run("nope")
    assert info.value.run_id == "nope"
    assert info.value.path == store.location
    with pytest.raises(RunNotFound):
        store.events("nope")
    with pytest.raises(RunNotFound):
        store.chain("nope")


def test_writes_for_a_run_not_in_the_journal_are_refused(store: Store) -> None:
    # An orphan event or a halt record that lands nowhere would lose the run's history.
    with pytest.raises(JournalError, match=r"FOREIGN KEY|no such run"):
        store.append(transition(1, run_id="ghost"))
    with pytest.raises(JournalError, match="no such run") as info:
        store.finish_run(halt_record(run_id="ghost"))
    assert info.value.run_id == "ghost"
    with pytest.raises(JournalError):
        store.mark_run("ghost", "paused", None, None)
    assert store.list_runs() == []


def test_a_newer_migration_is_refused(backend: Backend) -> None:
    backend.open().close()
    backend.add_migration("m999_from_the_future")
    with pytest.raises(JournalError) as info:
        backend.open()
    assert "m999_from_the_future" in str(info.value)
    assert "newer fsm-agent" in str(info.value)
    assert info.value.path == backend.location
    assert backend.location in str(info.value)


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
    store: Store, backend: Backend, snapshot_json: str
) -> None:
    store.start_run(run_row(), started())
    store.append(transition(1))
    backend.sql(
        "INSERT INTO events (run_id, seq, kind, at_ms, wall_time, source, dest, trigger, halt,"
        " retry, guards, checks, snapshot, facts, note)"
        " VALUES ('run-1', 7, 'transition', 0, 'w', 'drafting', 'done', 'answer', NULL, 0,"
        " '[]', '[]', ?, NULL, NULL)",
        (snapshot_json,),
    )
    with pytest.raises(JournalError) as info:
        store.events("run-1")
    assert "corrupt event seq 7" in str(info.value)
    assert info.value.run_id == "run-1"
    assert backend.location in str(info.value)
    # the live view does not fail on it: the run's row still reads
    assert store.get_run("run-1").state == "done"


def test_corrupt_run_row_names_the_run(store: Store, backend: Backend) -> None:
    store.start_run(run_row(), started())
    backend.sql("UPDATE runs SET budgets = '{\"max_steps\": \"8\"}' WHERE run_id = 'run-1'")
    with pytest.raises(JournalError) as info:
        store.get_run("run-1")
    assert "corrupt runs row" in str(info.value)
    assert info.value.run_id == "run-1"
    with pytest.raises(JournalError, match="corrupt runs row"):
        store.run_summaries()


def test_a_closed_store_refuses_with_a_journal_error(backend: Backend) -> None:
    s = backend.open()
    s.close()
    with pytest.raises(JournalError):
        s.list_runs()


# --- real runs, the chain, export and import ---------------------------------------------------


def test_a_real_run_is_journaled_whole_and_replays(tmp_path: Path, store: Store) -> None:
    record = lab_run(tmp_path, [MISS, LOOKUP, ANSWER], store=store)
    assert record.halt_reason is HaltReason.COMPLETED
    assert record.journal == store.location
    events = store.events(record.run_id)
    assert [e.seq for e in events] == list(range(len(events)))  # gap-free from 0
    assert events[0].kind == "started"
    assert events[-1].halt is HaltReason.COMPLETED
    row = store.get_run(record.run_id)
    assert row.record == record == read_record(tmp_path / "r.json")
    assert (row.status, row.state, row.steps_used) == ("halted", "done", 3)
    assert replay_events(row, events).ok
    report = verify_run(store, record.run_id)
    assert report.ok, report.findings
    _, links, head = store.chain(record.run_id)
    assert head == links[-1].hash == record.journal_head
    assert [x.seq for x in links] == [e.seq for e in events]


def test_an_edited_event_shows_at_its_seq(tmp_path: Path, store: Store, backend: Backend) -> None:
    record = lab_run(tmp_path, [LOOKUP, ANSWER], store=store)
    backend.tamper(
        f"UPDATE events SET note = 'all fine' WHERE run_id = '{record.run_id}' AND seq = 2"  # noqa: S608
    )
    assert [(f.kind, f.seq) for f in verify_run(store, record.run_id).findings] == [("edited", 2)]


def test_a_deleted_event_shows_as_the_missing_seq(
    tmp_path: Path, store: Store, backend: Backend
) -> None:
    record = lab_run(tmp_path, [LOOKUP, ANSWER], store=store)
    backend.tamper(f"DELETE FROM events WHERE run_id = '{record.run_id}' AND seq = 2")  # noqa: S608
    assert [(f.kind, f.seq) for f in verify_run(store, record.run_id).findings] == [("deleted", 2)]


def test_the_conditional_append_refuses_a_stale_head(store: Store, other: Store) -> None:
    store.start_run(run_row(), started())  # `store` holds the head of seq 0
    other.append(transition(1))  # another process moves the head on
    with pytest.raises(JournalError, match="another process is writing this run") as info:
        store.append(attrs.evolve(transition(2), note="chained onto seq 0"))
    assert info.value.run_id == "run-1"
    assert [e.seq for e in store.events("run-1")] == [0, 1]
    assert verify_run(store, "run-1").ok
    store.append(transition(2))  # having read the head again, it chains on
    assert [e.seq for e in other.events("run-1")] == [0, 1, 2]
    assert verify_run(other, "run-1").ok


def test_append_many_chains_each_event_on_the_one_before_in_one_transaction(
    store: Store, other: Store, backend: Backend
) -> None:
    store.start_run(run_row(), started())
    head = store.append_many([transition(1), transition(2), transition(3)])
    _, links, stored_head = other.chain("run-1")
    assert [x.seq for x in links] == [0, 1, 2, 3]
    assert head == stored_head == links[-1].hash
    assert len({x.hash for x in links}) == 4  # each event its own hash
    assert verify_run(other, "run-1").ok
    # all or nothing: a batch whose last event cannot be written leaves no event of it
    with pytest.raises(JournalError, match="not written"):
        store.append_many([transition(4), transition(5), transition(5)])
    assert [e.seq for e in other.events("run-1")] == [0, 1, 2, 3]
    # ... and one chained onto a head another writer moved meanwhile is refused whole
    other.append(transition(4))
    with pytest.raises(JournalError, match="another process is writing this run"):
        store.append_many([attrs.evolve(transition(4), note="fork"), transition(5)])
    assert [e.note for e in other.events("run-1")][-1] != "fork"
    assert backend.sql("SELECT count(*) FROM events") == [(5,)]
    assert store.append_many([transition(5), transition(6)]) == other.chain("run-1")[2]
    assert verify_run(other, "run-1").ok


def test_append_many_of_more_events_than_one_statement_holds_is_all_or_nothing_too(
    store: Store, other: Store, backend: Backend
) -> None:
    # SQLite writes up to APPEND_ROWS_MAX events in one statement, more in a transaction
    count = APPEND_ROWS_MAX + 8
    store.start_run(run_row(), started())
    with pytest.raises(JournalError, match="not written"):
        store.append_many([*map(transition, range(1, count)), transition(count - 1)])
    assert backend.sql("SELECT count(*) FROM events") == [(1,)]
    head = store.append_many([transition(seq) for seq in range(1, count + 1)])
    assert [e.seq for e in other.events("run-1")] == list(range(count + 1))
    assert head == other.chain("run-1")[2]
    assert verify_run(other, "run-1").ok


def test_an_append_on_a_connection_the_server_dropped_fails_clearly_then_reconnects(
    store: Store, other: Store, backend: Backend
) -> None:
    # PostgreSQL runs an append as one statement in autocommit: a dropped connection is a
    # clear error, nothing half-written, and the next write reconnects (in transactions again)
    if backend.name != "postgres":
        pytest.skip("a server connection is PostgreSQL's")
    store.start_run(run_row(), started())
    store.append_many([transition(1), transition(2)])
    pid = store.conn.info.backend_pid  # type: ignore[attr-defined]
    backend.sql("SELECT pg_terminate_backend(?)", (pid,))
    with pytest.raises(JournalError, match="write failed"):
        store.append_many([transition(3), transition(4)])
    assert [e.seq for e in other.events("run-1")] == [0, 1, 2]
    store.append_many([transition(3), transition(4)])
    assert not store.conn.autocommit  # type: ignore[attr-defined]
    assert [e.seq for e in store.events("run-1")] == [0, 1, 2, 3, 4]  # a transaction
    assert verify_run(other, "run-1").ok


def test_two_stores_racing_on_one_run_never_fork_its_chain(backend: Backend, store: Store) -> None:
    # Two writers append to the same run at once, each onto the head it last read: exactly
    # one wins each seq, the loser is told, reads the head again and goes on.
    store.start_run(run_row(), started())
    target, won = 40, {"a": list[int](), "b": list[int]()}
    refused = {"a": 0, "b": 0}

    def writer(name: str) -> None:
        s = backend.open()
        try:
            while True:
                seq = s.last_event("run-1").seq + 1
                if seq > target:
                    return
                try:
                    s.append(attrs.evolve(transition(seq), note=f"{name} {seq}"))
                except JournalError as exc:
                    refused[name] += 1
                    if "another process is writing this run" not in str(exc):
                        raise
                    continue
                won[name].append(seq)
        finally:
            s.close()

    _in_threads(writer, ["a", "b"])
    events = store.events("run-1")
    assert [e.seq for e in events] == list(range(target + 1))
    assert sorted(won["a"] + won["b"]) == list(range(1, target + 1))  # one winner per seq
    assert all(events[seq].note == f"{name} {seq}" for name in won for seq in won[name])
    assert verify_run(store, "run-1").ok


def test_export_import_round_trip_keeps_the_chain(
    tmp_path: Path, store: Store, backend: Backend
) -> None:
    # A run made in a SQLite file moves into this journal hash for hash, and back out equal.
    source = tmp_path / "source.db"
    record = lab_run(tmp_path, [MISS, LOOKUP, ANSWER], store=source)
    origin = open_store(source)
    try:
        exported = export_run(origin, record.run_id)
    finally:
        origin.close()
    import_run(store, exported)
    assert store.get_run(record.run_id) == exported.run
    assert tuple(store.events(record.run_id)) == exported.events
    _, links, head = store.chain(record.run_id)
    assert head == exported.head_hash
    assert [(x.prev_hash, x.hash) for x in links] == [(h.prev_hash, h.hash) for h in exported.chain]
    assert verify_run(store, record.run_id).ok
    assert export_run(store, record.run_id) == exported
    with pytest.raises(RunExistsError):
        import_run(store, exported)
    with pytest.raises(JournalError, match="already in this journal"):
        store.import_run(exported.run, exported.events, exported.record)
    assert len(store.events(record.run_id)) == len(exported.events)
    fresh = backend.open()
    try:
        assert verify_run(fresh, record.run_id).ok
    finally:
        fresh.close()


# --- the sealed halt record, the chain mode and the keyed chain ---------------------------------

CHAIN_KEY = b"contract-test-key-" * 2
RECORDED_V1 = Path(__file__).parent / "recorded_v1"


def _seal_findings(store: Store, run_id: str) -> list[tuple[str, int, str | None]]:
    return [(f.kind, f.seq, f.field) for f in verify_run(store, run_id).findings]


def test_the_halt_record_is_sealed_with_it_and_an_edit_of_it_shows(
    tmp_path: Path, store: Store, backend: Backend
) -> None:
    record = lab_run(tmp_path, [LOOKUP, ANSWER], store=store)
    row = store.get_run(record.run_id)
    assert row.chain == UNKEYED_4
    assert record.journal_head is not None
    assert row.record_hash == record_link(record.journal_head, record)
    assert verify_run(store, record.run_id).record == "sealed"
    rid = record.run_id
    backend.tamper(
        'UPDATE runs SET record = replace(record, \'"answer":"swordfish"\','  # noqa: S608
        f" '\"answer\":\"hunter2\"') WHERE run_id = '{rid}'"
    )
    assert store.get_run(rid).record.answer == "hunter2"  # type: ignore[union-attr]
    assert _seal_findings(store, rid) == [("record_edited", 4, "runs.record")]
    backend.tamper(f"UPDATE runs SET halt_reason = 'max_steps' WHERE run_id = '{rid}'")  # noqa: S608
    assert ("summary_edited", 4, "runs.halt_reason") in _seal_findings(store, rid)
    backend.tamper(f"UPDATE runs SET machine_text = 'name: other' WHERE run_id = '{rid}'")  # noqa: S608
    assert ("machine_edited", 0, "runs.machine_text") in _seal_findings(store, rid)


def test_a_keyed_store_chains_new_runs_with_its_key(
    tmp_path: Path, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FSM_AGENT_CHAIN_KEY", CHAIN_KEY.decode())
    keyed = backend.open()  # its key from the environment
    monkeypatch.delenv("FSM_AGENT_CHAIN_KEY")
    plain = backend.open()  # the same journal, without the key
    try:
        assert keyed.chain_key == CHAIN_KEY
        assert plain.chain_key is None
        record = lab_run(tmp_path, [MISS, LOOKUP, ANSWER], store=keyed)
        row = keyed.get_run(record.run_id)
        assert row.chain is not None
        assert row.chain.startswith("hmac-sha256/4:")
        report = verify_run(keyed, record.run_id)
        assert (report.ok, report.mode, report.record) == (True, "keyed", "sealed")
        unchecked = verify_run(plain, record.run_id)
        assert (unchecked.ok, unchecked.checked, unchecked.findings) == (False, False, ())
        with pytest.raises(JournalError, match=r"keyed .* and no key was given"):
            plain.append(attrs.evolve(keyed.last_event(record.run_id), seq=99))
        exported = export_run(plain, record.run_id)  # export needs no key ...
        target = SqliteStore(tmp_path / "copy.db", chain_key=None)
        try:
            with pytest.raises(RunFileError, match="keyed and no key was given"):
                import_run(target, exported)  # ... import does
        finally:
            target.close()
        target = SqliteStore(tmp_path / "copy.db", chain_key=CHAIN_KEY)
        try:
            import_run(target, exported)
            assert target.get_run(record.run_id) == row
            assert verify_run(target, record.run_id).ok
        finally:
            target.close()
    finally:
        keyed.close()
        plain.close()


def test_a_witness_sees_each_commit_the_halt_and_an_import_and_a_reopened_run_shows(
    tmp_path: Path, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FSM_AGENT_CHAIN_KEY", CHAIN_KEY.decode())
    witness = tmp_path / "witness.log"
    monkeypatch.setenv("FSM_AGENT_WITNESS", str(witness))
    s = backend.open()
    try:
        record = lab_run(tmp_path, [LOOKUP, ANSWER], store=s)
        rid = record.run_id
        exported = export_run(s, rid)
        seen = read_log([witness], CHAIN_KEY, run_id=rid).seen[rid]
        assert [(x.seq, x.seal is not None) for x in seen] == [
            (0, False), (1, False), (3, False), (4, False), (4, True),
        ]  # fmt: skip
        assert (seen[-1].head, seen[-1].seal) == (
            record.journal_head, s.get_run(rid).record_hash,
        )  # fmt: skip
        assert verify_run(s, rid).witness == f"witnessed to seq 4, halted ({witness}:5)"
        reopen = (
            "UPDATE runs SET status = 'running', record = NULL, record_hash = NULL,"
            " head_hash = NULL, head_seq = NULL, halt_reason = NULL, ended_at = NULL"
        )
        backend.tamper(  # the halted run reopened, as if it had been killed early
            f"DELETE FROM events WHERE run_id = '{rid}' AND seq > 0",  # noqa: S608
            f"{reopen} WHERE run_id = '{rid}'",
        )
        found = [(f.kind, f.seq, f.field) for f in verify_run(s, rid).findings]
        assert found == [("truncated", 1, "witness"), ("reopened", 4, "witness")]
        monkeypatch.delenv("FSM_AGENT_WITNESS")
        report = verify_run(s, rid)
        assert (report.findings, report.intact, report.ok) == ((), True, False)
        assert report.unproven is not None
    finally:
        s.close()
    copy = SqliteStore(tmp_path / "copy.db", witness=tmp_path / "copy.log")
    try:
        import_run(copy, exported)
    finally:
        copy.close()
    (line,) = read_log([tmp_path / "copy.log"], CHAIN_KEY).seen[rid]
    assert (line.seq, line.head, line.seal) == (4, record.journal_head, exported.run.record_hash)


def test_a_journal_from_before_the_seal_migrates_and_verifies_as_before(
    backend: Backend,
) -> None:
    old = read_run_file(RECORDED_V1 / "v1-lab-password.json")  # chain mode None: version 1
    s = backend.open()
    try:
        import_run(s, old)
    finally:
        s.close()
    names = backend.migrations()
    new_migration = next(n for n in names if "chain_mode_and_record_seal" in n)
    later = names[names.index(new_migration) :]
    backend.sql("ALTER TABLE runs DROP COLUMN chain")  # the journal as it was written then
    backend.sql("ALTER TABLE runs DROP COLUMN record_hash")
    table = "_sqlite_migrations" if backend.name == "sqlite" else "fsm_agent_migrations"
    for name in later:
        backend.sql(f"DELETE FROM {table} WHERE name = ?", (name,))  # noqa: S608
    _undo_run_list_indexes(backend)
    _undo_chain_v3(backend)
    s = backend.open()
    try:
        assert backend.migrations()[-len(later) :] == later
        row = s.get_run(old.run.run_id)
        assert (row.chain, row.record_hash) == (None, None)
        report = verify_run(s, old.run.run_id)
        assert (report.ok, report.version, report.record) == (True, 1, "not_sealed")
        assert "halt record not sealed" in report.notes[0]
    finally:
        s.close()


def _undo_run_list_indexes(backend: Backend) -> None:
    """The run list's indexes as they were before its keyset pages (m008 / m006 undone)."""
    for name in ("runs_halt_reason", "runs_status", "runs_machine", "runs_newest"):
        backend.sql(f"DROP INDEX IF EXISTS {name}")
    if backend.name == "sqlite":
        backend.sql("CREATE INDEX runs_started_at ON runs (started_at)")
    else:
        backend.sql("CREATE INDEX runs_machine ON runs (machine, started_at)")


def _undo_chain_v3(backend: Backend) -> None:
    """The schema as it was before chain version 3 (m007 / m005 undone): declarations back
    in their run rows."""
    backend.sql(
        "UPDATE runs SET machine_text = (SELECT text FROM declarations AS d"
        " WHERE d.sha256 = runs.machine_sha256) WHERE machine_text = ''"
    )
    backend.sql("DROP TABLE declarations")
    backend.sql("ALTER TABLE events DROP COLUMN digest")
    if backend.name == "sqlite":
        backend.sql("""
            CREATE TRIGGER events_head AFTER INSERT ON events
            BEGIN
                UPDATE runs SET head_hash = NEW.hash, head_seq = NEW.seq
                WHERE run_id = NEW.run_id;
            END""")
    else:
        backend.sql(_PG_HEAD)
        backend.sql(
            "CREATE TRIGGER events_head AFTER INSERT ON events"
            " FOR EACH ROW EXECUTE FUNCTION fsm_agent_events_head()"
        )


def test_a_failed_import_leaves_nothing_behind(tmp_path: Path, store: Store) -> None:
    record = lab_run(tmp_path, [LOOKUP, ANSWER], store=tmp_path / "source.db")
    origin = open_store(tmp_path / "source.db")
    exported = export_run(origin, record.run_id)
    origin.close()
    duplicated = (*exported.events, exported.events[-1])  # a duplicate seq fails mid-way
    with pytest.raises(JournalError):
        store.import_run(exported.run, duplicated, exported.record)
    assert store.run_ids() == []
    with pytest.raises(RunNotFound):
        store.events(record.run_id)


# --- operator controls -------------------------------------------------------------------------


def test_operator_controls_per_run_and_global_in_order(store: Store) -> None:
    store.start_run(run_row("a"), started("a"))
    store.start_run(run_row("b"), started("b"))

    def control(run_id: str | None, kind: Any, payload: dict[str, Any]) -> Control:
        return Control(id=0, run_id=run_id, kind=kind, payload=payload, who="alice",
                       why="incident 42", at="2025-01-01T00:00:05Z")  # fmt: skip

    ids = [
        store.add_control(control("a", "raise_budget", {"max_steps": 12})),
        store.add_control(control(None, "freeze_routing", {})),
        store.add_control(control("b", "pause", {})),
        store.add_control(control("a", "pause", {"note": ["x", 1, None]})),
    ]
    assert ids == sorted(set(ids))
    assert ids[0] > 0
    for_a = store.controls("a")
    assert [c.id for c in for_a] == [ids[0], ids[1], ids[3]]
    assert for_a[0] == attrs.evolve(control("a", "raise_budget", {"max_steps": 12}), id=ids[0])
    assert for_a[2].payload == {"note": ["x", 1, None]}
    assert [c.id for c in store.controls("a", after=ids[1])] == [ids[3]]
    assert [c.kind for c in store.controls("b")] == ["freeze_routing", "pause"]
    with pytest.raises(JournalError):
        store.add_control(control("ghost", "pause", {}))


def test_a_control_is_applied_by_a_live_run_and_journaled(tmp_path: Path, store: Store) -> None:
    added: list[int] = []

    class RaisingOperator(ScriptedModel):
        """A person raises the run's step cap while its first model call is in flight."""

        def __call__(self, prompt: Any) -> Any:
            if not added:
                added.append(store.add_control(Control(
                    id=0, run_id="ctl-run", kind="raise_budget", payload={"max_steps": 9},
                    who="bob", why="incident 7", at="now")))  # fmt: skip
            return super().__call__(prompt)

    model = RaisingOperator([MISS, LOOKUP, ANSWER])
    record = lab_run(tmp_path, model, store=store, run_id="ctl-run", budgets={"max_steps": 3})
    assert record.halt_reason is HaltReason.COMPLETED
    events = store.events("ctl-run")
    [act] = [e for e in events if e.kind == "operator"]
    assert (act.control, act.trigger) == (added[0], "raise_budget")
    assert events[-1].snapshot.budgets.max_steps == 9
    assert store.get_run("ctl-run").budgets.max_steps == 3  # the frozen start budgets
    assert verify_run(store, "ctl-run").ok
    assert replay_events(store.get_run("ctl-run"), events).ok


# --- concurrency -------------------------------------------------------------------------------


def _in_threads(target: Callable[[str], None], names: list[str]) -> None:
    """Run `target(name)` in one thread per name, all started at once; re-raise the first
    failure."""
    failures: list[BaseException] = []
    barrier = threading.Barrier(len(names))

    def body(name: str) -> None:
        try:
            barrier.wait(timeout=30)
            target(name)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=body, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    if failures:
        raise failures[0]


def test_threads_opening_a_new_journal_at_once_migrate_it_once(backend: Backend) -> None:
    # SQLite: several connections switching a brand-new file to WAL at once used to get
    # "database is locked" without any wait (~1 open in 20 with 4 threads); retried now.
    stores: list[Store] = []
    _in_threads(lambda _: stores.append(backend.open()), [f"t{i}" for i in range(4)])
    for s in stores:
        s.close()
    names = backend.migrations()
    assert names
    assert len(names) == len(set(names))


def test_threads_appending_different_runs_lose_nothing(backend: Backend, store: Store) -> None:
    per_thread, events_per_run = 3, 12

    def writer(name: str) -> None:
        s = backend.open()  # one store per thread, as a worker's threads hold
        try:
            for n in range(per_thread):
                rid = f"{name}-{n}"
                s.start_run(run_row(rid), started(rid))
                for seq in range(1, events_per_run):
                    s.append(transition(seq, rid))
        finally:
            s.close()

    names = [f"t{i}" for i in range(4)]
    _in_threads(writer, names)
    assert len(store.run_ids()) == len(names) * per_thread
    for rid in store.run_ids():
        assert [e.seq for e in store.events(rid)] == list(range(events_per_run))
        assert verify_run(store, rid).ok


def test_processes_writing_one_journal_lose_nothing(
    tmp_path: Path, backend: Backend, store: Store
) -> None:
    """Real runs from several processes at once (tests/child_writer.py), none duplicated."""
    writers, runs = 3, 3
    go, records = tmp_path / "go", tmp_path / "records"
    records.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def writer(w: int) -> subprocess.Popen[str]:
        ready = tmp_path / f"ready-{w}"
        args = ["--db", backend.location, "--records", str(records), "--worker", str(w),
                "--runs", str(runs), "--ready", str(ready), "--go", str(go)]  # fmt: skip
        return subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "child_writer.py"), *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    children = [writer(w) for w in range(writers)]
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready-{w}").exists() for w in range(writers)):
            assert all(c.poll() is None for c in children), "a writer died while starting"
            assert time.monotonic() < deadline, "the writers never got ready"
            time.sleep(0.01)
        go.touch()
        outputs = [c.communicate(timeout=120) for c in children]
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
    assert [c.returncode for c in children] == [0] * writers, [err for _, err in outputs]
    reported = [json.loads(line) for out, _ in outputs for line in out.splitlines()]
    expected = {writer_run_id(w, n): expected_halt(n).value for w in range(writers)
                for n in range(runs)}  # fmt: skip
    assert {r["run_id"]: r["halt"] for r in reported} == expected
    assert sorted(store.run_ids()) == sorted(expected)
    for rid, halt in expected.items():
        events = store.events(rid)
        assert [e.seq for e in events] == list(range(len(events)))
        assert store.get_run(rid).halt_reason == halt
        assert verify_run(store, rid).ok


# --- the CLI on either backend -----------------------------------------------------------------


def test_the_cli_reads_and_verifies_either_journal(
    tmp_path: Path, store: Store, backend: Backend
) -> None:
    record = lab_run(tmp_path, [LOOKUP, ANSWER], store=store)
    runner = CliRunner()
    listed = runner.invoke(cli, ["runs", "--db", backend.location, "--json"])
    assert listed.exit_code == 0, listed.output
    assert [r["run_id"] for r in json.loads(listed.output)] == [record.run_id]
    verified = runner.invoke(cli, ["verify", "--all", "--db", backend.location])
    assert verified.exit_code == 0, verified.output
    replayed = runner.invoke(cli, ["replay", record.run_id, "--db", backend.location])
    assert replayed.exit_code == 0, replayed.output
    stats = runner.invoke(cli, ["stats", "--db", backend.location, "--json"])
    assert stats.exit_code == 0, stats.output


# --- PostgreSQL only ---------------------------------------------------------------------------


def test_open_store_picks_the_backend_by_location(tmp_path: Path) -> None:
    assert [is_dsn(x) for x in ("postgresql://h/db", "POSTGRES://h/db", "fsm-agent.db")] == [
        True,
        True,
        False,
    ]
    assert not is_dsn(tmp_path / "postgresql:")
    # libpq's keyword form is a DSN too (never a file named "host=db dbname=j").
    assert [is_dsn(x) for x in ("host=db dbname=j", " DBNAME = j", "hostile.db", "a=b.db")] == [
        True,
        True,
        False,
        False,
    ]
    s = open_store(tmp_path / "j.db")
    try:
        assert type(s).__name__ == "SqliteStore"
    finally:
        s.close()


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://u:s3cret@db.example:5433/j?sslmode=require",
         "postgresql://u@db.example:5433/j?sslmode=require"),
        ("postgres://u:s3cret@h1:1,h2:2/j?password=s3cret&sslpassword=s3cret&application_name=x",
         "postgres://u@h1:1,h2:2/j?application_name=x"),
        ("postgresql://h/j", "postgresql://h/j"),
        ("host=h password='s3cret x' dbname=j", "host=h dbname=j"),
    ],
)  # fmt: skip
def test_a_dsn_is_shown_without_its_password(dsn: str, shown: str) -> None:
    assert redact_dsn(dsn) == shown


def test_sqlite_and_the_library_never_import_psycopg(tmp_path: Path) -> None:
    code = (
        "import sys, fsm_agent, fsm_agent.cli.main, stores\n"
        "from stores import open_store\n"
        f"open_store({str(tmp_path / 'j.db')!r}).close()\n"
        "print([m for m in sys.modules if m.split('.')[0] in ('psycopg', 'stores')])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert "psycopg" not in out
    assert "fsm_agent.stores.postgres" not in out


def test_an_unreachable_server_is_a_journal_error_without_the_password() -> None:
    pytest.importorskip("psycopg")
    dsn = "postgresql://fsm:s3cret@127.0.0.1:9/journal?connect_timeout=2"
    with pytest.raises(JournalError) as info:
        open_store(dsn)
    message = str(info.value)
    assert "s3cret" not in message
    assert info.value.path == "postgresql://fsm@127.0.0.1:9/journal?connect_timeout=2"
    assert info.value.path in message
    assert "cannot connect" in message
    result = CliRunner().invoke(cli, ["runs", "--db", dsn])
    assert result.exit_code == 70
    assert result.output.startswith("Error: journal postgresql://fsm@127.0.0.1:9/journal")
    assert "s3cret" not in result.output
    assert "Traceback" not in result.output


def test_a_keyword_dsn_opens_the_same_journal(pg_location: str) -> None:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    keywords = make_conninfo(**conninfo_to_dict(pg_location))  # host=… port=… dbname=… options=…
    assert not keywords.startswith("postgres")
    assert is_dsn(keywords)
    by_url = open_store(pg_location)
    try:
        by_url.start_run(run_row(), started())
    finally:
        by_url.close()
    by_keywords = open_store(keywords)
    try:
        assert type(by_keywords).__name__ == "PostgresStore"
        assert [r.run_id for r in by_keywords.list_runs()] == ["run-1"]
    finally:
        by_keywords.close()


def test_postgres_refuses_truncate_and_keeps_the_schema(pg_location: str) -> None:
    from fsm_agent.stores.postgres_schema import MIGRATIONS

    backend = PostgresBackend(pg_location)
    s = backend.open()
    try:
        s.start_run(run_row(), started())
        with pytest.raises(backend.integrity_error, match="append-only"):
            backend.sql("TRUNCATE events CASCADE")
        assert backend.migrations() == [m.name for m in MIGRATIONS]
        assert s.events("run-1") == [started()]
        # no trigger moves the runs row: a live run's head is its newest event
        assert backend.sql("SELECT head_seq FROM runs") == [(None,)]
        assert s.chain("run-1")[2] == s.chain("run-1")[1][-1].hash
        assert type(s).__name__ == "PostgresStore"
        assert s.location == pg_location
    finally:
        s.close()


def test_postgres_store_survives_a_dropped_connection(pg_location: str) -> None:
    backend = PostgresBackend(pg_location)
    s = backend.open()
    try:
        s.start_run(run_row(), started())
        pid = s.conn.info.backend_pid  # type: ignore[attr-defined]
        backend.sql("SELECT pg_terminate_backend(?)", (pid,))  # the server drops it
        with pytest.raises(JournalError) as info:  # the call in flight fails, named ...
            s.append(transition(1))
        assert info.value.path == pg_location
        s.append(transition(1))  # ... and the next one reconnects
        assert [e.seq for e in s.events("run-1")] == [0, 1]
        assert verify_run(s, "run-1").ok
    finally:
        s.close()


# --- opened only to read; another application's tables -----------------------------------------


def test_a_store_opened_to_read_creates_nothing_and_writes_nothing(backend: Backend) -> None:
    with pytest.raises(NotAJournal, match=r"no .*journal"):
        open_store(backend.location, read_only=True)  # nothing there yet: nothing is made
    writer = backend.open()
    try:
        writer.start_run(run_row(), started())
    finally:
        writer.close()
    reader = open_store(backend.location, read_only=True)
    try:
        assert reader.read_only
        assert reader.events("run-1") == [started()]
        assert verify_run(reader, "run-1").ok
        with pytest.raises(JournalError):
            reader.append(transition(1))
        with pytest.raises(JournalError):
            reader.add_control(
                Control(
                    id=0,
                    run_id=None,
                    kind="freeze_routing",
                    payload={},
                    who="w",
                    why="y",
                    at="2026-01-01T00:00:00+00:00",
                )
            )
    finally:
        reader.close()
    again = backend.open()
    try:
        assert [e.seq for e in again.events("run-1")] == [0]
    finally:
        again.close()


#: The migrations that only add indexes: a reader reads a journal without them.
INDEX_ONLY = sqlite_schema.INDEX_ONLY | {m.name for m in postgres_schema.MIGRATIONS
                                         if m.index_only}  # fmt: skip


def test_a_read_never_migrates_an_older_journal(backend: Backend) -> None:
    backend.open().close()
    table = "fsm_agent_migrations" if backend.name == "postgres" else "_sqlite_migrations"
    needed = [n for n in backend.migrations() if n not in INDEX_ONLY]
    backend.sql(f"DELETE FROM {table} WHERE name = ?", (needed[-1],))  # noqa: S608
    before = backend.migrations()
    with pytest.raises(JournalError, match="fsm-agent migrate"):
        open_store(backend.location, read_only=True)
    assert backend.migrations() == before


def test_a_read_reads_a_journal_without_its_index_only_migrations(backend: Backend) -> None:
    backend.open().close()
    table = "fsm_agent_migrations" if backend.name == "postgres" else "_sqlite_migrations"
    skipped = [n for n in backend.migrations() if n in INDEX_ONLY]
    assert skipped
    for name in skipped:
        backend.sql(f"DELETE FROM {table} WHERE name = ?", (name,))  # noqa: S608
    before = backend.migrations()
    reader = open_store(backend.location, read_only=True)
    try:
        assert reader.list_runs(None) == []
    finally:
        reader.close()
    assert backend.migrations() == before


def test_another_applications_tables_are_refused_untouched(backend: Backend) -> None:
    backend.sql("CREATE TABLE runs (id INTEGER PRIMARY KEY, what TEXT)")
    backend.sql("INSERT INTO runs (id, what) VALUES (1, 'a 5k')")
    for read_only in (False, True):
        with pytest.raises(NotAJournal):
            open_store(backend.location, read_only=read_only)
    assert backend.sql("SELECT id, what FROM runs") == [(1, "a 5k")]


def test_one_event_or_a_range_of_them_reads_as_the_whole_run_does(
    store: Store, tmp_path: Path
) -> None:
    """`event_at` and `events_between` (the console's step view and live log) read only the
    rows asked for and the run's first, which a real run's later rows are written against:
    every event reads back equal to the one in the whole run."""
    from tests.lab import LOOKUP, MISS, lab_run

    record = lab_run(tmp_path, [MISS, LOOKUP, {"final_answer": "found it"}], store=store)
    run_id = record.run_id
    events = store.events(run_id)
    assert len(events) > 5
    for ev in events:
        assert store.event_at(run_id, ev.seq) == ev
    assert store.event_at(run_id, len(events)) is None
    assert store.event_at(run_id, -1) is None
    last = len(events) - 1
    for first, upto in [(0, 0), (1, 3), (2, last + 5), (last, last), (5, 2), (last + 1, last + 9)]:
        wanted = [e for e in events if first <= e.seq <= upto]
        assert store.events_between(run_id, first, upto) == wanted, (first, upto)
    with pytest.raises(RunNotFound):
        store.event_at("nope", 0)
    with pytest.raises(RunNotFound):
        store.events_between("nope", 0, 3)
