"""The PostgreSQL store's run queue: jobs submitted, leased (`FOR UPDATE SKIP LOCKED`, the
server's clock deciding), renewed, released and dequeued, each one statement
(`fsm_agent.stores.postgres_schema`)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal

from psycopg.rows import dict_row

from fsm_agent.stores import codec
from fsm_agent.stores.postgres_schema import (
    DEQUEUE_JOB,
    INSERT_JOB,
    JOB_COUNTS,
    LEASE_JOB,
    RELEASE_JOB,
    RENEW_LEASE,
    SELECT_JOBS,
)

if TYPE_CHECKING:
    import psycopg

    from fsm_agent.errors import JournalError
    from fsm_agent.journal.store import Job, JobStatus


class PostgresQueue:
    """The queue half of `PostgresStore` (mixed into it)."""

    if TYPE_CHECKING:  # what the store gives

        def _tx(
            self, run_id: str | None, verb: Any = "write", *, atomic: bool = True
        ) -> AbstractContextManager[psycopg.Connection[Any]]: ...
        def _error(self, message: str, run_id: str | None = None) -> JournalError: ...
        def _rows(self, sql: str, params: Any) -> list[dict[str, Any]]: ...
        def _tuples(self, sql: str, params: Any) -> list[tuple[Any, ...]]: ...

    def enqueue(self, job: Job) -> None:
        """Add a job; refuse a run id already queued or journaled."""
        with self._tx(job.run_id) as conn:
            journaled = conn.execute("SELECT 1 FROM runs WHERE run_id = %s", (job.run_id,))
            inserted = (
                journaled.fetchone() is None
                and conn.execute(INSERT_JOB, codec.job_params(job)).rowcount == 1
            )
        if not inserted:
            raise self._error(codec.RUN_ID_USED, job.run_id)

    def lease_job(self, owner: str, lease_s: float) -> Job | None:
        """Take the oldest job that is queued or whose lease expired (`FOR UPDATE SKIP
        LOCKED`: two workers never take the same row); the server's clock decides."""
        with self._tx(None) as conn:
            cursor = conn.cursor(row_factory=dict_row)
            row = cursor.execute(LEASE_JOB, (owner, float(lease_s))).fetchone()
        return None if row is None else codec.job(row, self._error)

    def renew_lease(self, run_id: str, owner: str, lease_s: float) -> bool:
        with self._tx(run_id) as conn:
            return conn.execute(RENEW_LEASE, (float(lease_s), run_id, owner)).rowcount == 1

    def release_job(self, run_id: str, owner: str, status: Literal["queued", "done"]) -> bool:
        if status not in ("queued", "done"):
            raise self._error(f"cannot release a job as {status!r}", run_id)
        with self._tx(run_id) as conn:
            params = {"status": status, "run_id": run_id, "owner": owner}
            return conn.execute(RELEASE_JOB, params).rowcount == 1

    def dequeue_job(self, run_id: str, note: str) -> JobStatus | None:
        with self._tx(run_id) as conn:
            row = conn.execute(DEQUEUE_JOB, {"run_id": run_id, "note": note}).fetchone()
        return None if row is None else row[0]

    def jobs(self, status: JobStatus | None = None, limit: int | None = None) -> list[Job]:
        rows = self._rows(SELECT_JOBS, {"status": status, "limit": limit})  # NULL: no limit
        return [codec.job(r, self._error) for r in rows]

    def job_counts(self) -> dict[JobStatus, int]:
        return dict(self._tuples(JOB_COUNTS, ()))

    def job(self, run_id: str) -> Job | None:
        rows = self._rows("SELECT * FROM queue WHERE run_id = %s", (run_id,))
        return codec.job(rows[0], self._error) if rows else None
