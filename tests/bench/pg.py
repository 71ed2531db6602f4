"""A PostgreSQL server for the benchmark's PostgreSQL cases: its DSN (FSM_AGENT_BENCH_PG,
else FSM_AGENT_TEST_PG), why it cannot be measured, and a fresh schema a case journals in."""

from __future__ import annotations

import os
import sys
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.bench.workload import Scratch

PG_ENVS = ("FSM_AGENT_BENCH_PG", "FSM_AGENT_TEST_PG")


def pg_dsn() -> str | None:
    for name in PG_ENVS:
        value = os.environ.get(name)
        if value:
            return value
    return None


def pg_missing(given: str | None = None) -> str | None:
    """Why the PostgreSQL figures cannot be measured here (on `given`, else on the DSN the
    environment names), or None."""
    dsn = given or pg_dsn()
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
def pg_journal(
    scratch: Scratch, given: str | None = None, prefix: str = "fsm_bench"
) -> Iterator[str]:
    """A DSN (on `given`, else the environment's) whose sessions use a fresh schema, dropped
    afterwards on a connection of its own (the server may have been restarted meanwhile:
    other tests on this machine do)."""
    import psycopg
    from psycopg import sql

    dsn = given or pg_dsn()
    if dsn is None:
        raise RuntimeError("no PostgreSQL DSN")
    schema = sql.Identifier(f"{prefix}_{uuid.uuid4().hex[:12]}")
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
        named = schema.as_string(admin)
    try:
        parts = urllib.parse.urlsplit(dsn)
        option = ("options", f"-csearch_path={named}")
        query = urllib.parse.urlencode([*urllib.parse.parse_qsl(parts.query), option])
        yield urllib.parse.urlunsplit(parts._replace(query=query))
    finally:
        _drop(dsn, schema)


def _drop(dsn: str, schema: Any) -> None:
    import psycopg
    from psycopg import sql

    for attempt in range(10):
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as admin:
                admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(schema))
            return
        except psycopg.OperationalError as exc:
            if attempt == 9:
                print(f"could not drop the schema {schema!r}: {exc}", file=sys.stderr)
            time.sleep(1.0)
