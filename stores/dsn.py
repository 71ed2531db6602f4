"""Journal locations: which `--db` values name a PostgreSQL server, and how one is shown
without its password. Imports no backend."""

from __future__ import annotations

import os
import re
import urllib.parse

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


_SECRETS = ("password", "sslpassword")
