"""Opening a journal file: WAL for a process that may write it, read-only for a command
that only reads (and as a fallback for a process that may not write), and the schema check:
a journal from a newer fsm-agent is refused, an older one migrated under the write lock —
never by a read — and a SQLite file of another application is refused, never migrated.

A new journal file is created private (0600): it holds every reply and tool result; SQLite
gives its -wal and -shm files the same mode.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from pathlib import Path
from typing import Literal

from fsm_agent.errors import JournalError, NotAJournal
from fsm_agent.stores.sqlite_schema import (
    INDEX_ONLY,
    KNOWN_MIGRATIONS,
    applied_migrations,
    migrations,
)

#: A new journal file's mode: private (less nothing: the umask does not widen it).
JOURNAL_MODE = 0o600

Synchronous = Literal["NORMAL", "FULL"]


def open_journal(
    path: str, *, synchronous: Synchronous, busy_timeout_ms: int, read_only: bool = False
) -> tuple[sqlite3.Connection, bool]:
    """A connection to the journal at `path`, and whether it is read-only for this process.
    `read_only`: open it only to read — nothing is created, migrated or written, and a
    file with no tables yet reads as an empty journal. Raises `JournalError` naming the file
    when it cannot be used as a journal, `NotAJournal` for another application's database."""
    if read_only:
        if not Path(path).is_file():
            raise NotAJournal("no journal here (run something first, or pass --db PATH)",
                              path=path)  # fmt: skip
        try:
            return _open_query_only(path, busy_timeout_ms), True
        except sqlite3.Error as exc:
            if not may_not_write(exc, path):
                raise _cannot_open(path, exc) from exc
        return _open_read_only(path, busy_timeout_ms, requested=True), True
    _create_private(path)
    try:
        return _open(path, synchronous, busy_timeout_ms), False
    except sqlite3.Error as exc:
        if not (may_not_write(exc, path) and Path(path).is_file()):
            raise _cannot_open(path, exc) from exc
    return _open_read_only(path, busy_timeout_ms), True


def _create_private(path: str) -> None:
    """Create a journal file that is not there yet as an empty private file (SQLite would
    make it 0644); an existing file keeps its mode."""
    if path in ("", ":memory:") or path.startswith("file:"):
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, JOURNAL_MODE)
    except OSError:  # there already, or cannot be made: SQLite says why when it opens it
        return
    os.close(fd)


def may_not_write(exc: sqlite3.Error, path: str) -> bool:
    """SQLite refused because this process may not write the journal at `path` or create
    its -wal and -shm files (SQLite says "unable to open" when a -wal file exists and no
    -shm file can be created beside it)."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    if name.startswith("SQLITE_READONLY"):
        return True
    writable = os.access(path, os.W_OK) and os.access(Path(path).parent, os.W_OK)
    return name.startswith("SQLITE_CANTOPEN") and Path(path).is_file() and not writable


def explain(exc: sqlite3.Error, otherwise: str = "") -> str:
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


def _open(path: str, synchronous: Synchronous, busy_timeout_ms: int) -> sqlite3.Connection:
    """Open the journal for writing (creating it if need be), schema up to date.

    Switching a new file to WAL takes an exclusive lock for which SQLite does not always
    wait (`busy_timeout` is not consulted): when several processes open a new journal at
    once, one may be told "database is locked" at once. That is retried, briefly and
    boundedly (within `busy_timeout_ms` in all), never shown as such."""
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
            conn.execute("PRAGMA foreign_keys = ON")
            refuse_foreign(path, conn)  # before anything is written, the journal mode included
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {'FULL' if synchronous == 'FULL' else 'NORMAL'}")
            _check_schema(path, conn, writable=True)
        except sqlite3.OperationalError as exc:
            conn.close()
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(random.uniform(0.005, 0.05))  # noqa: S311 - jitter, not a secret
            continue
        except BaseException:
            conn.close()
            raise
        return conn


def _open_query_only(path: str, busy_timeout_ms: int) -> sqlite3.Connection:
    """Open an existing journal for a command that only reads: through SQLite's normal
    locking (so a live writer's commits are seen, and the -wal and -shm files are cleaned up
    as usual when the last connection closes), with every write statement refused
    (`query_only`), no change of journal mode and no migration."""
    uri = Path(path).resolve().as_uri()
    conn = sqlite3.connect(f"{uri}?mode=rw", uri=True, isolation_level=None,
                           check_same_thread=False)  # fmt: skip
    try:
        conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        conn.execute("PRAGMA query_only = ON")
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        if not _tables(conn):
            conn.close()
            return _empty_journal()
        _check_schema(path, conn, writable=False, requested=True)
    except BaseException:
        conn.close()
        raise
    return conn


def _open_read_only(
    path: str, busy_timeout_ms: int, *, requested: bool = False
) -> sqlite3.Connection:
    """Open a journal only to read: for a command that only reads (`requested`), or one
    this process may read but not write (a file or directory owned by someone else). Reads
    work; every write fails with an error that says read-only. A file with no tables yet
    (being created by a writer this instant, or empty) reads as an empty journal.

    A WAL journal is read through its -wal and -shm files. When they exist, SQLite reads
    through them read-only. When they do not and cannot be created (a directory this
    process may not write), the last writer checkpointed every commit into the file and
    removed them, so the file alone is the whole journal: SQLite reads it as immutable
    (a snapshot: a writer that starts meanwhile is not seen).
    """
    uri = Path(path).resolve().as_uri()
    conn = None
    try:
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None,
                               check_same_thread=False)  # fmt: skip
        conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        try:
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        except sqlite3.Error as exc:
            if not may_not_write(exc, path):
                raise
            if Path(f"{path}-wal").exists():
                raise JournalError(
                    "the journal is read-only for this process and its write-ahead log"
                    f" {path}-wal cannot be read without write access to the"
                    " directory (for the -shm file); read it as a user who may write the"
                    " directory, or read a copy of both files",
                    path=path,
                ) from exc
            conn.close()
            conn = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True,
                                   isolation_level=None, check_same_thread=False)  # fmt: skip
        if not _tables(conn):
            conn.close()
            return _empty_journal()
        _check_schema(path, conn, writable=False, requested=requested)
    except (sqlite3.Error, JournalError, NotAJournal) as exc:
        if conn is not None:
            conn.close()
        if isinstance(exc, JournalError | NotAJournal):
            raise
        raise _cannot_open(path, exc) from exc
    return conn


def _tables(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        " ORDER BY name"
    ).fetchall()
    return [r[0] for r in rows]


def _empty_journal() -> sqlite3.Connection:
    """An empty journal in memory, read-only: what a file with no tables yet reads as."""
    import sqlite_utils

    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    migrations().apply(sqlite_utils.Database(conn))
    conn.execute("PRAGMA query_only = ON")
    return conn


def _check_schema(
    path: str, conn: sqlite3.Connection, *, writable: bool, requested: bool = False
) -> None:
    """Refuse another application's database and a journal from a newer fsm-agent; bring
    an older one up to date (only when `writable`)."""
    applied = refuse_foreign(path, conn)
    unknown = [name for name in applied if name not in KNOWN_MIGRATIONS]
    if unknown:
        raise JournalError(
            f"written by a newer fsm-agent (migration {unknown[0]!r});"
            " upgrade fsm-agent to read it",
            path=path,
        )
    pending = [name for name in KNOWN_MIGRATIONS if name not in applied]
    if not writable:  # a reader reads a journal without its index-only migrations
        pending = [name for name in pending if name not in INDEX_ONLY]
    if pending and requested and os.access(path, os.W_OK):
        raise JournalError(
            f"written by an older fsm-agent: it needs migration {pending[0]!r}, and"
            " commands that only read never migrate a journal; bring it up to date once with"
            f" `fsm-agent migrate --db {path}`",
            path=path,
        )
    if pending and not writable:
        raise JournalError(
            f"written by an older fsm-agent: it needs migration {pending[0]!r}, and"
            " the journal is read-only for this process; open it once with write access",
            path=path,
        )
    if pending:
        _migrate(conn)


def refuse_foreign(path: str, conn: sqlite3.Connection) -> list[str]:
    """The fsm-agent migrations applied to the database; `NotAJournal` if it has tables and
    none of them are fsm-agent's (another application's database: never touched)."""
    # One read snapshot for both reads: a process migrating a new journal at that moment
    # must not be seen as "no migrations" then "tables" (another application's, wrongly).
    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN")
    try:
        applied = applied_migrations(conn)
        tables = [] if applied else _tables(conn)
    finally:
        if own and conn.in_transaction:
            conn.execute("COMMIT")
    if not applied and tables:
        shown = ", ".join(tables[:5]) + (f" and {len(tables) - 5} more" if len(tables) > 5
                                         else "")  # fmt: skip
        raise NotAJournal(
            f"a SQLite database of another application (tables: {shown}), not an"
            " fsm-agent journal; it was left as it is (pass --db a new file or a journal)",
            path=path,
        )
    return applied


def _cannot_open(path: str, exc: sqlite3.Error) -> JournalError:
    why = explain(exc, "; is it an fsm-agent database?")
    return JournalError(f"cannot open as a journal: {why}", path=path)


def _migrate(conn: sqlite3.Connection) -> None:
    """Apply pending migrations under the write lock: processes opening a new journal at
    once apply each migration exactly once (the others wait, then find nothing to do)."""
    import sqlite_utils

    db = sqlite_utils.Database(conn)
    conn.execute("BEGIN IMMEDIATE")
    try:
        migrations().apply(db)
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
