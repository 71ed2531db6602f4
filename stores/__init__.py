"""Journal backends behind the `fsm_agent.journal.Store` protocol.

`stores.sqlite` is the embedded default (one file, no server); `stores.postgres` is one
journal for many workers on many hosts. `open_store` picks one from a `--db` value; each
backend is imported only when it is opened, so `import fsm_agent` and the SQLite path never
import psycopg.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fsm_agent.journal import Store

#: The URL schemes that select the PostgreSQL store.
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
#: libpq's keyword form (`host=db dbname=agents user=fsm`) selects it too: a location that
#: starts with one of libpq's connection keywords and `=`. Anything else is a SQLite file.
_KEYWORD_DSN = re.compile(
    r"\s*(?:host|hostaddr|port|dbname|user|password|passfile|service|sslmode|options"
    r"|connect_timeout|application_name|target_session_attrs)\s*=",
    re.IGNORECASE,
)


def is_dsn(location: str | os.PathLike[str]) -> bool:
    """Whether `location` names a PostgreSQL server (a `postgresql://` URL or libpq's
    `key=value` form), not a file."""
    if not isinstance(location, str):
        return False
    return location.lower().startswith(POSTGRES_SCHEMES) or bool(_KEYWORD_DSN.match(location))


_SECRETS = ("password", "sslpassword")


def redact_dsn(dsn: str) -> str:
    """`dsn` without its passwords (a URL's `user:password@`, `password` and `sslpassword`
    parameters, or keys): what the journal's location shows in messages and records."""
    if not dsn.lower().startswith(POSTGRES_SCHEMES):  # libpq's keyword form, or a file
        return re.sub(r"(?i)\b(?:ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'|\S*)\s*", "", dsn).strip()
    parts = urllib.parse.urlsplit(dsn)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, hosts = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}@{hosts}"
    query = "&".join(
        p for p in parts.query.split("&") if p and p.split("=", 1)[0].lower() not in _SECRETS
    )
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def open_store(location: str | os.PathLike[str], *, read_only: bool = False) -> Store:
    """The journal at `location`: a `postgresql://` (or `postgres://`) DSN, or libpq's
    `host=… dbname=…` form, opens `PostgresStore`; anything else is the path of a SQLite
    file (`SqliteStore`, created if need be). `read_only`: for a command that only reads —
    nothing is created, migrated or written. Raises `JournalError` naming the location
    when it cannot be opened, `NotAJournal` for another application's database."""
    if is_dsn(location):
        try:
            from stores.postgres import PostgresStore
        except ModuleNotFoundError as exc:
            if not (exc.name or "").startswith("psycopg"):
                raise
            from fsm_agent.errors import JournalError

            raise JournalError(
                "a PostgreSQL journal needs psycopg 3: pip install 'fsm-agent[postgres]'",
                path=redact_dsn(str(location)),
            ) from exc
        return PostgresStore(str(location), read_only=read_only)
    from stores.sqlite import SqliteStore

    return SqliteStore(location, read_only=read_only)
