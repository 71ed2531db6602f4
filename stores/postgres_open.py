"""Opening a PostgreSQL journal: connecting, the schema check (a journal from a newer
fsm-agent is refused, an older or empty one migrated under an advisory lock), and failures
in words a person can act on, never with a password in them.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from fsm_agent.errors import JournalError, NotAJournal
from fsm_agent.stores.postgres_schema import MIGRATIONS, Migration

#: Seconds to wait for the server when the DSN does not say (`connect_timeout`).
CONNECT_TIMEOUT_S = 10


def connect(
    dsn: str, location: str, secrets: tuple[str, ...], *, read_only: bool = False
) -> psycopg.Connection[Any]:
    """A connection (autocommit off) to the journal at `dsn`, its schema up to date. Raises
    `JournalError` naming `location` (the DSN without its password) when there is none.
    `read_only`: nothing is created or migrated (a journal that needs it is refused), and
    the session refuses every write."""

    def error(message: str) -> JournalError:
        return JournalError(scrub(message, secrets), path=location)

    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        raise error(f"not a valid PostgreSQL DSN ({explain(exc)})") from exc
    options: dict[str, Any] = {"autocommit": False}
    if "connect_timeout" not in params:
        options["connect_timeout"] = CONNECT_TIMEOUT_S
    if "application_name" not in params:
        options["application_name"] = "fsm-agent"
    try:
        conn = psycopg.connect(dsn, **options)
    except psycopg.Error as exc:
        raise error(
            f"cannot connect to the server ({server_message(exc)}); is it running, and the DSN"
            " (host, port, database, user) right?"
        ) from exc
    try:
        if read_only:
            check_readable(conn, location)
        else:
            migrate(conn, location)
    except psycopg.Error as exc:
        conn.close()
        raise error(f"cannot open as a journal: {explain(exc)}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def passwords(dsn: str) -> tuple[str, ...]:
    """The secrets in `dsn`, to keep out of every message."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return ()
    return tuple(str(params[k]) for k in ("password", "sslpassword") if params.get(k))


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """`text` with every secret in it replaced."""
    for secret in secrets:
        text = text.replace(secret, "[redacted]")
    return text


def server_message(exc: psycopg.Error) -> str:
    """The server's or driver's own message: its first line only, capped."""
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:200]


def explain(exc: psycopg.Error) -> str:
    """A server or driver failure in words a person can act on, with its own message."""
    said = server_message(exc)
    if isinstance(exc, pg_errors.ReadOnlySqlTransaction):
        return f"the server refused a write ({said}): a read-only server or role"
    if isinstance(exc, pg_errors.DiskFull):
        return f"the server's disk is full ({said})"
    if isinstance(exc, pg_errors.InsufficientPrivilege):
        return f"the role may not do this ({said}); grant it access to the journal's tables"
    if isinstance(exc, pg_errors.UndefinedTable | pg_errors.UndefinedFunction):
        return f"{said}; is this an fsm-agent journal (the right database and search_path)?"
    if isinstance(exc, pg_errors.LockNotAvailable | pg_errors.DeadlockDetected):
        return f"another session held a lock the write needed ({said}); nothing was written"
    if isinstance(exc, psycopg.OperationalError):
        return f"lost the connection to the server ({said})"
    return said


_CREATE_MIGRATIONS = """
    CREATE TABLE IF NOT EXISTS fsm_agent_migrations (
        name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())"""
#: Advisory lock keys: fsm-agent's, and the schema's (journals in other schemas of the same
#: database migrate independently).
_LOCK = "SELECT pg_advisory_xact_lock(1718840673, hashtext(coalesce(current_schema(), '')))"


def migrate(conn: psycopg.Connection[Any], location: str) -> None:
    """Refuse a journal from a newer fsm-agent; bring an older (or a new, empty) one up to
    date. Pending migrations are applied in one transaction under an advisory lock, so
    processes opening a new journal at once apply each exactly once (the others wait, then
    find nothing to do). An up-to-date journal is only read: no lock, no write."""
    with conn.transaction():
        pending = _pending(conn, location, exists_check=True)
        if pending == []:
            return
        if pending is None:
            _refuse_foreign(conn, location)
    with conn.transaction():
        conn.execute(_LOCK)
        conn.execute(_CREATE_MIGRATIONS)
        for migration in _pending(conn, location, exists_check=False) or ():
            for statement in migration.statements:
                conn.execute(statement)
            conn.execute("INSERT INTO fsm_agent_migrations (name) VALUES (%s)", (migration.name,))


def check_readable(conn: psycopg.Connection[Any], location: str) -> None:
    """For a command that only reads: the journal must be there and up to date (nothing is
    migrated); then the session is made read-only."""
    with conn.transaction():
        pending = _pending(conn, location, exists_check=True)
    if pending is None:
        raise NotAJournal(
            "no fsm-agent journal in this database's search path (run something first, or"
            " check the DSN and search_path)",
            path=location,
        )
    pending = [m for m in pending if not m.index_only]  # it reads the same without those
    if pending:
        raise JournalError(
            f"written by an older fsm-agent: it needs migration {pending[0].name!r}, and"
            " commands that only read never migrate a journal; bring it up to date once with"
            " `fsm-agent migrate --db DSN`",
            path=location,
        )
    conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    conn.commit()


#: The tables a journal makes: another application's table by one of these names in a
#: schema with no journal means the schema is someone else's.
_JOURNAL_TABLES = ("runs", "events", "controls", "queue")


def _refuse_foreign(conn: psycopg.Connection[Any], location: str) -> None:
    taken = [
        name
        for name in _JOURNAL_TABLES
        if (row := conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()) is not None
        and row[0] is not None
    ]
    if taken:
        raise NotAJournal(
            f"the schema has tables of another application ({', '.join(taken)}) and no"
            " fsm-agent journal; it was left as it is (give the journal its own schema:"
            " `?options=-csearch_path%3DNAME`)",
            path=location,
        )


def _pending(
    conn: psycopg.Connection[Any], location: str, *, exists_check: bool
) -> list[Migration] | None:
    """The migrations this journal still needs (None: it has no migrations table yet)."""
    if exists_check:
        found = conn.execute("SELECT to_regclass('fsm_agent_migrations')").fetchone()
        if found is None or found[0] is None:
            return None
    applied = [r[0] for r in conn.execute("SELECT name FROM fsm_agent_migrations ORDER BY name")]
    known = {m.name for m in MIGRATIONS}
    unknown = [name for name in applied if name not in known]
    if unknown:
        raise JournalError(
            f"written by a newer fsm-agent (migration {unknown[0]!r});"
            " upgrade fsm-agent to read it",
            path=location,
        )
    return [m for m in MIGRATIONS if m.name not in applied]
