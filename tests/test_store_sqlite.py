"""What only the SQLite journal does: WAL, a plain file that `sqlite3` and sqlite-utils read,
and failures that name the file. Everything every backend must do (values that come back
equal, append-only events keyed by (run_id, seq), failures that name the run and the
sequence, the queue, concurrency) is in tests/test_store_contract.py, run here too."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from fsm_agent.errors import JournalError
from fsm_agent.stores.sqlite import SqliteStore
from tests.test_store_contract import halt_record, run_row, started, transition


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


# --- failures ---------------------------------------------------------------------------------


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


def test_migrations_of_another_set_are_not_ours_to_judge(db_path: Path) -> None:
    SqliteStore(db_path).close()
    conn = raw(db_path)
    conn.execute(
        "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) VALUES (?, ?, ?)",
        ("someone_else", "m999_theirs", "2099-01-01 00:00:00+00:00"),
    )
    conn.close()
    SqliteStore(db_path).close()


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
