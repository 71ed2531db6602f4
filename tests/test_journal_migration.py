"""A journal written before chain version 3 opens, verifies, replays and goes on after the
migration, nothing journaled rewritten.

`recorded_m006/journal.db` was written by fsm-agent as of migration m006 (chain version 2,
the `events_head` trigger, each run row carrying its declaration): a completed lab run; the
same run killed after its halt (status `running`, its record never written); and a run cut
off after three events (`a0a0a0a0a0a0`, still `running`).
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner

from fsm_agent.cli.main import cli
from fsm_agent.declaration.load import load_machine
from fsm_agent.errors import JournalError
from fsm_agent.journal.chain import verify_run
from fsm_agent.journal.chain_hash import UNKEYED, UNKEYED_4
from fsm_agent.journal.runfile import RUN_FILE_FORMAT_3, export_run, import_run
from fsm_agent.review.replay import replay_events
from fsm_agent.stores.sqlite import SqliteStore
from tests.lab import LOOKUP, lab_run

RECORDED = Path(__file__).parent / "recorded_m006" / "journal.db"
DONE, KILLED, CUT = "b3a77cefac7c", "b6b664a12f82", "a0a0a0a0a0a0"


@pytest.fixture
def old(tmp_path: Path) -> Path:
    copy = tmp_path / "old.db"
    shutil.copyfile(RECORDED, copy)
    return copy


def raw(db: Path, table: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()  # noqa: S608
    finally:
        conn.close()


def test_a_command_that_only_reads_asks_for_the_migration_as_before(old: Path) -> None:
    with pytest.raises(JournalError, match="needs migration 'm007_chain_v3_and_declarations'"):
        SqliteStore(old, read_only=True)
    result = CliRunner().invoke(cli, ["migrate", "--db", str(old)])
    assert result.exit_code == 0, result.output
    store = SqliteStore(old, read_only=True)
    try:
        assert verify_run(store, DONE).ok
    finally:
        store.close()


def test_the_old_runs_verify_and_replay_unchanged_after_the_migration(old: Path) -> None:
    events_before, runs_before = raw(old, "events"), raw(old, "runs")
    store = SqliteStore(old)  # migrates
    try:
        for run_id in (DONE, KILLED, CUT):
            report = verify_run(store, run_id)
            assert (report.ok, report.version) == (True, 2), report.findings
        run = store.get_run(DONE)
        assert (run.chain, len(run.machine_text) > 1000) == (UNKEYED, True)
        assert replay_events(run, store.events(DONE)).ok
        _, links, head = store.chain(DONE)
        assert head == links[-1].hash
        assert all(x.prev_hash for x in links)
    finally:
        store.close()
    # every journaled row is as it was; the new column is empty on them
    assert [r[:-1] for r in raw(old, "events")] == events_before
    assert all(r[-1] is None for r in raw(old, "events"))
    assert raw(old, "runs") == runs_before


def test_a_cut_off_run_goes_on_in_its_own_chain_version(old: Path, tmp_path: Path) -> None:
    store = SqliteStore(old)
    try:
        done = store.events(DONE)
        rest = [attrs.evolve(e, run_id=CUT) for e in done[3:]]
        store.append(rest[0])
        store.append_many(rest[1:])  # the last two in one transaction
        record = store.get_run(DONE).record
        assert record is not None
        head = store.chain(CUT)[2]
        store.finish_run(attrs.evolve(record, run_id=CUT, journal_head=head))
        report = verify_run(store, CUT)
        assert (report.ok, report.version, report.record) == (True, 2, "sealed")
        run, links, _ = store.chain(CUT)
        assert run.chain == UNKEYED
        assert [x.seq for x in links] == [0, 1, 2, 3, 4]
        assert all(x.prev_hash == y.hash for x, y in zip(links[1:], links, strict=False))
        # exported and imported, it verifies in the new journal too
        other = SqliteStore(tmp_path / "other.db")
        try:
            exported = export_run(store, CUT)
            assert exported.format == RUN_FILE_FORMAT_3  # readable where chain v3 is not known
            import_run(other, exported)
            assert verify_run(other, CUT).ok
        finally:
            other.close()
    finally:
        store.close()


def test_a_run_killed_after_its_halt_resumes_to_a_sealed_record(old: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        ["resume", KILLED, "--model", "python:tests.fixture_resume:oracle", "--tools",
         "tests.fixture_resume", "--db", str(old), "--record", str(tmp_path / "r.json")],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    store = SqliteStore(old)
    try:
        report = verify_run(store, KILLED)
        assert (report.ok, report.record) == (True, "sealed"), report.findings
    finally:
        store.close()


def test_a_new_run_in_a_migrated_journal_is_chain_version_4(old: Path, tmp_path: Path) -> None:
    record = lab_run(tmp_path, [LOOKUP, {"answer": "swordfish"}], store=old)
    store = SqliteStore(old)
    try:
        run = store.get_run(record.run_id)
        assert run.chain == UNKEYED_4
        # read back from the declarations table (the row's own column is empty, below)
        assert run.machine_text == load_machine("agent_loop").text
        report = verify_run(store, record.run_id)
        assert (report.ok, report.version) == (True, 4)
    finally:
        store.close()
    conn = sqlite3.connect(old)
    try:
        stored = conn.execute(
            "SELECT machine_text FROM runs WHERE run_id = ?", (record.run_id,)
        ).fetchone()
        declared = conn.execute("SELECT count(*) FROM declarations").fetchone()
        hashes = conn.execute(
            "SELECT count(*) FROM events WHERE run_id = ? AND prev_hash IS NULL"
            " AND hash IS NULL AND length(digest) = 32",
            (record.run_id,),
        ).fetchone()
    finally:
        conn.close()
    assert (stored, declared, hashes) == (("",), (1,), (5,))


def test_a_digest_edited_into_text_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    record = lab_run(tmp_path, [LOOKUP, {"answer": "swordfish"}])
    db = tmp_path / "j.db"
    conn = sqlite3.connect(db)
    conn.execute("DROP TRIGGER events_no_update")
    conn.execute("UPDATE events SET digest = 'abc' WHERE seq = 2")
    conn.commit()
    conn.close()
    store = SqliteStore(db)
    try:
        found = [(f.kind, f.seq) for f in verify_run(store, record.run_id).findings]
    finally:
        store.close()
    assert found[0] == ("edited", 2)


def test_the_migration_adds_the_run_list_indexes_and_pages_by_key(old: Path) -> None:
    store = SqliteStore(old)  # migrates
    try:
        indexes = {
            r[1] for r in store.conn.execute("SELECT type, name FROM sqlite_master").fetchall()
            if r[0] == "index"
        }  # fmt: skip
        assert {"runs_newest", "runs_machine", "runs_halt_reason", "runs_status"} <= indexes
        assert "runs_started_at" not in indexes
        everything = store.list_runs(None)
        first = store.list_runs(1)
        after = (first[0].started_at, first[0].run_id)
        assert [r.run_id for r in store.list_runs(None, before=after)] == [
            r.run_id for r in everything[1:]
        ]
        plan = store.conn.execute(
            "EXPLAIN QUERY PLAN SELECT run_id FROM runs AS r WHERE r.machine = 'x'"
            " AND (r.started_at, r.run_id) < ('a', 'b')"
            " ORDER BY r.started_at DESC, r.run_id DESC LIMIT 50"
        ).fetchall()
        assert "runs_machine" in str(plan)
        assert "TEMP B-TREE" not in str(plan)
    finally:
        store.close()


def test_a_reader_reads_a_journal_without_its_index_only_migration(tmp_path: Path) -> None:
    """A journal written before the run-list indexes (m008, indexes only) is read as it is
    by a command that only reads; the next writer adds them."""
    copy = tmp_path / "m007.db"
    shutil.copyfile(Path(__file__).parent / "recorded_pre_usage" / "journal.db", copy)
    reader = SqliteStore(copy, read_only=True)
    try:
        listed = reader.list_runs(None)
        assert listed
        first = (listed[0].started_at, listed[0].run_id)
        assert reader.list_runs(None, before=first) == listed[1:]
    finally:
        reader.close()
    assert "m008_run_list_indexes" not in applied(copy)  # the reader wrote nothing
    SqliteStore(copy).close()
    assert "m008_run_list_indexes" in applied(copy)


def applied(db: Path) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        return [r[0] for r in conn.execute("SELECT name FROM _sqlite_migrations")]
    finally:
        conn.close()
