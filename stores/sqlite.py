"""The embedded default store: one plain SQLite file, WAL mode, one commit per transition.

Schema and reads go through sqlite-utils (migrations, `rows_where`); the hot path is a bound
INSERT on the same connection, committed per transition. The `events` table is append-only:
triggers refuse UPDATE and DELETE, so nothing journaled is rewritten.
"""

from __future__ import annotations

import gc
import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar

import sqlite_utils
from sqlite_utils.migrations import Migrations

from fsm_agent import serde
from fsm_agent.budgets import Budgets
from fsm_agent.chain import ChainLink, event_columns, genesis, link
from fsm_agent.errors import JournalError, RunNotFound
from fsm_agent.halt import HaltReason
from fsm_agent.journal import (
    Control,
    Event,
    Facts,
    GuardResult,
    RunRow,
    RunStatus,
    RunSummary,
)
from fsm_agent.record import HaltRecord
from fsm_agent.snapshot import Snapshot

Synchronous = Literal["NORMAL", "FULL"]
T = TypeVar("T")
#: Waits of `busy_timeout_ms` for the write lock before a write gives up.
_LOCK_ATTEMPTS = 3
migrations = Migrations("fsm_agent")


@migrations(name="m001_runs_and_events")
def _m001(db: sqlite_utils.Database) -> None:
    db.execute("""
        CREATE TABLE runs (
            run_id TEXT PRIMARY KEY, machine TEXT NOT NULL, machine_sha256 TEXT NOT NULL,
            machine_text TEXT NOT NULL, task TEXT NOT NULL, budgets TEXT NOT NULL,
            state TEXT NOT NULL, status TEXT NOT NULL, halt_reason TEXT,
            steps_used INTEGER NOT NULL DEFAULT 0, started_at TEXT NOT NULL, ended_at TEXT,
            record TEXT, pid INTEGER)""")
    db.execute("CREATE INDEX runs_started_at ON runs (started_at)")
    db.execute("""
        CREATE TABLE events (
            run_id TEXT NOT NULL REFERENCES runs (run_id), seq INTEGER NOT NULL,
            kind TEXT NOT NULL, at_ms INTEGER NOT NULL, wall_time TEXT NOT NULL,
            source TEXT, dest TEXT NOT NULL, trigger TEXT, halt TEXT,
            retry INTEGER NOT NULL DEFAULT 0, guards TEXT NOT NULL, checks TEXT NOT NULL,
            snapshot TEXT NOT NULL, facts TEXT, note TEXT,
            PRIMARY KEY (run_id, seq))""")
    for op in ("UPDATE", "DELETE"):
        db.execute(f"""
            CREATE TRIGGER events_no_{op.lower()} BEFORE {op} ON events
            BEGIN SELECT RAISE(ABORT, 'the journal is append-only'); END""")


@migrations(name="m002_controls")
def _m002(db: sqlite_utils.Database) -> None:
    db.execute("""
        CREATE TABLE controls (
            id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT REFERENCES runs (run_id),
            kind TEXT NOT NULL, payload TEXT NOT NULL, who TEXT NOT NULL, why TEXT NOT NULL,
            at TEXT NOT NULL)""")
    db.execute("CREATE INDEX controls_run ON controls (run_id, id)")
    db.execute("CREATE INDEX controls_global ON controls (id) WHERE run_id IS NULL")


@migrations(name="m003_hash_chain")
def _m003(db: sqlite_utils.Database) -> None:
    """Tamper evidence (see fsm_agent.chain): each event's hash and its predecessor's; each
    run's head, kept by a trigger in the same statement as the INSERT (no second write from
    Python); and the host of the process that owns a live run (with `pid`, for resume)."""
    db.execute("ALTER TABLE events ADD COLUMN prev_hash TEXT")
    db.execute("ALTER TABLE events ADD COLUMN hash TEXT")
    db.execute("ALTER TABLE runs ADD COLUMN head_hash TEXT")
    db.execute("ALTER TABLE runs ADD COLUMN head_seq INTEGER")
    db.execute("ALTER TABLE runs ADD COLUMN host TEXT")
    db.execute("ALTER TABLE events ADD COLUMN control INTEGER")
    db.execute("""
        CREATE TRIGGER events_head AFTER INSERT ON events
        BEGIN
            UPDATE runs SET head_hash = NEW.hash, head_seq = NEW.seq WHERE run_id = NEW.run_id;
        END""")


_INSERT_EVENT = """
    INSERT INTO events (run_id, seq, kind, at_ms, wall_time, source, dest, trigger, halt, retry,
                        guards, checks, snapshot, facts, note, control, prev_hash, hash)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""
_SELECT_CHAIN = """
    SELECT run_id, seq, kind, at_ms, wall_time, source, dest, trigger, halt, retry, guards,
           checks, snapshot, facts, note, control, prev_hash, hash
    FROM events WHERE run_id = ? ORDER BY seq"""
#: The live path's INSERT: only onto the run's current head (see `SqliteStore.append`).
_APPEND_EVENT = """
    INSERT INTO events (run_id, seq, kind, at_ms, wall_time, source, dest, trigger, halt, retry,
                        guards, checks, snapshot, facts, note, control, prev_hash, hash)
    SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?
    WHERE (SELECT head_hash FROM runs WHERE run_id = ?) = ?"""
# A live run's state and steps come from its newest event (one INSERT per transition, no
# second write to `runs`); a halted run's come from its `runs` row.
_SELECT_RUNS = """
    SELECT r.*, e.dest AS live_state,
           CASE WHEN json_valid(e.snapshot)
                THEN json_extract(e.snapshot, '$.meters.steps_used') END AS live_steps
    FROM runs AS r
    LEFT JOIN events AS e
      ON e.run_id = r.run_id
     AND e.seq = (SELECT MAX(seq) FROM events WHERE run_id = r.run_id)"""
_INSERT_RUN = """
    INSERT INTO runs (run_id, machine, machine_sha256, machine_text, task, budgets, state, status,
                      halt_reason, steps_used, started_at, ended_at, record, pid, host)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""
# One narrow row per run for statistics: nothing decoded in Python; the record's cost is
# read by SQLite (a corrupt record reads as no cost rather than failing every statistic).
_SELECT_SUMMARIES = """
    SELECT run_id, machine, status, halt_reason, steps_used,
           json_extract(budgets, '$.max_steps') AS max_steps, started_at, ended_at,
           CASE WHEN json_valid(record) THEN json_extract(record, '$.meters.cost') END AS cost
    FROM runs
    WHERE (:machine IS NULL OR machine = :machine) AND (:since IS NULL OR started_at >= :since)
    ORDER BY machine, started_at, run_id"""


def _json(value: Any) -> str:
    return serde.dumps_compact(value)


_HALT_REASONS = frozenset(r.value for r in HaltReason)


def _summary_problem(status: Any, reason: Any, steps: Any, max_steps: Any, cost: Any) -> str | None:
    """What is wrong with the columns of one run summary, or None."""
    if status not in ("running", "paused", "halted"):
        return f"status {status!r} is not 'running', 'paused' or 'halted'"
    if reason is not None and reason not in _HALT_REASONS:
        return f"halt_reason {reason!r} is not a halt reason"
    if type(steps) is not int:
        return f"steps_used {steps!r} is not an integer"
    if type(max_steps) is not int or max_steps < 1:
        return f"budgets.max_steps {max_steps!r} is not a positive integer"
    if cost is not None and type(cost) not in (int, float):
        return f"record.meters.cost {cost!r} is not a number"
    return None


def _may_not_write(exc: sqlite3.Error, path: str) -> bool:
    """SQLite refused because this process may not write the journal at `path` or create
    its -wal and -shm files (SQLite says "unable to open" when a -wal file exists and no
    -shm file can be created beside it)."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    if name.startswith("SQLITE_READONLY"):
        return True
    writable = os.access(path, os.W_OK) and os.access(Path(path).parent, os.W_OK)
    return name.startswith("SQLITE_CANTOPEN") and Path(path).is_file() and not writable


def _explain(exc: sqlite3.Error, otherwise: str = "") -> str:
    """A SQLite failure in words a person can act on (`otherwise` is added to a failure of
    no kind named here). SQLite's own message is kept, its first line only and capped: a
    damaged page can put kilobytes of garbage into it."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    lines = str(exc).splitlines()
    said = (lines[0] if lines else type(exc).__name__)[:160]
    if name.startswith("SQLITE_READONLY"):
        return (
            f"the journal is read-only for this process ({said}); writing needs write access"
            " to the file and to its directory (for the -wal and -shm files)"
        )
    if name.startswith("SQLITE_FULL"):
        return f"the disk is full or the journal reached its size limit ({said})"
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or any(
        sign in said for sign in ("malformed", "Could not decode")
    ):
        return (
            f"the file is damaged or is not an fsm-agent journal ({said}); restore the"
            " journal from a backup"
        )
    if name.startswith("SQLITE_CANTOPEN"):
        return f"cannot open the file ({said}); check that it and its directory exist"
    if name.startswith("SQLITE_IOERR"):
        return f"the disk failed to read or write ({said})"
    return said + otherwise


def _one_row(cursor: sqlite3.Cursor) -> None:
    """An UPDATE of a run that touched no row: the run is not in this journal."""
    if cursor.rowcount != 1:
        raise sqlite3.IntegrityError("no such run in this journal")


class SqliteStore:
    """A journal in one SQLite file (default `./fsm-agent.db`)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "NORMAL",
        busy_timeout_ms: int = 5000,
    ) -> None:
        self.path = str(path)
        #: True when this process may read the journal but not write it (`_open_read_only`).
        self.read_only = False
        try:
            conn = self._open(synchronous, int(busy_timeout_ms))
        except sqlite3.Error as exc:
            if not (_may_not_write(exc, self.path) and Path(self.path).is_file()):
                raise self._cannot_open(exc) from exc
            conn = self._open_read_only(int(busy_timeout_ms))
        self.conn = conn
        self._heads: dict[str, str] = {}  # run id -> head hash this store last wrote
        self.busy_timeout_ms = int(busy_timeout_ms)

    def _open(self, synchronous: Synchronous, busy_timeout_ms: int) -> sqlite3.Connection:
        """Open the journal for writing (creating it if need be), schema up to date."""
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {'FULL' if synchronous == 'FULL' else 'NORMAL'}")
            self._check_schema(conn, writable=True)
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_read_only(self, busy_timeout_ms: int) -> sqlite3.Connection:
        """Open a journal this process may read but not write (a file or directory owned by
        someone else). Reads work; every write fails with an error that says read-only.

        A WAL journal is read through its -wal and -shm files. When they exist, SQLite reads
        through them read-only. When they do not and cannot be created (a directory this
        process may not write), the last writer checkpointed every commit into the file and
        removed them, so the file alone is the whole journal: SQLite reads it as immutable
        (a snapshot: a writer that starts meanwhile is not seen).
        """
        uri = Path(self.path).resolve().as_uri()
        conn = None
        try:
            conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None,
                                   check_same_thread=False)  # fmt: skip
            conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
            try:
                conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            except sqlite3.Error as exc:
                if not _may_not_write(exc, self.path):
                    raise
                if Path(f"{self.path}-wal").exists():
                    raise JournalError(
                        "the journal is read-only for this process and its write-ahead log"
                        f" {self.path}-wal cannot be read without write access to the"
                        " directory (for the -shm file); read it as a user who may write the"
                        " directory, or read a copy of both files",
                        path=self.path,
                    ) from exc
                conn.close()
                conn = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True,
                                       isolation_level=None, check_same_thread=False)  # fmt: skip
            self._check_schema(conn, writable=False)
        except (sqlite3.Error, JournalError) as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, JournalError):
                raise
            raise self._cannot_open(exc) from exc
        self.read_only = True
        return conn

    def _check_schema(self, conn: sqlite3.Connection, *, writable: bool) -> None:
        """Refuse a journal from a newer fsm-agent; bring an older one up to date."""
        self.db = sqlite_utils.Database(conn)
        known = {m.name for m in migrations._migrations}
        unknown = [m.name for m in migrations.applied(self.db) if m.name not in known]
        if unknown:
            raise JournalError(
                f"written by a newer fsm-agent (migration {unknown[0]!r});"
                " upgrade fsm-agent to read it",
                path=self.path,
            )
        pending = migrations.pending(self.db)
        if pending and not writable:
            raise JournalError(
                f"written by an older fsm-agent: it needs migration {pending[0].name!r}, and"
                " the journal is read-only for this process; open it once with write access",
                path=self.path,
            )
        if pending:
            self._migrate(conn)

    def _cannot_open(self, exc: sqlite3.Error) -> JournalError:
        why = _explain(exc, "; is it an fsm-agent database?")
        return JournalError(f"cannot open as a journal: {why}", path=self.path)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Apply pending migrations under the write lock: processes opening a new journal at
        once apply each migration exactly once (the others wait, then find nothing to do)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            migrations.apply(self.db)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _locked(self, statement: Callable[[], T], run_id: str | None) -> T:
        """Run a statement that takes the write lock. SQLite waits `busy_timeout_ms` for it;
        past that, a bounded number of retries, then a clear error — never a bare
        "database is locked"."""
        for attempt in range(_LOCK_ATTEMPTS):
            try:
                return statement()
            except sqlite3.OperationalError as exc:
                busy = "locked" in str(exc) or "busy" in str(exc)
                if not busy or attempt == _LOCK_ATTEMPTS - 1:
                    if busy:
                        waited = _LOCK_ATTEMPTS * self.busy_timeout_ms / 1000
                        raise JournalError(
                            f"another process held the journal's write lock for over {waited:g}"
                            " s; nothing was written (is a writer stuck?)",
                            path=self.path,
                            run_id=run_id,
                        ) from exc
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    @property
    def location(self) -> str:
        return str(Path(self.path).resolve())

    @contextmanager
    def _tx(self, run_id: str | None, *, atomic: bool = True) -> Iterator[sqlite3.Connection]:
        """One committed write: a transaction when `atomic`, else a single autocommit statement.
        Every failure becomes a `JournalError`; nothing half-written stays behind."""
        try:
            if not atomic:
                yield self.conn
                return
            self._locked(lambda: self.conn.execute("BEGIN IMMEDIATE"), run_id)
            try:
                yield self.conn
                self.conn.execute("COMMIT")
            except BaseException:
                # SQLite may have rolled the transaction back itself (a full disk does): a
                # second ROLLBACK would fail and hide why.
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise JournalError(
                f"write failed: {_explain(exc)}", path=self.path, run_id=run_id
            ) from exc
        except (TypeError, ValueError) as exc:
            raise JournalError(
                f"cannot serialize the entry ({exc}); nothing was written",
                path=self.path,
                run_id=run_id,
            ) from exc

    def _chained(self, e: Event, prev: str) -> tuple[Any, ...]:
        """The INSERT parameters of an event chained onto `prev`."""
        columns = event_columns(e)
        return (*columns, prev, link(prev, columns))

    def start_run(self, run: RunRow, first: Event) -> str:
        """Write the run's row and first event; return the run's head hash."""
        params = self._chained(first, genesis(run))
        with self._tx(run.run_id) as conn:
            conn.execute(_INSERT_RUN, self._run_params(run, None))
            conn.execute(_INSERT_EVENT, params)
        self._heads[run.run_id] = params[-1]
        return str(params[-1])

    def append(self, event: Event) -> str:
        """One statement, autocommit; returns the run's new head hash. It inserts only while
        the run's head is the hash this event is chained onto, so two writers can never fork
        one run's chain."""
        prev = self._heads.get(event.run_id) or self._head(event.run_id)
        params = self._chained(event, prev)
        with self._tx(event.run_id, atomic=False) as conn:
            cursor = self._locked(
                lambda: conn.execute(_APPEND_EVENT, (*params, event.run_id, prev)), event.run_id
            )
        if cursor.rowcount != 1:
            self._heads.pop(event.run_id, None)
            raise JournalError(
                f"event seq {event.seq} not written: the run's head is no longer the event"
                " it follows (another process is writing this run)",
                path=self.path,
                run_id=event.run_id,
            )
        self._heads[event.run_id] = params[-1]
        return str(params[-1])

    def _head(self, run_id: str) -> str:
        rows = self._read(
            lambda: list(self.db.query("SELECT head_hash FROM runs WHERE run_id = ?", [run_id]))
        )
        if not rows:
            raise JournalError("cannot append: no such run in this journal", path=self.path,
                               run_id=run_id)  # fmt: skip
        if rows[0]["head_hash"] is None:
            raise JournalError(
                "cannot append: the run has no head hash (journaled before the hash chain)",
                path=self.path,
                run_id=run_id,
            )
        return str(rows[0]["head_hash"])

    def finish_run(self, record: HaltRecord) -> None:
        with self._tx(record.run_id) as conn:
            cursor = conn.execute(
                "UPDATE runs SET status = 'halted', state = ?, halt_reason = ?, steps_used = ?,"
                " ended_at = ?, record = ? WHERE run_id = ?",
                (
                    record.terminal_state,
                    record.halt_reason.value,
                    record.steps_used,
                    record.ended_at,
                    serde.dumps(record),
                    record.run_id,
                ),
            )
            _one_row(cursor)

    def mark_run(self, run_id: str, status: RunStatus, pid: int | None, host: str | None) -> None:
        with self._tx(run_id) as conn:
            cursor = conn.execute(
                "UPDATE runs SET status = ?, pid = ?, host = ? WHERE run_id = ?"
                " AND status != 'halted'",
                (status, pid, host, run_id),
            )
            _one_row(cursor)

    def import_run(self, run: RunRow, events: Sequence[Event], record: HaltRecord | None) -> None:
        """Write a run exported from another journal, its events and its record, in ONE
        transaction, with the same serialization as the live path. The journal is
        append-only: a run id already here is refused, never overwritten."""
        if run.record != record:
            raise JournalError(
                "the run row's record and the record to import differ; nothing was written",
                path=self.path,
                run_id=run.run_id,
            )
        with self._tx(run.run_id) as conn:
            if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run.run_id,)).fetchone():
                raise JournalError(
                    "already in this journal; the journal is append-only, so an import never"
                    " overwrites a run (import into another database)",
                    path=self.path,
                    run_id=run.run_id,
                )
            conn.execute(_INSERT_RUN, self._run_params(run, record))
            prev = genesis(run)
            for e in events:
                params = self._chained(e, prev)
                conn.execute(_INSERT_EVENT, params)
                prev = params[-1]

    def _run_params(self, run: RunRow, record: HaltRecord | None) -> tuple[Any, ...]:
        return (
            run.run_id,
            run.machine,
            run.machine_sha256,
            run.machine_text,
            run.task,
            _json(run.budgets),
            run.state,
            run.status,
            None if run.halt_reason is None else run.halt_reason.value,
            run.steps_used,
            run.started_at,
            run.ended_at,
            None if record is None else serde.dumps(record),
            run.pid,
            run.host,
        )

    # --- reads ----------------------------------------------------------------------------

    def _row(self, row: dict[str, Any]) -> RunRow:
        live = row["status"] != "halted" and row.get("live_state") is not None
        try:
            return RunRow(
                run_id=row["run_id"],
                machine=row["machine"],
                machine_sha256=row["machine_sha256"],
                machine_text=row["machine_text"],
                task=row["task"],
                budgets=serde.structure(json.loads(row["budgets"]), Budgets),
                state=row["state"] if not live else row["live_state"],
                status=row["status"],
                started_at=row["started_at"],
                steps_used=row["live_steps"]
                if live and isinstance(row["live_steps"], int)
                else row["steps_used"],
                halt_reason=None if row["halt_reason"] is None else HaltReason(row["halt_reason"]),
                ended_at=row["ended_at"],
                record=None
                if row["record"] is None
                else serde.structure(json.loads(row["record"]), HaltRecord),
                pid=row["pid"],
                host=row["host"],
            )
        except Exception as exc:
            raise JournalError(
                f"corrupt runs row: {serde.error_path(exc)}",
                path=self.path,
                run_id=row.get("run_id"),
            ) from exc

    def get_run(self, run_id: str) -> RunRow:
        sql = f"{_SELECT_RUNS} WHERE r.run_id = ?"
        rows = self._read(lambda: list(self.db.query(sql, [run_id])))
        if not rows:
            raise RunNotFound(run_id, path=self.path)
        return self._row(rows[0])

    def list_runs(self, limit: int = 20) -> list[RunRow]:
        sql = f"{_SELECT_RUNS} ORDER BY r.started_at DESC, r.run_id DESC LIMIT ?"
        rows = self._read(lambda: list(self.db.query(sql, [limit])))
        return [self._row(r) for r in rows]

    def run_summaries(
        self, machine: str | None = None, since: str | None = None
    ) -> list[RunSummary]:
        """One narrow row per run (see `_SELECT_SUMMARIES`), by machine then start time.

        Plain tuples and type checks, no converter: this reads every run in the journal."""
        params = {"machine": machine, "since": since}
        try:
            rows = self.conn.execute(_SELECT_SUMMARIES, params).fetchall()
        except sqlite3.Error as exc:
            raise JournalError(f"read failed: {_explain(exc)}", path=self.path) from exc
        return [self._summary(r) for r in rows]

    def _summary(self, row: tuple[Any, ...]) -> RunSummary:
        run_id, machine, status, reason, steps, max_steps, started, ended, cost = row
        problem = _summary_problem(status, reason, steps, max_steps, cost)
        if problem is not None:
            raise JournalError(f"corrupt runs row: {problem}", path=self.path, run_id=run_id)
        return RunSummary(
            run_id=run_id,
            machine=machine,
            status=status,
            halt_reason=None if reason is None else HaltReason(reason),
            steps_used=steps,
            max_steps=max_steps,
            started_at=started,
            ended_at=ended,
            cost=None if cost is None else float(cost),
        )

    def events(self, run_id: str) -> list[Event]:
        self.get_run(run_id)
        rows = self._read(
            lambda: list(self.db["events"].rows_where("run_id = ?", [run_id], order_by="seq"))
        )
        # Decoding builds many small containers; the cyclic GC only slows that down (~25%).
        enabled = gc.isenabled()
        gc.disable()
        try:
            return [self._event(r) for r in rows]
        finally:
            if enabled:
                gc.enable()

    def _event(self, r: dict[str, Any]) -> Event:
        try:
            return Event(
                run_id=r["run_id"],
                seq=r["seq"],
                kind=r["kind"],
                at_ms=r["at_ms"],
                wall_time=r["wall_time"],
                source=r["source"],
                dest=r["dest"],
                trigger=r["trigger"],
                snapshot=serde.structure(json.loads(r["snapshot"]), Snapshot),
                guards=serde.structure(json.loads(r["guards"]), tuple[GuardResult, ...]),
                check=serde.structure(json.loads(r["checks"]), tuple[GuardResult, ...]),
                facts=None
                if r["facts"] is None
                else serde.structure(json.loads(r["facts"]), Facts),
                halt=None if r["halt"] is None else HaltReason(r["halt"]),
                retry=bool(r["retry"]),
                note=r["note"],
                control=r["control"],
            )
        except Exception as exc:
            raise JournalError(
                f"corrupt event seq {r.get('seq')}: {serde.error_path(exc)}",
                path=self.path,
                run_id=r.get("run_id"),
            ) from exc

    def chain(self, run_id: str) -> tuple[RunRow, list[ChainLink], str | None]:
        """A run's row, its events as stored (column text, not decoded) with their hashes,
        and its head hash: what `fsm_agent.chain.verify_chain` checks."""
        run = self.get_run(run_id)
        head = self._read(
            lambda: list(self.db.query("SELECT head_hash FROM runs WHERE run_id = ?", [run_id]))
        )
        rows = self._tuples(_SELECT_CHAIN, (run_id,))
        links = [ChainLink(r[1], tuple(r[:16]), r[16], r[17]) for r in rows]
        return run, links, head[0]["head_hash"]

    def run_ids(self) -> list[str]:
        """Every run id in the journal, oldest first."""
        rows = self._tuples("SELECT run_id FROM runs ORDER BY started_at, run_id", ())
        return [r[0] for r in rows]

    def _tuples(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise JournalError(f"read failed: {_explain(exc)}", path=self.path) from exc

    def _read(self, query: Any) -> list[dict[str, Any]]:
        try:
            return query()  # type: ignore[no-any-return]
        except sqlite3.Error as exc:
            raise JournalError(f"read failed: {_explain(exc)}", path=self.path) from exc

    def add_control(self, control: Control) -> int:
        """Queue an operator's instruction for a live run; returns its id."""
        with self._tx(control.run_id) as conn:
            cursor = conn.execute(
                "INSERT INTO controls (run_id, kind, payload, who, why, at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (control.run_id, control.kind, json.dumps(control.payload), control.who,
                 control.why, control.at),
            )  # fmt: skip
        return int(cursor.lastrowid or 0)

    def controls(self, run_id: str, after: int = 0) -> list[Control]:
        """The instructions for `run_id`, and those for every run, queued after control
        `after`, oldest first (one indexed read before each model call)."""
        sql = "SELECT * FROM controls WHERE (run_id = ? OR run_id IS NULL) AND id > ? ORDER BY id"
        rows = self._read(lambda: list(self.db.query(sql, [run_id, after])))
        return [
            Control(id=r["id"], run_id=r["run_id"], kind=r["kind"],
                    payload=json.loads(r["payload"]), who=r["who"], why=r["why"], at=r["at"])
            for r in rows
        ]  # fmt: skip

    def close(self) -> None:
        self.conn.close()
