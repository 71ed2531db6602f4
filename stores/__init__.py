"""Journal backends behind the `fsm_agent.journal.store.Store` protocol.

`fsm_agent.stores.sqlite` is the embedded default (one file, no server);
`fsm_agent.stores.postgres` is one
journal for many workers on many hosts. `open_store` picks one from a `--db` value; each
backend is imported only when it is opened, so `import fsm_agent` and the SQLite path never
import psycopg.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from fsm_agent.stores.dsn import is_dsn, redact_dsn

if TYPE_CHECKING:
    from fsm_agent.journal.store import Store


def open_store(location: str | os.PathLike[str], *, read_only: bool = False) -> Store:
    """The journal at `location`: a `postgresql://` (or `postgres://`) DSN, or libpq's
    `host=… dbname=…` form, opens `PostgresStore`; anything else is the path of a SQLite
    file (`SqliteStore`, created if need be). `read_only`: for a command that only reads —
    nothing is created, migrated or written. Raises `JournalError` naming the location
    when it cannot be opened, `NotAJournal` for another application's database."""
    if is_dsn(location):
        try:
            from fsm_agent.stores.postgres import PostgresStore
        except ModuleNotFoundError as exc:
            if not (exc.name or "").startswith("psycopg"):
                raise
            from fsm_agent.errors import JournalError

            raise JournalError(
                "a PostgreSQL journal needs psycopg 3: pip install 'fsm-agent[postgres]'",
                path=redact_dsn(str(location)),
            ) from exc
        return PostgresStore(str(location), read_only=read_only)
    from fsm_agent.stores.sqlite import SqliteStore

    return SqliteStore(location, read_only=read_only)
