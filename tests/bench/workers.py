"""Worker scaling: aggregate journaled transitions per second with 1, 2 and 4 queue worker
processes on one journal — a SQLite file, or a PostgreSQL server when a DSN is given
(FSM_AGENT_BENCH_PG, else FSM_AGENT_TEST_PG).

Each measurement submits the same batch of runs (`tests.bench.queue_stub`: the agent loop,
a stub model and tool that answer at once) to a fresh journal, starts N
`fsm-agent worker --idle-exit` processes at once and waits for them to exit. The figure is
the transitions journaled while all N workers were at work (from the latest first event of
a worker to the earliest last one, as the journal's clock readings say), per second: the
workers' start-up and their staggered finish are not counted, the contention of N writers
on one journal is.
"""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import sys
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from tests.bench.processes import REPO_ROOT
from tests.bench.workload import Scratch

WORKER_COUNTS = (1, 2, 4)
#: Model calls per run: 3 transitions each (the agent loop's tool_call / tool_returned /
#: collected), the last one halting the run `completed`.
STEPS = 10
PG_ENVS = ("FSM_AGENT_BENCH_PG", "FSM_AGENT_TEST_PG")
_GENEROUS_MS = 3_600_000


def metric(backend: str, workers: int) -> str:
    return f"queue {backend}, {workers} worker{'s' if workers > 1 else ''}"


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
def sqlite_journal(scratch: Scratch) -> Iterator[str]:
    path = scratch.fresh("queue.db")
    try:
        yield str(path)
    finally:
        scratch.discard(path)


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


def _submit(location: str, runs: int, steps: int) -> None:
    from fsm_agent.queue.submission import submit
    from fsm_agent.stores import open_store

    store = open_store(location)
    try:
        budgets = {"max_steps": steps, "wall_clock_ms": _GENEROUS_MS,
                   "tool_timeout_ms": _GENEROUS_MS}  # fmt: skip
        for n in range(runs):
            submit(store, "agent_loop", f"bench run {n}", budgets)
    finally:
        store.close()


def _span(location: str, runs: int) -> tuple[int, float]:
    """(transitions, seconds) of the span in which every worker was journaling: from the
    latest first event of a worker to the earliest last one (so the workers' staggered
    start-up and finish are not counted). Checks that every run halted `completed`."""
    from fsm_agent.stores import open_store

    store = open_store(location)
    by_worker: dict[int | None, list[tuple[float, bool]]] = {}
    try:
        ids = store.run_ids()
        for run_id in ids:
            row = store.get_run(run_id)
            if row.halt_reason is None or row.halt_reason.value != "completed":
                raise RuntimeError(f"run {run_id} ended {row.halt_reason} ({row.record})")
            by_worker.setdefault(row.pid, []).extend(
                (datetime.datetime.fromisoformat(e.wall_time).timestamp(), e.kind == "transition")
                for e in store.events(run_id)
            )  # fmt: skip
    finally:
        store.close()
    if len(ids) != runs:
        raise RuntimeError(f"{len(ids)} of {runs} runs in the journal")
    start = max(min(t for t, _ in events) for events in by_worker.values())
    end = min(max(t for t, _ in events) for events in by_worker.values())
    if end - start < 0.1:  # too few runs to overlap (--smoke): the whole span, then
        every = [t for events in by_worker.values() for t, _ in events]
        start, end = min(every), max(every)
    inside = sum(1 for events in by_worker.values() for t, moved in events
                 if moved and start <= t <= end)  # fmt: skip
    return inside, max(end - start, 0.001)


def throughput(location: str, workers: int, runs: int, scratch: Scratch, steps: int) -> float:
    """Transitions per second of `workers` processes draining `runs` runs from one journal."""
    _submit(location, runs, steps)
    records = scratch.fresh("queue-records")
    command = [
        sys.executable, "-m", "fsm_agent", "worker", "--db", location,
        "--tools", "tests.bench.queue_stub", "--allow", "lookup",
        "--model", "python:tests.bench.queue_stub:model",
        "--records", str(records), "--idle-exit",
    ]  # fmt: skip
    logs = [scratch.fresh(f"worker-{n}.log") for n in range(workers)]
    processes = []
    for log in logs:
        with log.open("w", encoding="utf-8") as err:
            processes.append(subprocess.Popen(
                command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=err
            ))  # fmt: skip
    codes = [process.wait(timeout=600) for process in processes]
    failures = [
        f"exit {code}: {log.read_text(encoding='utf-8')[-2000:]}"
        for code, log in zip(codes, logs, strict=True)
        if code != 0
    ]
    scratch.discard(*logs)
    shutil.rmtree(records, ignore_errors=True)
    if failures:
        raise RuntimeError("a queue worker failed: " + "\n".join(failures))
    transitions, seconds = _span(location, runs)
    return transitions / seconds


def scaling(
    backend: str, runs: int, scratch: Scratch, steps: int = STEPS
) -> dict[str, list[float]]:
    """One sample of each worker count on `backend` ("sqlite" or "postgres")."""
    journal = sqlite_journal if backend == "sqlite" else pg_journal
    samples: dict[str, list[float]] = {}
    for workers in WORKER_COUNTS:
        with journal(scratch) as location:
            samples[metric(backend, workers)] = [
                throughput(location, workers, runs, scratch, steps)
            ]
    return samples
