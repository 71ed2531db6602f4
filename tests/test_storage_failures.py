"""The journal's storage failing under a reader or a run: a damaged file, a journal from a
newer fsm-agent, a journal this process may not write, a full disk and a failing write.

Each gives one clear error that names the file (never a traceback). A failing write ends
the run: the halt record file is still written with a named reason, `run` raises
`JournalError`, and everything committed before the failure is intact, byte for byte.

The read-only cases need a real permission denial. These tests run as root, which chmod
does not stop, so the commands run in a child process that drops to `nobody` (uid 65534).
It drops after its imports: the interpreter lives under /root, which `nobody` may not
enter, so `preexec_fn` cannot drop before the interpreter starts. Not root, the test
instead takes write permission away from the journal and its directory.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils
from click.testing import CliRunner, Result

from fsm_agent import HaltReason, ScriptedModel, load_tools, read_record, run
from fsm_agent.cli.main import cli
from fsm_agent.errors import JournalError
from fsm_agent.journal.chain import verify_run
from fsm_agent.journal.store import Event
from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.stores.sqlite_schema import migrations
from tests.lab import LOOKUP, MISS

ROOT = Path(__file__).parent.parent
NOBODY = 65534
PAGE = 4096
COMPLETES = [LOOKUP, {"answer": "swordfish"}]  # 5 events: start, 3 transitions, the halt
LOOPS = [MISS] * 8  # max_steps after 8 model calls: start, 8 x 3 transitions, the halt


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def lab(store: SqliteStore | Path, record: Path, replies: list[Any], **options: Any) -> Any:
    """One halt-lab run into `store`."""
    options.setdefault("task", "Find the lab password")
    return run(
        "agent_loop",
        model=ScriptedModel(list(replies)),
        tools=load_tools("fsm_agent.examples.halt_lab.tools"),
        allow=("lookup", "slow_lookup", "hang"),
        store=store,
        record_path=record,
        handle_signals=False,
        **options,
    )


def journal_with_runs(path: Path, runs: int, record: Path) -> list[str]:
    """A real journal at `path` with `runs` completed runs, checkpointed and closed (no
    -wal or -shm file left); returns the run ids."""
    store = SqliteStore(path)
    try:
        ids = [f"run{n:02d}" for n in range(runs)]
        for rid in ids:
            lab(store, record, COMPLETES, run_id=rid, task=f"task {rid}")
    finally:
        store.close()
    assert not Path(f"{path}-wal").exists()
    return ids


def rows(db: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every stored row of `events` and `runs`, exactly as stored (a separate reader)."""
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        events = conn.execute("SELECT * FROM events ORDER BY run_id, seq").fetchall()
        runs = conn.execute("SELECT * FROM runs ORDER BY run_id").fetchall()
    finally:
        conn.close()
    return events, runs


def read_everything(db: Path) -> None:
    """Open the journal and read every run, event and chain in it."""
    store = SqliteStore(db)
    try:
        for rid in store.run_ids():
            store.events(rid)
            verify_run(store, rid)
        store.run_summaries()
    finally:
        store.close()


def assert_clear_error(result: Result | subprocess.CompletedProcess[str], db: Path) -> str:
    """Exit 70 and one `Error: journal DB…` line, no traceback; returns the line."""
    if isinstance(result, Result):
        code, output = result.exit_code, result.output
    else:
        code, output = result.returncode, result.stdout + result.stderr
    assert code == 70, output
    assert "Traceback" not in output
    line = output.strip()
    assert line.startswith(f"Error: journal {db}"), output
    assert "\n" not in line, output
    return line


# --- a damaged file ---------------------------------------------------------------------------


def test_random_bytes_are_refused_naming_the_file(tmp_path: Path) -> None:
    db = tmp_path / "noise.db"
    noise = random.Random(1).randbytes(16 * PAGE)  # noqa: S311 - test data
    db.write_bytes(noise)
    with pytest.raises(JournalError) as info:
        SqliteStore(db)
    assert info.value.path == str(db)
    assert str(info.value).startswith(f"journal {db}: cannot open as a journal")
    assert "damaged or is not an fsm-agent journal (file is not a database)" in str(info.value)
    for command in (["runs"], ["show", "run00"], ["stats"], ["verify", "--all"]):
        assert "damaged" in assert_clear_error(invoke(*command, "--db", str(db)), db)
    script = tmp_path / "script.json"
    script.write_text(json.dumps(COMPLETES), encoding="utf-8")
    ran = invoke(
        "run", "agent_loop", "--task", "t", "--model", f"scripted:{script}", "--tools",
        "fsm_agent.examples.halt_lab.tools",
        "--allow", "lookup,slow_lookup,hang",
        "--db", str(db), "--record", str(tmp_path / "r.json"),
    )  # fmt: skip
    assert "damaged" in assert_clear_error(ran, db)
    assert db.read_bytes() == noise  # nothing was written into it


def _overwrite_middle(data: bytearray) -> None:
    pages = len(data) // PAGE
    rng = random.Random(7)  # noqa: S311 - test data
    for page in range(pages // 3, 2 * pages // 3):
        data[page * PAGE : (page + 1) * PAGE] = rng.randbytes(PAGE)


@pytest.mark.parametrize("damage", ["middle pages overwritten", "truncated to half"])
def test_a_damaged_journal_is_refused_naming_the_file(tmp_path: Path, damage: str) -> None:
    db = tmp_path / "journal.db"
    journal_with_runs(db, 12, tmp_path / "made.json")
    data = bytearray(db.read_bytes())
    if damage == "truncated to half":
        del data[len(data) // PAGE // 2 * PAGE :]
    else:
        _overwrite_middle(data)
    db.write_bytes(bytes(data))
    with pytest.raises(JournalError) as info:
        read_everything(db)
    assert info.value.path == str(db)
    assert str(db) in str(info.value)
    assert "the file is damaged" in str(info.value)
    for command in (["runs"], ["show", "run05"], ["stats"], ["verify", "--all"]):
        line = assert_clear_error(invoke(*command, "--db", str(db)), db)
        assert "the file is damaged" in line
        assert len(line) < 400  # SQLite's message, capped: no page of garbage on the screen


# --- a newer schema ---------------------------------------------------------------------------


def test_a_journal_from_a_newer_fsm_agent_is_refused_naming_the_file(tmp_path: Path) -> None:
    db = tmp_path / "journal.db"
    journal_with_runs(db, 1, tmp_path / "made.json")
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) VALUES (?, ?, ?)",
            ("fsm_agent", "m999_from_the_future", "2099-01-01 00:00:00+00:00"),
        )
    conn.close()
    before = rows(db)
    for command in (["runs"], ["show", "run00"], ["stats"], ["verify", "run00"]):
        line = assert_clear_error(invoke(*command, "--db", str(db)), db)
        assert "written by a newer fsm-agent (migration 'm999_from_the_future')" in line
    with pytest.raises(JournalError, match="written by a newer fsm-agent") as info:
        lab(db, tmp_path / "r.json", COMPLETES)
    assert info.value.path == str(db)
    assert rows(db) == before


# --- a journal this process may not write -----------------------------------------------------

#: The child: import everything the commands need, drop to `nobody` (when root), then run
#: each command line given as JSON, ending its output on both streams with a separator
#: (stdout also gets the exit code). One process for several commands: start-up is slow.
_AS_NOBODY = f"""
import importlib.metadata, importlib.readers, importlib.resources, json, os, sys
import fsm_agent.examples.halt_lab.tools, fsm_agent.journal.chain, fsm_agent.cli.main
import fsm_agent.runtime.resume
import fsm_agent.declaration.spec, fsm_agent.review.stats, fsm_agent.stores.sqlite
fsm_agent.declaration.load.load_machine("agent_loop")
import fsm_agent.cli.group
fsm_agent.cli.group.all_commands()  # each command's module, imported while it can be read
if os.geteuid() == 0:
    os.setgroups([])
    os.setgid({NOBODY})
    os.setuid({NOBODY})
for args in json.loads(sys.argv[1]):
    code = 0
    try:
        fsm_agent.cli.main.cli.main(args=args, prog_name="fsm-agent")
    except SystemExit as exc:
        code = exc.code or 0
    print(f"\\x1e{{code}}", flush=True)
    print("\\x1e", file=sys.stderr, flush=True)
"""


def as_nobody(*commands: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Each `fsm-agent COMMAND` run by a process that may not write the journal."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    child = subprocess.run(
        [sys.executable, "-c", _AS_NOBODY, json.dumps(commands)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert child.returncode == 0, child.stderr
    outs = re.split(r"\x1e(\d+)\n", child.stdout)
    errs = child.stderr.split("\x1e\n")
    assert len(outs) == 2 * len(commands) + 1, child.stdout
    return [
        subprocess.CompletedProcess(args, int(code), out, err)
        for args, out, code, err in zip(commands, outs[0::2], outs[1::2], errs, strict=False)
    ]


class Shared:
    """A world-readable directory under /tmp holding a journal directory that the child
    may read but not write, and a records directory it may write."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.journal_dir = base / "journal"
        self.records = base / "records"
        self.db = self.journal_dir / "journal.db"
        self.made = base / "made.json"  # the records of the runs that make the journal
        self.journal_dir.mkdir(mode=0o755)
        self.records.mkdir()
        self.records.chmod(0o777)

    def lock(self) -> None:
        """Take write permission away from the journal (as root, `nobody` never had it)."""
        self.db.chmod(0o644)
        if os.geteuid() != 0:
            self.db.chmod(0o444)
            self.journal_dir.chmod(0o555)

    def script(self, replies: list[Any]) -> str:
        path = self.records / "script.json"
        path.write_text(json.dumps(replies), encoding="utf-8")
        path.chmod(0o644)
        return f"scripted:{path}"


@pytest.fixture
def shared() -> Iterator[Shared]:
    base = Path(tempfile.mkdtemp(prefix="fsm-agent-ro-"))  # not under pytest's 0700 base
    base.chmod(0o755)
    try:
        yield Shared(base)
    finally:
        for path in (base, *base.rglob("*")):
            if path.is_dir():
                path.chmod(stat.S_IRWXU)
        shutil.rmtree(base)


def test_read_commands_work_on_a_journal_this_process_may_not_write(shared: Shared) -> None:
    # No -wal or -shm file, and a directory the reader may not create them in: SQLite
    # refuses a plain read of a WAL journal (SQLITE_READONLY_DIRECTORY); the store reads
    # the file as immutable instead, since the last writer checkpointed everything into it.
    ids = journal_with_runs(shared.db, 3, shared.made)
    shared.lock()
    before = shared.db.read_bytes()
    db = str(shared.db)
    commands = [["runs"], ["show", ids[1]], ["verify", "--all"], ["stats"]]
    results = as_nobody(*[[*command, "--db", db] for command in commands])
    for command, result in zip(commands, results, strict=True):
        assert result.returncode == 0, result.stderr
        assert result.stdout == invoke(*command, "--db", db).output
    assert "3 of 3 runs verify" in results[2].stdout
    assert sorted(p.name for p in shared.journal_dir.iterdir()) == ["journal.db"]
    assert shared.db.read_bytes() == before


def test_readers_see_a_live_writers_uncheckpointed_commits(shared: Shared) -> None:
    # A writer holds the journal open: its -wal and -shm files exist, and the newest run
    # is only in the -wal. A reader that may not write goes through them, and sees it.
    journal_with_runs(shared.db, 1, shared.made)
    writer = SqliteStore(shared.db)
    try:
        lab(writer, shared.base / "w.json", COMPLETES, run_id="live-run")
        shared.lock()
        Path(f"{shared.db}-shm").chmod(0o644)
        Path(f"{shared.db}-wal").chmod(0o644)
        db = str(shared.db)
        shown, verified = as_nobody(
            ["show", "live-run", "--db", db], ["verify", "--all", "--db", db]
        )
        assert shown.returncode == 0, shown.stderr
        assert "halted: completed (done)" in shown.stdout
        assert verified.returncode == 0, verified.stderr
        assert "2 of 2 runs verify" in verified.stdout
    finally:
        writer.close()


def test_a_write_ahead_log_that_cannot_be_read_is_named(shared: Shared) -> None:
    # A -wal file without its -shm (a writer's leftovers), in a directory the reader may
    # not write: SQLite can read neither, and the file alone may lack what the log holds.
    writer = SqliteStore(shared.db)
    try:
        lab(writer, shared.made, COMPLETES)
        log = Path(f"{shared.db}-wal").read_bytes()
    finally:
        writer.close()
    Path(f"{shared.db}-wal").write_bytes(log)
    shared.lock()
    Path(f"{shared.db}-wal").chmod(0o444)
    (result,) = as_nobody(["runs", "--db", str(shared.db)])
    line = assert_clear_error(result, shared.db)
    assert f"read-only for this process and its write-ahead log {shared.db}-wal" in line


def test_a_journal_that_needs_an_upgrade_says_so_when_read_only(shared: Shared) -> None:
    conn = sqlite3.connect(shared.db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    migrations().apply(sqlite_utils.Database(conn), stop_before="m003_hash_chain")
    conn.close()
    shared.lock()
    (result,) = as_nobody(["runs", "--db", str(shared.db)])
    line = assert_clear_error(result, shared.db)
    assert "written by an older fsm-agent: it needs migration 'm003_hash_chain'" in line
    assert "read-only for this process" in line


@pytest.mark.parametrize("record_writable", [True, False], ids=["record", "no-record"])
def test_a_run_on_a_journal_this_process_may_not_write_fails_naming_it(
    shared: Shared, record_writable: bool
) -> None:
    journal_with_runs(shared.db, 1, shared.made)
    shared.lock()
    before = shared.db.read_bytes()
    record = (shared.records if record_writable else shared.journal_dir) / "record.json"
    (result,) = as_nobody([
        "run", "agent_loop", "--task", "Find the lab password", "--model",
        shared.script(COMPLETES), "--tools", "fsm_agent.examples.halt_lab.tools",
        "--allow", "lookup,slow_lookup,hang",
        "--db",
        str(shared.db), "--record", str(record), "--quiet",
    ])  # fmt: skip
    if not record_writable:  # found before anything runs: invalid input, nothing written
        assert result.returncode == 2, result.stdout + result.stderr
        assert "Invalid value for '--record'" in result.stderr
        assert f"cannot write in {shared.journal_dir} (Permission denied)" in result.stderr
        assert shared.db.read_bytes() == before
        assert sorted(p.name for p in shared.journal_dir.iterdir()) == ["journal.db"]
        return
    line = assert_clear_error(result, shared.db)
    assert "write failed: the journal is read-only for this process" in line
    assert shared.db.read_bytes() == before
    assert sorted(p.name for p in shared.journal_dir.iterdir()) == ["journal.db"]
    written = read_record(record)
    assert written.halt_reason is HaltReason.JOURNAL_FAILED
    assert written.error is not None
    assert "journal write failed" in written.error
    assert "read-only" in written.error
    assert "nothing of this run reached the journal" in written.error
    assert written.journal_head is None


# --- a full disk, a failing write ---------------------------------------------------------------


class Watch:
    """An `on_transition` callback: keeps the stored rows after each commit, and makes the
    store's connection full (`PRAGMA max_page_count`) at the chosen transition."""

    def __init__(self, store: SqliteStore, db: Path, *, fill_at: int | None = None) -> None:
        self.store, self.db, self.fill_at = store, db, fill_at
        self.seen: list[tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]] = []

    def __call__(self, event: Event) -> None:
        self.seen.append(rows(self.db))
        halting = self.fill_at == -1 and event.halt is not None
        if event.seq == self.fill_at or halting:
            (pages,) = self.store.conn.execute("PRAGMA page_count").fetchone()
            self.store.conn.execute(f"PRAGMA max_page_count = {pages}")


def assert_committed_intact(db: Path, run_id: str, watch: Watch, record_path: Path) -> int:
    """After the failure: what was committed decodes, chains and was not rewritten; the
    record file anchors the same head. Returns the number of events kept."""
    events_after, runs_after = rows(db)
    for events_before, runs_before in watch.seen:
        assert set(events_before) <= set(events_after)  # every committed row, byte for byte
        for before in runs_before:
            after = next(r for r in runs_after if r[0] == before[0])
            assert after[:11] == before[:11]  # run_id … started_at: never rewritten
    store = SqliteStore(db)
    try:
        events = store.events(run_id)
        assert [e.seq for e in events] == list(range(len(events)))
        report = verify_run(store, run_id)
        assert report.ok, report.findings
        assert report.events == len(events)
        assert read_record(record_path).journal_head == report.head_hash
        assert store.get_run(run_id).status == "running"  # the runs row never got its halt
    finally:
        store.close()
    return len(events)


@pytest.mark.parametrize("fill_at", [0, 3, 10, -1], ids=["at-0", "at-3", "at-10", "at-halt"])
def test_a_full_disk_ends_the_run_with_a_record_and_keeps_what_was_committed(
    tmp_path: Path, fill_at: int
) -> None:
    db, record = tmp_path / "journal.db", tmp_path / "record.json"
    store = SqliteStore(db)
    try:
        lab(store, tmp_path / "other.json", COMPLETES, run_id="earlier")
        earlier = rows(db)
        watch = Watch(store, db, fill_at=fill_at)
        # A long task makes the record (and so the runs row's final UPDATE) span new pages.
        with pytest.raises(JournalError) as info:
            lab(store, record, LOOPS, run_id="full", on_transition=watch, task="x" * 6000)
    finally:
        store.close()
    assert info.value.path == str(db)
    assert str(info.value).startswith(f"journal {db} run full: write failed: the disk is full")
    assert "(database or disk is full)" in str(info.value)
    kept = assert_committed_intact(db, "full", watch, record)
    written = read_record(record)
    assert written.error is not None
    assert "the disk is full" in written.error
    assert f"the journal holds this run up to seq {kept - 1}" in written.error
    # The halt the run reached, if it was journaled; else the journal's failure.
    halted = fill_at == -1
    assert written.halt_reason is (HaltReason.MAX_STEPS if halted else HaltReason.JOURNAL_FAILED)
    assert (kept == 1 + len(LOOPS) * 3 + 1) is halted
    events_after, runs_after = rows(db)
    assert [r for r in events_after if r[0] == "earlier"] == earlier[0]
    assert [r for r in runs_after if r[0] == "earlier"] == earlier[1]


def test_a_completed_run_whose_last_write_fails_keeps_its_halt_and_says_why(
    tmp_path: Path,
) -> None:
    # The halt event is committed; the runs row's final UPDATE (the record) is not.
    db, record = tmp_path / "journal.db", tmp_path / "record.json"
    store = SqliteStore(db)
    watch = Watch(store, db, fill_at=-1)
    try:
        with pytest.raises(JournalError, match="the disk is full") as info:
            lab(store, record, COMPLETES, run_id="done", on_transition=watch, task="x" * 6000)
    finally:
        store.close()
    assert info.value.path == str(db)
    assert assert_committed_intact(db, "done", watch, record) == 5
    written = read_record(record)
    assert written.halt_reason is HaltReason.COMPLETED
    assert written.answer == "swordfish"
    assert written.error is not None  # a success, and still the journal's failure is told
    assert "the disk is full" in written.error
    assert "the journal holds this run up to seq 4" in written.error


class FailingAppendStore(SqliteStore):
    """A real store whose `append` raises `JournalError` at its Nth call (a failing write)."""

    def __init__(self, path: Path, *, fail_at: int) -> None:
        super().__init__(path)
        self.fail_at = fail_at
        self.appends = 0

    def append(self, event: Event) -> str:
        self.appends += 1
        if self.appends == self.fail_at:
            raise JournalError("disk I/O error (injected)", path=self.path, run_id=event.run_id)
        return super().append(event)


@pytest.mark.parametrize("fail_at", [1, 2, 3, 4])
def test_a_failing_append_ends_the_run_with_a_record_and_keeps_what_was_committed(
    tmp_path: Path, fail_at: int
) -> None:
    # The completing run appends 4 events after its start: the 4th is the halt.
    db, record = tmp_path / "journal.db", tmp_path / "record.json"
    store = FailingAppendStore(db, fail_at=fail_at)
    watch = Watch(store, db)
    try:
        with pytest.raises(JournalError, match="disk I/O error") as info:
            lab(store, record, COMPLETES, run_id="failing", on_transition=watch)
    finally:
        store.close()
    assert info.value.path == str(db)
    assert str(db) in str(info.value)
    assert store.appends == fail_at  # the run stopped at the failed write
    assert assert_committed_intact(db, "failing", watch, record) == fail_at
    written = read_record(record)
    assert written.halt_reason is HaltReason.JOURNAL_FAILED
    assert written.error is not None
    assert written.error.startswith(f"journal write failed: journal {db} run failing")
    assert f"the journal holds this run up to seq {fail_at - 1}" in written.error
