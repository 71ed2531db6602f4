"""The embedded default store: one plain SQLite file, WAL mode, one commit per transition.

Events are read through a plain cursor, other reads through sqlite-utils; the hot path is a
bound INSERT on the same connection, committed per transition, chained onto the run's head.
The schema and its migrations are in `fsm_agent.stores.sqlite_schema`; opening a file (read-only
fallback, version check) in `fsm_agent.stores.sqlite_open`.
"""

from __future__ import annotations

import gc
import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import attrs

from fsm_agent.errors import JournalError
from fsm_agent.journal.chain_hash import ChainLink, chain_version, genesis, mode_for
from fsm_agent.journal.chain_key import key_from_env
from fsm_agent.journal.store import (
    Control,
    Event,
    RunRow,
    RunStatus,
    RunSummary,
)
from fsm_agent.run_ids import RunNotFound
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.stores import codec
from fsm_agent.stores.run_chains import RunChains, store_witness
from fsm_agent.stores.run_lookup import RunLookup
from fsm_agent.stores.sqlite_open import Synchronous, explain, open_journal
from fsm_agent.stores.sqlite_schema import (
    APPEND_EVENT,
    APPEND_ROWS_MAX,
    CLAIM_RUN,
    FINISH_RUN,
    INSERT_DECLARATION,
    INSERT_EVENT,
    INSERT_RUN,
    REOPEN_RUN,
    SELECT_CHAIN,
    SELECT_EVENTS,
    SELECT_HEAD,
    SELECT_NEWEST,
    SELECT_RUNS,
    SELECT_SUMMARIES,
    append_rows,
)

T = TypeVar("T")
#: Waits of `busy_timeout_ms` for the write lock before a write gives up.
_LOCK_ATTEMPTS = 3


def _one_row(cursor: sqlite3.Cursor) -> None:
    """An UPDATE of a run that touched no row: the run is not in this journal."""
    if cursor.rowcount != 1:
        raise sqlite3.IntegrityError("no such run in this journal")


class _Row(sqlite3.Row):
    """A row read by column name, with `get` (what a corrupt row's message reads)."""

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except (IndexError, KeyError):
            return default


class SqliteStore(RunLookup, RunChains):
    """A journal in one SQLite file (default `./fsm-agent.db`); `read_only=True` opens it
    only to read (nothing is created, migrated or written)."""

    SELECT_CHAIN = "SELECT chain FROM runs WHERE run_id = ?"
    REOPEN_RUN, APPEND_EVENT = REOPEN_RUN, APPEND_EVENT
    SELECT_RUNS_FOR_LIST = SELECT_RUNS

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "NORMAL",
        busy_timeout_ms: int = 5000,
        chain_key: bytes | None = None,
        read_only: bool = False,
        witness: str | os.PathLike[str] | None = None,
    ) -> None:
        self.path = str(path)
        #: the key new runs are chained with (`fsm_agent.journal.chain_key`: the environment's when
        #: not given); None: unkeyed
        self.chain_key = chain_key if chain_key is not None else key_from_env()
        writer = store_witness(witness, self.chain_key, read_only)
        try:
            conn, read_only = open_journal(
                self.path,
                synchronous=synchronous,
                busy_timeout_ms=int(busy_timeout_ms),
                read_only=read_only,
            )
        except BaseException:
            if writer is not None:
                writer.close()
            raise
        if read_only and writer is not None:  # the file may be read, not written
            writer.close()
            writer = None
        #: True when this process may read the journal but not write it.
        self.read_only = read_only
        self.conn = conn
        # As sqlite-utils set it on every connection it wrapped (the store's, until its
        # reads went straight to sqlite3): kept, so triggers behave as they always have.
        conn.execute("PRAGMA recursive_triggers = ON")
        self._controls_added = 0  # by this connection (data_version counts only the others')
        self._init_chains(writer)
        self.busy_timeout_ms = int(busy_timeout_ms)

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
                        raise self._error(
                            f"another process held the journal's write lock for over {waited:g}"
                            " s; nothing was written (is a writer stuck?)",
                            run_id,
                        ) from exc
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _error(self, message: str, run_id: str | None = None) -> JournalError:
        return JournalError(message, path=self.path, run_id=run_id)

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
            raise self._error(f"write failed: {explain(exc)}", run_id) from exc
        except (TypeError, ValueError) as exc:
            raise self._error(
                f"cannot serialize the entry ({exc}); nothing was written", run_id
            ) from exc

    def start_run(self, run: RunRow, first: Event) -> str:
        """Write the run's row (its declaration once per sha256) and first event, chained
        with this store's key (unkeyed without one); return the run's head hash."""
        run = attrs.evolve(run, chain=mode_for(self.chain_key), record_hash=None)
        version = chain_version(run.chain)
        params, head = codec.chained(first, genesis(run, self.chain_key), self.chain_key, version)
        declaration = codec.declared_row(run)
        with self._tx(run.run_id) as conn:
            if declaration is not None:
                conn.execute(INSERT_DECLARATION, declaration)
            conn.execute(INSERT_RUN, codec.run_params(run, None, declared=bool(declaration)))
            conn.execute(INSERT_EVENT, params)
        self._heads[run.run_id] = head
        self._modes[run.run_id] = (self.chain_key, version)
        self._bases[run.run_id] = codec.base_form(first)
        self._witnessed(run.run_id, first.seq, head)
        return head

    def append(self, event: Event) -> str:
        """One statement, autocommit; returns the run's new head hash. It inserts only onto
        the run's head (the event before it holds the hash it is chained onto, and no event
        follows that one yet), so two writers can never fork one run's chain."""
        return self.append_many((event,))

    def append_many(self, events: Sequence[Event]) -> str:
        """Chain several events of one run onto its head, each its own row with its own hash,
        in ONE transaction, all or none (the first is inserted only onto the head, as by
        `append`); returns the new head hash."""
        if not events:
            raise self._error("append_many: no events to append")
        run_id = events[0].run_id
        prev = self._heads.get(run_id) or self._head(run_id)
        key, version = self._mode(run_id)
        base = self._base(run_id) if version >= 4 else None
        rows, head = codec.chained_batch(events, prev, key, version, base, self._error)
        onto = self._onto(run_id, events[0].seq - 1, prev, version)
        try:
            if len(rows) <= APPEND_ROWS_MAX:
                params = [value for row in rows for value in row]
                params += onto
                inserted = self._write(append_rows(len(rows)), params, run_id).rowcount
            else:
                with self._tx(run_id) as conn:
                    inserted = conn.execute(APPEND_EVENT, (*rows[0], *onto)).rowcount
                    if inserted == 1:
                        inserted += conn.executemany(INSERT_EVENT, rows[1:]).rowcount
            if inserted != len(rows):
                raise codec.StaleHead
        except (JournalError, codec.StaleHead) as exc:
            self._heads.pop(run_id, None)
            cause = exc.__cause__
            if isinstance(exc, codec.StaleHead) or (
                isinstance(cause, sqlite3.IntegrityError) and "UNIQUE" in str(cause)
            ):
                raise self._error(codec.stale_head(events[0].seq), run_id) from None
            raise
        self._heads[run_id] = head
        self._witnessed(run_id, events[-1].seq, head)
        return head

    def _write(self, sql: str, params: Sequence[Any], run_id: str) -> sqlite3.Cursor:
        """One autocommit statement (its own committed transaction); a busy journal is
        waited for as by `_locked`, every failure is a `JournalError`."""
        try:
            return self._locked(lambda: self.conn.execute(sql, params), run_id)
        except sqlite3.Error as exc:
            raise self._error(f"write failed: {explain(exc)}", run_id) from exc
        except (TypeError, ValueError) as exc:
            raise self._error(
                f"cannot serialize the entry ({exc}); nothing was written", run_id
            ) from exc

    def _head(self, run_id: str) -> str:
        rows = self._tuples(SELECT_HEAD, {"run_id": run_id})
        if not rows:
            raise self._error("cannot append: no such run in this journal", run_id)
        if rows[0][0] is None:
            raise self._error(
                "cannot append: the run has no head hash (journaled before the hash chain)",
                run_id,
            )
        return str(rows[0][0])

    def finish_run(self, record: HaltRecord) -> None:
        """Store the halt record and the row's summary, with the record sealed onto the
        run's head as it is in the same transaction (and that head kept with it)."""
        with self._tx(record.run_id) as conn:
            row = conn.execute(SELECT_NEWEST, {"run_id": record.run_id}).fetchone()
            if row is None:
                raise sqlite3.IntegrityError("no such run in this journal")
            key = codec.chain_key(row[1], self.chain_key, self._error, record.run_id)
            seal = codec.seal(record, row[0], key)
            head = (row[0], row[2]) if row[0] is not None else (None, None)
            _one_row(conn.execute(FINISH_RUN, codec.finish_params(record, seal, head)))
        self._witnessed(record.run_id, head[1] or 0, head[0], seal)

    def _onto(self, run_id: str, seq: int, prev: str, version: int) -> tuple[Any, ...]:
        """What `APPEND_EVENT` inserts onto: the event before (seq) and the hash it holds."""
        return (run_id, seq, bytes.fromhex(prev) if version >= 3 else prev)

    def mark_run(self, run_id: str, status: RunStatus, pid: int | None, host: str | None) -> None:
        with self._tx(run_id) as conn:
            cursor = conn.execute(
                "UPDATE runs SET status = ?, pid = ?, host = ? WHERE run_id = ?"
                " AND status != 'halted'",
                (status, pid, host, run_id),
            )
            _one_row(cursor)

    def claim_run(
        self,
        run_id: str,
        *,
        was: tuple[RunStatus, int | None, str | None],
        head: str,
        pid: int,
        host: str,
    ) -> bool:
        """One UPDATE under BEGIN IMMEDIATE: the owner changes only if nobody changed it."""
        status, old_pid, old_host = was
        with self._tx(run_id) as conn:
            params = {"pid": pid, "host": host, "run_id": run_id, "status": status,
                      "old_pid": old_pid, "old_host": old_host, "head": head}  # fmt: skip
            cursor = conn.execute(CLAIM_RUN, params)
        return cursor.rowcount == 1

    def import_run(self, run: RunRow, events: Sequence[Event], record: HaltRecord | None) -> None:
        """Write a run exported from another journal, its events and its record, in ONE
        transaction, with the same serialization as the live path. The journal is
        append-only: a run id already here is refused, never overwritten."""
        row, params = codec.import_params(run, events, record, self._error, self.chain_key)
        declaration = codec.declared_row(run)
        with self._tx(run.run_id) as conn:
            if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run.run_id,)).fetchone():
                raise self._error(codec.ALREADY_HERE, run.run_id)
            if declaration is not None:
                conn.execute(INSERT_DECLARATION, declaration)
            conn.execute(INSERT_RUN, row)
            conn.executemany(INSERT_EVENT, params)
        self._witness_import(run.run_id)

    # --- reads ----------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRow:
        sql = f"{SELECT_RUNS} WHERE r.run_id = ?"
        rows = self._read(lambda: self._rows(sql, [run_id]))
        if not rows:
            raise RunNotFound(run_id, path=self.path)
        return codec.run_row(rows[0], self._error)

    def _run_rows(self, sql: str, params: dict[str, Any]) -> list[RunRow]:
        rows = self._read(lambda: self._rows(sql, params))
        return [codec.run_row(r, self._error) for r in rows]

    @staticmethod
    def _placeholder(name: str) -> str:
        return f":{name}"

    def run_summaries(
        self, machine: str | None = None, since: str | None = None
    ) -> list[RunSummary]:
        """One narrow row per run (see `SELECT_SUMMARIES`), by machine then start time.

        Plain tuples and type checks, no converter: this reads every run in the journal."""
        rows = self._tuples(SELECT_SUMMARIES, {"machine": machine, "since": since})
        return [codec.summary(r, self._error) for r in rows]

    def events(self, run_id: str) -> list[Event]:
        self.get_run(run_id)
        # The rows are many small values that live on as events: no cyclic GC while they
        # are read and decoded (it only slows that down).
        enabled = gc.isenabled()
        gc.disable()
        try:
            rows = self._event_rows(f"{SELECT_EVENTS} ORDER BY seq", run_id)
            return codec.events(rows, self._error)
        finally:
            if enabled:
                gc.enable()

    def last_event(self, run_id: str) -> Event:
        rows = self._event_rows(f"{SELECT_EVENTS} ORDER BY seq DESC LIMIT 1", run_id)
        if not rows:
            self.get_run(run_id)  # RunNotFound if it is not there
            raise self._error("the run has no events", run_id)
        row = rows[0]
        return codec.event(row, self._error, self._first_row(run_id) if row["seq"] else None)

    def events_between(self, run_id: str, first: int, last: int) -> list[Event]:
        sql = f"{SELECT_EVENTS} AND seq BETWEEN ? AND ? ORDER BY seq"
        rows = self._event_rows(sql, run_id, first, last)
        if not rows:
            self.get_run(run_id)  # RunNotFound if it is not there
            return []
        base = None if rows[0]["seq"] == 0 else self._first_row(run_id)
        return codec.events(rows, self._error, base)

    def event_at(self, run_id: str, seq: int) -> Event | None:
        found = self.events_between(run_id, seq, seq)
        return found[0] if found else None

    def _first_row(self, run_id: str) -> Any:
        """The run's seq-0 `events` row (None when it has none)."""
        sql = "SELECT * FROM events WHERE run_id = ? AND seq = 0"
        rows = self._read(lambda: self._rows(sql, [run_id]))
        return rows[0] if rows else None

    def _event_rows(self, sql: str, run_id: str, *more: Any) -> list[Any]:
        """Event rows (`READ_COLUMNS`) as the mappings `codec.event` decodes, read by a plain
        cursor: each row is looked up by column name, without building a dict per row."""

        def query() -> list[Any]:
            cursor = self.conn.cursor()
            cursor.row_factory = _Row
            return cursor.execute(sql, (run_id, *more)).fetchall()

        return self._read(query)

    def chain(self, run_id: str) -> tuple[RunRow, list[ChainLink], str | None]:
        """A run's row, its events as stored (column text, not decoded) with their hashes,
        and its head hash: what `fsm_agent.journal.chain.verify_chain` checks."""
        run = self.get_run(run_id)
        head = self._tuples(SELECT_HEAD, {"run_id": run_id})
        links = [codec.chain_link(r) for r in self._tuples(SELECT_CHAIN, (run_id,))]
        return run, links, head[0][0] if head else None

    def run_ids(self) -> list[str]:
        """Every run id in the journal, oldest first."""
        rows = self._tuples("SELECT run_id FROM runs ORDER BY started_at, run_id", ())
        return [r[0] for r in rows]

    def _tuples(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        return self._read(lambda: self.conn.execute(sql, params).fetchall())

    def _rows(self, sql: str, params: Sequence[Any] | Mapping[str, Any]) -> list[dict[str, Any]]:
        """The rows of a read, each as a dict by column name."""
        cursor = self.conn.execute(sql, params)
        keys = [column[0] for column in cursor.description]
        return [dict(zip(keys, row, strict=True)) for row in cursor]

    def _read(self, query: Callable[[], list[Any]]) -> list[Any]:
        try:
            return query()
        except sqlite3.Error as exc:
            raise self._error(f"read failed: {explain(exc)}") from exc

    def add_control(self, control: Control) -> int:
        """Queue an operator's instruction for a live run; returns its id."""
        with self._tx(control.run_id) as conn:
            cursor = conn.execute(
                "INSERT INTO controls (run_id, kind, payload, who, why, at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                codec.control_params(control),
            )
        self._controls_added += 1
        return int(cursor.lastrowid or 0)

    def control_version(self) -> tuple[int, int] | None:
        """A value that differs from the last one read whenever a control may have been
        added since: SQLite's `data_version` (it moves on every commit by another
        connection, any process) with this connection's own additions. A run reads its
        controls only when it changed (a pragma, not a query)."""
        row = self._read(lambda: self.conn.execute("PRAGMA data_version").fetchall())
        return int(row[0][0]), self._controls_added

    def controls(self, run_id: str, after: int = 0) -> list[Control]:
        """The instructions for `run_id`, and those for every run, queued after control
        `after`, oldest first (one indexed read before each model call)."""
        sql = "SELECT * FROM controls WHERE (run_id = ? OR run_id IS NULL) AND id > ? ORDER BY id"
        rows = self._read(lambda: self._rows(sql, [run_id, after]))
        return [codec.control(r, self._error) for r in rows]

    def close(self) -> None:
        self._close_witness()
        self.conn.close()
