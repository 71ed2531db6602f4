"""A PostgreSQL server for the benchmark's PostgreSQL cases: its DSN (FSM_AGENT_BENCH_PG,
else FSM_AGENT_TEST_PG), why it cannot be measured, and a fresh schema a case journals in."""

from __future__ import annotations

import os
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from tests.bench.workload import Scratch

PG_ENVS = ("FSM_AGENT_BENCH_PG", "FSM_AGENT_TEST_PG")


def pg_dsn() -> str | None:
    for name in PG_ENVS:
        value = os.environ.get(name)
        if value:
            return value
    return None


def pg_missing() -> str | None:
    """Why the PostgreSQL figures cannot be measured here, or None."""
    dsn = pg_dsn()
    if dsn is None:
        return f"no DSN ({' or '.join(PG_ENVS)})"
    try:
        import psycopg

        import fsm_agent.stores.postgres  # noqa: F401
    except ImportError as exc:
        return f"no PostgreSQL store ({exc})"
    try:
        psycopg.connect(dsn, connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"no server ({type(exc).__name__})"
    return None


@contextmanager
def pg_journal(scratch: Scratch) -> Iterator[str]:
    """A DSN whose sessions use a fresh schema, dropped afterwards."""
    import psycopg
    from psycopg import sql

    dsn = pg_dsn()
    if dsn is None:
        raise RuntimeError("no PostgreSQL DSN")
    schema = sql.Identifier(f"fsm_bench_{uuid.uuid4().hex[:12]}")
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
        try:
            parts = urllib.parse.urlsplit(dsn)
            option = ("options", f"-csearch_path={schema.as_string(admin)}")
            query = urllib.parse.urlencode([*urllib.parse.parse_qsl(parts.query), option])
            yield urllib.parse.urlunsplit(parts._replace(query=query))
        finally:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(schema))
