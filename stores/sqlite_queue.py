"""The SQLite store's run queue: jobs submitted, leased, renewed, released and dequeued, each
one statement (`fsm_agent.stores.sqlite_schema`), a lease taken under BEGIN IMMEDIATE so no
two workers hold one job."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from fsm_agent.stores import codec
from fsm_agent.stores import sqlite_schema as queue_sql

if TYPE_CHECKING:
    from fsm_agent.errors import JournalError
    from fsm_agent.journal.store import Job, JobStatus

T = TypeVar("T")


class SqliteQueue:
    """The queue half of `SqliteStore` (mixed into it)."""

    if TYPE_CHECKING:  # what the store gives

        def _tx(
            self, run_id: str | None, *, atomic: bool = True
        ) -> AbstractContextManager[sqlite3.Connection]: ...
        def _locked(self, statement: Callable[[], T], run_id: str | None) -> T: ...
        def _error(self, message: str, run_id: str | None = None) -> JournalError: ...
        def _tuples(self, sql: str, params: Any) -> list[tuple[Any, ...]]: ...

    def enqueue(self, job: Job) -> None:
        with self._tx(job.run_id) as conn:
            if conn.execute(queue_sql.JOB_OR_RUN, {"id": job.run_id}).fetchone():
                raise self._error(codec.RUN_ID_USED, job.run_id)
            conn.execute(queue_sql.INSERT_JOB, codec.job_params(job))

    def lease_job(self, owner: str, lease_s: float) -> Job | None:
        """One statement under BEGIN IMMEDIATE: no two workers take a job while it is leased."""
        now = time.time()
        with self._tx(None) as conn:
            params = {"owner": owner, "now": now, "until": now + lease_s}
            taken = conn.execute(queue_sql.LEASE_JOB, params).fetchall()
        return self._jobs(taken)[0] if taken else None

    def renew_lease(self, run_id: str, owner: str, lease_s: float) -> bool:
        until = time.time() + lease_s
        return self._queue_write(queue_sql.RENEW_LEASE, run_id, owner, until=until)

    def release_job(self, run_id: str, owner: str, status: Literal["queued", "done"]) -> bool:
        return self._queue_write(queue_sql.RELEASE_JOB, run_id, owner, status=status)

    def dequeue_job(self, run_id: str, note: str) -> JobStatus | None:
        params = {"run_id": run_id, "note": note, "now": time.time()}
        with self._tx(run_id) as conn:
            row = conn.execute(queue_sql.DEQUEUE_JOB, params).fetchone()
        return None if row is None else row[0]

    def jobs(self, status: JobStatus | None = None, limit: int | None = None) -> list[Job]:
        return self._jobs(self._tuples(*queue_sql.select_jobs(status, limit)))

    def job_counts(self) -> dict[JobStatus, int]:
        return dict(self._tuples(queue_sql.JOB_COUNTS, ()))

    def job(self, run_id: str) -> Job | None:
        found = self._jobs(self._tuples(*queue_sql.select_job(run_id)))
        return found[0] if found else None

    def _queue_write(self, sql: str, run_id: str, owner: str, **params: Any) -> bool:
        params |= {"run_id": run_id, "owner": owner}
        with self._tx(run_id, atomic=False) as conn:
            return self._locked(lambda: conn.execute(sql, params), run_id).rowcount == 1

    def _jobs(self, rows: list[tuple[Any, ...]]) -> list[Job]:
        return [codec.job(dict(zip(codec.JOB_COLUMNS, r, strict=True)), self._error) for r in rows]
