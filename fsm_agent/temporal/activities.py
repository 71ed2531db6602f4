"""The effects of a run on Temporal: each call the run's loop yields, and each journal
write, is an activity of the worker process that serves the run (`fsm_agent.temporal.setup`).

A call is made exactly as in one process (`call_with_deadline`: a daemon thread abandoned at
the deadline, or a child process killed at it), so its result, error or timeout is the one
the runtime's rules already decide on. The activity heartbeats while the call runs: a
worker that dies mid-call is seen within `HEARTBEAT_S`, and the workflow decides what that
means (`fsm_agent.temporal.workflow`), never Temporal's retries.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading
from typing import TYPE_CHECKING, Any

import attrs
from temporalio import activity
from temporalio.exceptions import ApplicationError

from fsm_agent.declaration.refs import BadReference, resolve_callable
from fsm_agent.errors import InvalidInputError, JournalError
from fsm_agent.journal.store import Control, Event, RunRow, Store
from fsm_agent.run_ids import RunNotFound
from fsm_agent.runtime.deadline import CallResult, call_with_deadline
from fsm_agent.runtime.resume import load_resumable
from fsm_agent.runtime.tools import ToolError
from fsm_agent.temporal import port, wire
from fsm_agent.temporal.setup import current

if TYPE_CHECKING:
    from fsm_agent.telemetry.live import LiveTracer

#: How long Temporal waits for a heartbeat before it takes the worker for dead.
HEARTBEAT_S = 10.0
CALL = "fsm-agent-call"
JOURNAL = "fsm-agent-journal"
OPEN = "fsm-agent-open"
LOAD = "fsm-agent-load"
#: The owner a Temporal run's row names: no process of this host (a local `resume` is
#: refused as "owned elsewhere" while Temporal drives it).
OWNER = port.OWNER


@attrs.frozen
class Opened:
    """The journal a run's workflow writes to, as the store names itself, and the controls
    already queued for the run (a routing freeze before it started applies to it)."""

    location: str
    controls: tuple[Any, ...] = ()


@attrs.frozen
class Loaded:
    """A journaled run, for its workflow to take over: its row, events and head (verified),
    and the controls queued for it."""

    row: RunRow
    events: tuple[Event, ...]
    head: str
    location: str
    controls: tuple[Control, ...] = ()


class Activities:
    """The activities, bound to one store opened once per worker process. The store is one
    connection: the journal activities (which run on the worker's thread pool) take turns
    on it (`_journal`), as one process's writers take turns on a SQLite file anyway; the
    calls run on a pool of their own, as many at once as the worker serves
    (`concurrency`), never on the event loop's default pool."""

    def __init__(
        self, store: Store, tracer: LiveTracer | None = None, concurrency: int = 16
    ) -> None:
        self.store = store
        #: `--otel`: each committed event, and each halt record, sent as the local
        #: runtime sends them (a retried write sends them again, under the same span ids)
        self.tracer = tracer
        self._journal = threading.Lock()
        self._calls = concurrent.futures.ThreadPoolExecutor(
            max_workers=concurrency, thread_name_prefix="fsm-agent:call"
        )

    def close(self) -> None:
        self._calls.shutdown(wait=False, cancel_futures=True)

    @activity.defn(name=OPEN)
    def open(self, run_id: bytes) -> bytes:
        with self._journal:
            return self._open(run_id)

    def _open(self, run_id: bytes) -> bytes:
        rid = wire.loads(run_id)
        controls = tuple(self.store.controls(rid, after=0))
        return wire.dumps(Opened(location=self.store.location, controls=controls))

    @activity.defn(name=LOAD)
    def load(self, request: bytes) -> bytes:
        with self._journal:
            return self._load(request)

    def _load(self, request: bytes) -> bytes:
        """The run from its journal (refused unless it verifies and may be resumed); with
        `claim`, taken for Temporal in one compare-and-set (a second taker is refused). The
        row is the one read before the claim: how the run was left (paused, say) is what
        the take-over decides on."""
        run_id, claim = wire.loads(request)
        try:
            ours = not claim or port.owned_by_temporal(self.store.get_run(run_id))
            row, _, events, head = load_resumable(self.store, run_id, lease_held=ours)
            if claim:
                was = (row.status, row.pid, row.host)
                if not self.store.claim_run(run_id, was=was, head=head, pid=0, host=OWNER):
                    raise InvalidInputError(f"run {run_id} was taken first by another process")
        except (InvalidInputError, RunNotFound) as exc:
            raise ApplicationError(str(exc), type="NotResumable", non_retryable=True) from None
        controls = tuple(self.store.controls(run_id, after=0))
        loaded = Loaded(row, tuple(events), head, self.store.location, controls)
        return wire.dumps(loaded)

    @activity.defn(name=JOURNAL)
    def journal(self, batch: bytes) -> bytes:
        with self._journal:
            return self._write(batch)

    def _write(self, batch: bytes) -> bytes:
        run_id, ops, after = wire.loads(batch)
        try:
            flushed = port.apply(self.store, run_id, ops, after)
        except port.Conflict as exc:
            raise ApplicationError(str(exc), type="Conflict", non_retryable=True) from None
        except JournalError as exc:  # the database went away: Temporal asks again
            raise ApplicationError(str(exc), type="JournalUnavailable") from None
        if self.tracer is not None:
            self._trace(ops, flushed.head)
        return wire.dumps(flushed)

    def _trace(self, ops: list[port.Op], head: str | None) -> None:
        tracer = self.tracer
        assert tracer is not None  # noqa: S101 - only called with one
        for op in ops:
            for event in op.events:
                tracer.on_transition(event)
            if op.record is not None:
                tracer.on_halt(attrs.evolve(op.record, journal_head=head))

    @activity.defn(name=CALL)
    async def call(self, request: bytes) -> bytes:
        req: wire.CallRequest = wire.loads(request)
        try:
            fn = _callable(req.name)
        except LookupError as exc:  # this worker cannot make it: not called, said so
            refused = ToolError(f"{exc}; it was not called", retryable=False)
            return wire.dumps(CallResult(status="error", error=refused))
        beating = asyncio.get_running_loop().create_task(_heartbeat())
        try:
            result = await asyncio.get_running_loop().run_in_executor(
                self._calls,
                functools.partial(
                    call_with_deadline,
                    fn,
                    req.args,
                    req.kwargs,
                    timeout_s=req.timeout_s,
                    isolation=req.isolation,
                    name=req.name,
                ),
            )
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
        secrets = current().secrets  # nothing secret reaches Temporal or the payload table
        return wire.dumps(wire.portable_result(wire.redacted_result(result, secrets)))


async def _heartbeat() -> None:
    while True:
        activity.heartbeat()
        await asyncio.sleep(HEARTBEAT_S / 4)


def _callable(name: str) -> Any:
    setup = current()
    kind, _, ref = name.partition(":")
    if name == "model":
        return setup.model
    if name in ("judge", "repair"):
        found = setup.judge if name == "judge" else setup.repair
        if found is None:
            raise LookupError(f"this worker has no {name}")
        return found
    if kind == "tool":
        tool = setup.tools.get(ref)
        if tool is None:
            raise LookupError(f"this worker has no tool {ref!r}")
        return tool.fn
    if kind == "action":
        try:
            return resolve_callable(ref)
        except BadReference as exc:
            raise LookupError(f"this worker cannot load the action {ref!r}: {exc}") from None
    raise LookupError(f"no such call {name!r}")


def lost(elapsed_ms: int, why: str) -> CallResult:
    """A call whose activity failed (its worker lost, Temporal's own timeout, its result not
    delivered): no result, its effect unknown — a timeout the runtime's rules decide on.
    `why` says which, in the outcome's text."""
    return CallResult(status="timeout", elapsed_ms=elapsed_ms, fate=why)
