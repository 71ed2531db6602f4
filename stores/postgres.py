"""One journal for many workers on many hosts: PostgreSQL through psycopg 3.

The same tables, meaning and hash chain as the SQLite store (`fsm_agent.stores.sqlite`): every write
is one committed transaction; an event is inserted only onto its run's head (the event
before it holds the hash it chains onto; the primary key lets one event only follow it).
The schema, its migrations and the statements are in `fsm_agent.stores.postgres_schema`; connecting
and migrating in `fsm_agent.stores.postgres_open`. Select it with `--db postgresql://…` (see
`fsm_agent.stores.open_store`); nothing else imports psycopg.

One connection per store object, autocommit off, each operation in its own explicit
transaction (nothing is left idle in a transaction between calls); an append of up to
`APPEND_ROWS_MAX` events is one statement, run in autocommit (one round trip, the same
commit). A store may be shared by
threads (its operations take turns), but a worker thread is better served by its own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import attrs
import psycopg
from psycopg.rows import dict_row

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
from fsm_agent.stores.dsn import redact_dsn
from fsm_agent.stores.postgres_open import connect, explain, passwords, scrub
from fsm_agent.stores.postgres_schema import (
    APPEND_EVENT,
    APPEND_ROWS_MAX,
    CLAIM_RUN,
    FINISH_RUN,
    INSERT_DECLARATION,
    INSERT_EVENT,
    INSERT_RUN,
    LOCK_HEAD,
    REOPEN_RUN,
    SELECT_CHAIN,
    SELECT_EVENTS,
    SELECT_HEAD,
    SELECT_RUNS,
    SELECT_SUMMARIES,
    append_rows,
)
from fsm_agent.stores.run_chains import RunChains, store_witness
from fsm_agent.stores.run_lookup import RunLookup

Verb = Literal["read", "write"]


class PostgresStore(RunLookup, RunChains):
    """A journal in a PostgreSQL database (the tables of the DSN's search path)."""

    SELECT_CHAIN = "SELECT chain FROM runs WHERE run_id = %s"
    REOPEN_RUN, APPEND_EVENT = REOPEN_RUN, APPEND_EVENT
    SELECT_RUNS_FOR_LIST = SELECT_RUNS

    def __init__(
        self,
        dsn: str,
        *,
        chain_key: bytes | None = None,
        read_only: bool = False,
        witness: str | os.PathLike[str] | None = None,
    ) -> None:
        self.dsn = dsn
        #: the key new runs are chained with (`fsm_agent.journal.chain_key`: the environment's when
        #: not given); None: unkeyed
        self.chain_key = chain_key if chain_key is not None else key_from_env()
        self._location = redact_dsn(dsn)
        self._secrets = passwords(dsn)
        #: True for a store opened only to read (its session refuses every write); otherwise
        #: False: a server decides per statement what a role may write.
        self.read_only = read_only
        self._lock = threading.RLock()
        self._init_chains(store_witness(witness, self.chain_key, read_only))
        self._closed = False
        try:
            self.conn = self._connect()
        except BaseException:
            self._close_witness()
            raise

    @property
    def location(self) -> str:
        """The DSN without its password."""
        return self._location

    # --- the connection -------------------------------------------------------------------

    def _error(self, message: str, run_id: str | None = None) -> JournalError:
        return JournalError(scrub(message, self._secrets), path=self.location, run_id=run_id)

    def _connect(self) -> psycopg.Connection[Any]:
        return connect(self.dsn, self.location, self._secrets, read_only=self.read_only)

    @contextmanager
    def _tx(
        self, run_id: str | None, verb: Verb = "write", *, atomic: bool = True
    ) -> Iterator[psycopg.Connection[Any]]:
        """One transaction, committed on success and rolled back on any failure; not
        `atomic`: one statement in autocommit (its own transaction, one round trip). Every
        failure of the server or of serialization becomes a `JournalError`. A connection the
        server dropped is replaced at the next call."""
        with self._lock:
            if self._closed:
                raise self._error("the store is closed", run_id)
            if self.conn.closed:
                self.conn = self._connect()
            try:
                if atomic:
                    with self.conn.transaction():
                        yield self.conn
                else:
                    self.conn.autocommit = True
                    try:
                        yield self.conn
                    finally:
                        if not self.conn.closed:
                            self.conn.autocommit = False
            except psycopg.Error as exc:
                raise self._error(f"{verb} failed: {explain(exc)}", run_id) from exc
            except (TypeError, ValueError, OverflowError) as exc:
                raise self._error(
                    f"cannot serialize the entry ({exc}); nothing was written", run_id
                ) from exc

    def _rows(self, sql: str, params: Any) -> list[dict[str, Any]]:
        with self._tx(None, "read") as conn:
            return conn.cursor(row_factory=dict_row).execute(sql, params).fetchall()

    def _tuples(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        with self._tx(None, "read") as conn:
            return conn.execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._close_witness()
            self.conn.close()

    # --- writes ---------------------------------------------------------------------------

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
        """One INSERT, autocommit; returns the run's new head hash. It inserts only
        onto the run's head (the event before it holds the hash it chains onto, and the
        primary key lets one event only follow that one), so two writers can never fork one
        run's chain."""
        return self.append_many((event,))

    def append_many(self, events: Sequence[Event]) -> str:
        """Chain several events of one run onto its head, each its own row with its own hash,
        in ONE transaction (up to `APPEND_ROWS_MAX` of them: one statement), all or none;
        returns the new head hash."""
        if not events:
            raise self._error("append_many: no events to append")
        run_id = events[0].run_id
        prev = self._heads.get(run_id) or self._head(run_id)
        key, version = self._mode(run_id)
        base = self._base(run_id) if version >= 4 else None
        rows, head = codec.chained_batch(events, prev, key, version, base, self._error)
        onto = self._onto(run_id, events[0].seq - 1, prev, version)
        try:
            with self._tx(run_id, atomic=len(rows) > APPEND_ROWS_MAX) as conn:
                if len(rows) <= APPEND_ROWS_MAX:
                    params = [value for row in rows for value in row]
                    params += onto
                    inserted = conn.execute(append_rows(len(rows)), params).rowcount
                else:
                    inserted = conn.execute(APPEND_EVENT, (*rows[0], *onto)).rowcount
                    if inserted == 1:
                        with conn.cursor() as cursor:
                            cursor.executemany(INSERT_EVENT, rows[1:])
                        inserted = len(rows)
                if inserted != len(rows):
                    raise codec.StaleHead
        except (JournalError, codec.StaleHead) as exc:
            self._heads.pop(run_id, None)  # it may have committed: read the head again
            cause = exc.__cause__
            if isinstance(exc, codec.StaleHead) or isinstance(
                cause, psycopg.errors.UniqueViolation
            ):
                raise self._error(codec.stale_head(events[0].seq), run_id) from None
            raise
        self._heads[run_id] = head
        self._witnessed(run_id, events[-1].seq, head)
        return head

    def _head(self, run_id: str) -> str:
        rows = self._tuples(SELECT_HEAD, {"run_id": run_id})
        if not rows:
            raise self._error("cannot append: no such run in this journal", run_id)
        if rows[0][0] is None:
            raise self._error("cannot append: the run has no head hash", run_id)
        return str(rows[0][0])

    def finish_run(self, record: HaltRecord) -> None:
        """Store the halt record and the row's summary, with the record sealed onto the
        run's head (and that head kept with it), the run's row locked meanwhile."""
        with self._tx(record.run_id) as conn:
            row = conn.execute(LOCK_HEAD, {"run_id": record.run_id}).fetchone()
            if row is None:
                raise self._error("write failed: no such run in this journal", record.run_id)
            key = codec.chain_key(row[1], self.chain_key, self._error, record.run_id)
            seal = codec.seal(record, row[0], key)
            head = (row[0], row[2]) if row[0] is not None else (None, None)
            cursor = conn.execute(FINISH_RUN, codec.finish_params(record, seal, head))
            if cursor.rowcount != 1:
                raise self._error("write failed: no such run in this journal", record.run_id)
        self._witnessed(record.run_id, head[1] or 0, head[0], seal)

    def _onto(self, run_id: str, seq: int, prev: str, version: int) -> tuple[Any, ...]:
        """What `APPEND_EVENT` inserts onto: the event before (seq) and the hash it holds,
        as text before chain version 3, as bytes from it."""
        v3 = version >= 3
        return (run_id, seq, None if v3 else prev, bytes.fromhex(prev) if v3 else None)

    def mark_run(self, run_id: str, status: RunStatus, pid: int | None, host: str | None) -> None:
        with self._tx(run_id) as conn:
            cursor = conn.execute(
                "UPDATE runs SET status = %s, pid = %s, host = %s"
                " WHERE run_id = %s AND status <> 'halted'",
                (status, pid, host, run_id),
            )
            if cursor.rowcount != 1:
                raise self._error(
                    "write failed: no such run in this journal, or it has halted", run_id
                )

    def claim_run(
        self,
        run_id: str,
        *,
        was: tuple[RunStatus, int | None, str | None],
        head: str,
        pid: int,
        host: str,
    ) -> bool:
        """One UPDATE: of two concurrent claims the second waits for the first's row lock,
        then finds the row changed (READ COMMITTED re-checks the WHERE on the new row)."""
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
            found = conn.execute("SELECT 1 FROM runs WHERE run_id = %s", (run.run_id,))
            if found.fetchone() is not None:
                raise self._error(codec.ALREADY_HERE, run.run_id)
            if declaration is not None:
                conn.execute(INSERT_DECLARATION, declaration)
            conn.execute(INSERT_RUN, row)
            with conn.cursor() as cursor:
                cursor.executemany(INSERT_EVENT, params)
        self._witness_import(run.run_id)

    def add_control(self, control: Control) -> int:
        """Queue an operator's instruction for a live run (or every run); returns its id."""
        with self._tx(control.run_id) as conn:
            row = conn.execute(
                "INSERT INTO controls (run_id, kind, payload, who, why, at)"
                " VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
                codec.control_params(control),
            ).fetchone()
        return 0 if row is None else int(row[0])

    # --- reads ----------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRow:
        rows = self._rows(f"{SELECT_RUNS} WHERE r.run_id = %s", (run_id,))
        if not rows:
            raise RunNotFound(run_id, path=self.location)
        return codec.run_row(rows[0], self._error)

    def _run_rows(self, sql: str, params: dict[str, Any]) -> list[RunRow]:
        return [codec.run_row(r, self._error) for r in self._rows(sql, params)]

    @staticmethod
    def _placeholder(name: str) -> str:
        return f"%({name})s"

    def run_summaries(
        self, machine: str | None = None, since: str | None = None
    ) -> list[RunSummary]:
        """One narrow row per run (see `SELECT_SUMMARIES`), by machine then start time."""
        rows = self._tuples(SELECT_SUMMARIES, {"machine": machine, "since": since})
        return [codec.summary(r, self._error) for r in rows]

    def events(self, run_id: str) -> list[Event]:
        self.get_run(run_id)
        return codec.events(self._rows(SELECT_EVENTS, (run_id,)), self._error)

    def last_event(self, run_id: str) -> Event:
        rows = self._rows(f"{SELECT_EVENTS} DESC LIMIT 1", (run_id,))
        if not rows:
            self.get_run(run_id)  # RunNotFound if it is not there
            raise self._error("the run has no events", run_id)
        row = rows[0]
        return codec.event(row, self._error, self._first_row(run_id) if row["seq"] else None)

    def events_between(self, run_id: str, first: int, last: int) -> list[Event]:
        sql = SELECT_EVENTS.replace("ORDER BY seq", "AND seq BETWEEN %s AND %s ORDER BY seq")
        rows = self._rows(sql, (run_id, first, last))
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
        sql = "SELECT * FROM events WHERE run_id = %s AND seq = 0"
        rows = self._rows(sql, (run_id,))
        return rows[0] if rows else None

    def chain(self, run_id: str) -> tuple[RunRow, list[ChainLink], str | None]:
        """A run's row, its events as stored (column text, not decoded) with their hashes,
        and its head hash: what `fsm_agent.journal.chain.verify_chain` checks."""
        run = self.get_run(run_id)
        with self._tx(run_id, "read") as conn:
            head = conn.execute(SELECT_HEAD, {"run_id": run_id})
            head_hash = (head.fetchone() or (None,))[0]
            rows = conn.execute(SELECT_CHAIN, (run_id,)).fetchall()
        return run, [codec.chain_link(r) for r in rows], head_hash

    def run_ids(self) -> list[str]:
        """Every run id in the journal, oldest first."""
        return [
            r[0] for r in self._tuples("SELECT run_id FROM runs ORDER BY started_at, run_id", ())
        ]

    def control_version(self) -> None:
        """None: PostgreSQL has no cheap "changed since" token, so a run reads its controls
        before every model call."""
        return None

    def controls(self, run_id: str, after: int = 0) -> list[Control]:
        """The instructions for `run_id`, and those for every run, queued after control
        `after`, oldest first (one indexed read before each model call)."""
        rows = self._rows(
            "SELECT * FROM controls WHERE (run_id = %s OR run_id IS NULL) AND id > %s ORDER BY id",
            (run_id, after),
        )
        return [codec.control(r, self._error) for r in rows]
