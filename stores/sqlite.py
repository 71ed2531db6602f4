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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import sqlite_utils
from sqlite_utils.migrations import Migrations

from fsm_agent import serde
from fsm_agent.budgets import Budgets
from fsm_agent.errors import JournalError, RunNotFound
from fsm_agent.halt import HaltReason
from fsm_agent.journal import Control, Event, Facts, GuardResult, RunRow, RunSummary
from fsm_agent.record import HaltRecord
from fsm_agent.snapshot import Snapshot

Synchronous = Literal["NORMAL", "FULL"]
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


_INSERT_EVENT = """
    INSERT INTO events (run_id, seq, kind, at_ms, wall_time, source, dest, trigger, halt, retry,
                        guards, checks, snapshot, facts, note)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""
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
                      halt_reason, steps_used, started_at, ended_at, record, pid)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""
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
    if status not in ("running", "halted"):
        return f"status {status!r} is not 'running' or 'halted'"
    if reason is not None and reason not in _HALT_REASONS:
        return f"halt_reason {reason!r} is not a halt reason"
    if type(steps) is not int:
        return f"steps_used {steps!r} is not an integer"
    if type(max_steps) is not int or max_steps < 1:
        return f"budgets.max_steps {max_steps!r} is not a positive integer"
    if cost is not None and type(cost) not in (int, float):
        return f"record.meters.cost {cost!r} is not a number"
    return None


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
        conn = None
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {'FULL' if synchronous == 'FULL' else 'NORMAL'}")
            self.db = sqlite_utils.Database(conn)
            known = {m.name for m in migrations._migrations}
            unknown = [m.name for m in migrations.applied(self.db) if m.name not in known]
            if unknown:
                raise JournalError(
                    f"written by a newer fsm-agent (migration {unknown[0]!r});"
                    " upgrade fsm-agent to read it",
                    path=self.path,
                )
            migrations.apply(self.db)
        except (sqlite3.Error, JournalError) as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, JournalError):
                raise
            raise JournalError(
                f"cannot open as a journal ({exc}); is it an fsm-agent database?", path=self.path
            ) from exc
        self.conn = conn

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
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise JournalError(f"write failed: {exc}", path=self.path, run_id=run_id) from exc
        except (TypeError, ValueError) as exc:
            raise JournalError(
                f"cannot serialize the entry ({exc}); nothing was written",
                path=self.path,
                run_id=run_id,
            ) from exc

    def _event_params(self, e: Event) -> tuple[Any, ...]:
        return (
            e.run_id,
            e.seq,
            e.kind,
            e.at_ms,
            e.wall_time,
            e.source,
            e.dest,
            e.trigger,
            None if e.halt is None else e.halt.value,
            int(e.retry),
            _json(e.guards),
            _json(e.check),
            _json(e.snapshot),
            None if e.facts is None else _json(e.facts),
            e.note,
        )

    def start_run(self, run: RunRow, first: Event) -> None:
        with self._tx(run.run_id) as conn:
            conn.execute(_INSERT_RUN, self._run_params(run, None))
            conn.execute(_INSERT_EVENT, self._event_params(first))

    def append(self, event: Event) -> None:
        with self._tx(event.run_id, atomic=False) as conn:
            conn.execute(_INSERT_EVENT, self._event_params(event))  # one statement, autocommit

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
            conn.executemany(_INSERT_EVENT, [self._event_params(e) for e in events])

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
        )

    # --- reads ----------------------------------------------------------------------------

    def _row(self, row: dict[str, Any]) -> RunRow:
        live = row["status"] == "running" and row.get("live_state") is not None
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
            raise JournalError(f"read failed: {exc}", path=self.path) from exc
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
            )
        except Exception as exc:
            raise JournalError(
                f"corrupt event seq {r.get('seq')}: {serde.error_path(exc)}",
                path=self.path,
                run_id=r.get("run_id"),
            ) from exc

    def _read(self, query: Any) -> list[dict[str, Any]]:
        try:
            return query()  # type: ignore[no-any-return]
        except sqlite3.Error as exc:
            raise JournalError(f"read failed: {exc}", path=self.path) from exc

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
