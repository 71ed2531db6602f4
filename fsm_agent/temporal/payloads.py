"""Small histories: every payload larger than `INLINE_MAX` bytes (a prompt, a tool's result,
a batch of journal events) is kept in the journal's database, in `temporal_payloads`, keyed
by its sha256; Temporal's history holds only that key (Temporal's "claim check" pattern, as
a payload codec: it runs in the worker and the client, never in workflow code).

A payload read back is checked against its key: an edited row is refused (the workflow task
fails and Temporal retries it), never decided on. Rows are content-addressed, so writing one
twice is harmless; nothing deletes them (the journal's retention is the operator's).
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import threading
import time
import zlib
from collections.abc import Sequence
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from fsm_agent.errors import JournalError
from fsm_agent.stores.dsn import is_dsn, redact_dsn

#: A payload up to this many bytes stays in the history as it is.
INLINE_MAX = 512
#: How long a payload's write or read is asked again while the database does not answer.
RETRY_S = 30.0
ENCODING = b"binary/fsm-agent-payload-ref"
_TABLE = (
    "CREATE TABLE IF NOT EXISTS temporal_payloads"
    " (sha256 TEXT PRIMARY KEY, size INTEGER NOT NULL, data BYTEA NOT NULL)"
)


class PayloadTable:
    """`temporal_payloads` in the journal at `location` (a SQLite path or a PostgreSQL DSN)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self._lock = threading.Lock()
        self._pg = is_dsn(location)
        self._conn: Any = None

    def _connect(self) -> Any:
        if self._conn is not None:
            return self._conn
        # The journal first: a file (or schema) holding only this table would be another
        # application's database to every fsm-agent command, the workers' included.
        from fsm_agent.stores import open_store

        open_store(self.location).close()
        if self._pg:
            import psycopg

            conn: Any = psycopg.connect(self.location, autocommit=True)
            conn.execute(_TABLE)
        else:
            conn = sqlite3.connect(self.location, timeout=30.0, check_same_thread=False,
                                   isolation_level=None)  # fmt: skip
            conn.execute(_TABLE.replace("BYTEA", "BLOB"))
        self._conn = conn
        return conn

    def _sql(self, text: str) -> str:
        return text.replace("?", "%s") if self._pg else text

    def put(self, key: str, data: bytes) -> None:
        packed = zlib.compress(data, 6)
        sql = self._sql(
            "INSERT INTO temporal_payloads (sha256, size, data) VALUES (?, ?, ?)"
            " ON CONFLICT (sha256) DO NOTHING"
        )
        self._do(lambda c: c.execute(sql, (key, len(data), packed)))

    def get(self, key: str) -> bytes:
        sql = self._sql("SELECT data FROM temporal_payloads WHERE sha256 = ?")
        row = self._do(lambda c: c.execute(sql, (key,)).fetchone())
        if row is None:
            raise JournalError(f"payload {key} is not in the journal's temporal_payloads",
                               path=redact_dsn(self.location))  # fmt: skip
        data = zlib.decompress(bytes(row[0]))
        if hashlib.sha256(data).hexdigest() != key:
            raise JournalError(f"payload {key} was edited: its bytes do not hash to its key",
                               path=redact_dsn(self.location))  # fmt: skip
        return data

    def _do(self, act: Any) -> Any:
        """`act` on the connection; a database that went away (a restart, a failover) is
        connected to again and asked again, for up to `RETRY_S`: a call's result is written
        here the moment the call returns, and a result that cannot be written is a call
        whose outcome the run never learns."""
        give_up = time.monotonic() + RETRY_S
        pause = 0.1
        with self._lock:
            while True:
                try:
                    return act(self._connect())
                except JournalError:
                    raise
                except Exception as exc:
                    self.close()
                    if time.monotonic() + pause > give_up:
                        raise JournalError(f"payload table: {type(exc).__name__}: {exc}",
                                           path=redact_dsn(self.location)) from exc  # fmt: skip
                    time.sleep(pause)
                    pause = min(pause * 2, 2.0)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # closing a connection that already failed
                conn.close()


class ClaimCheck(PayloadCodec):
    """The codec: large payloads into the journal's payload table, their keys into history."""

    def __init__(self, table: PayloadTable) -> None:
        self.table = table

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._encode(p) for p in payloads]

    def _encode(self, payload: Payload) -> Payload:
        if payload.ByteSize() <= INLINE_MAX:
            return payload
        data = payload.SerializeToString()
        key = hashlib.sha256(data).hexdigest()
        self.table.put(key, data)
        return Payload(metadata={"encoding": ENCODING}, data=key.encode())

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._decode(p) for p in payloads]

    def _decode(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        whole = Payload()
        whole.ParseFromString(self.table.get(payload.data.decode()))
        return whole
