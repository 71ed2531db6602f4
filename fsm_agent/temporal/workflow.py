"""One run as a durable Temporal workflow: the runtime's own loop decides, in workflow code;
every call and every journal write is an activity.

The workflow drives the very script a local run's supervisor drives
(`fsm_agent.runtime.worker.Worker.script`): guards, meters, the compiled decide table, the
contract the runtime enforces and every halt are the same code, deciding on the same facts.
Those decisions are pure functions of what the journal holds, so they replay: the run's
clock is the workflow's (`workflow.time`), its wall time `workflow.now`, and each call's
result reaches the script from the history. Before each call the journal writes the script
queued are committed by one journal activity (`fsm_agent.temporal.port`), so a transition
is in the journal before the next call, as in one process.

Temporal's retries never re-issue a call the runtime would not: a call that may change the
world is one attempt; a lost worker (no heartbeat) or Temporal's own timeout reaches the
script as the call's timeout, with its effect unknown, and the runtime's rules decide. A
call without a side effect (a model, a judge, a declared read) may be asked again after a
lost worker. Journal writes are retried until the journal answers (they are idempotent);
one that conflicts with what the journal holds fails the workflow.

Not sandboxed: the runtime imports nothing nondeterministic into its decisions, and a
sandbox that passes fsm-agent's modules through (as it must, to share them with the
activities) would check nothing of them.
"""

from __future__ import annotations

import asyncio
import datetime
import signal
from collections.abc import Generator
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    TimeoutType,
)
from temporalio.exceptions import TimeoutError as ActivityTimeout

with workflow.unsafe.imports_passed_through():
    import attrs

    from fsm_agent.declaration.load import parse_machine
    from fsm_agent.errors import Interrupted, JournalError, RunPaused
    from fsm_agent.runtime.deadline import Call, CallResult
    from fsm_agent.runtime.resume import restore_context
    from fsm_agent.runtime.worker import Worker, new_context
    from fsm_agent.submission import declared_spec
    from fsm_agent.temporal import port, wire
    from fsm_agent.temporal.activities import (
        CALL,
        HEARTBEAT_S,
        JOURNAL,
        LOAD,
        OPEN,
        Loaded,
        Opened,
        lost,
    )
    from fsm_agent.temporal.setup import WORKFLOW, Submission, current

#: Temporal's own timeout of a call, past the runtime's deadline for it (the runtime's
#: deadline always fires first; Temporal's only catches a worker that stopped answering).
CALL_MARGIN_S = 30.0
JOURNAL_TIMEOUT = datetime.timedelta(seconds=30)
ONCE = RetryPolicy(maximum_attempts=1)
READ_AGAIN = RetryPolicy(maximum_attempts=3)
UNTIL_WRITTEN = RetryPolicy(
    maximum_interval=datetime.timedelta(seconds=5), non_retryable_error_types=["Conflict"]
)


@attrs.frozen
class Outcome:
    """What the workflow returns: the halt record (journal head filled in), or how the run
    stopped without one (`paused`)."""

    record: Any = None
    paused: str | None = None


class _Continue(Exception):
    """The run goes on in a new workflow run (continue-as-new)."""


#: The history length past which a run continues as new (Temporal's hard limit is 51,200
#: events; it suggests continuing at its own threshold too).
CONTINUE_AT = 8_000


def _grown() -> bool:
    info = workflow.info()
    return info.is_continue_as_new_suggested() or info.get_current_history_length() > CONTINUE_AT


def _wall() -> str:
    return workflow.now().astimezone(datetime.UTC).isoformat(timespec="milliseconds")


@workflow.defn(name=WORKFLOW, sandboxed=False)
class RunWorkflow:
    def __init__(self) -> None:
        self.port: port.JournalPort | None = None
        self.worker: Worker | None = None
        #: the workflow was cancelled on Temporal: the run stops as at a SIGTERM
        self.cancelled = False

    @workflow.run
    async def run(self, submitted: bytes) -> bytes:
        given: Submission = wire.loads(submitted)
        worker = await (self._start(given) if given.mode == "start" else self._take_over(given))
        self.worker = worker
        raised = await self._drive(worker.script())
        if isinstance(raised, _Continue):
            workflow.continue_as_new(wire.dumps(attrs.evolve(given, mode="continue")))
        journal = self.port
        assert journal is not None  # noqa: S101 - set by _start or _take_over
        outcome = Outcome()
        if raised is not None:
            try:
                worker.conclude(raised)
            except RunPaused as exc:
                outcome = Outcome(paused=str(exc))
            except JournalError as exc:
                raise ApplicationError(f"run {worker.run_id}: {exc}", non_retryable=True) from None
        failed = await self._flush()
        if failed is not None:
            raise ApplicationError(f"run {worker.run_id}: {failed}", non_retryable=True)
        return wire.dumps(attrs.evolve(outcome, record=port.fix_head(worker.record, journal.head)))

    async def _start(self, given: Submission) -> Worker:
        job, setup = given.job, current()
        opened: Opened = wire.loads(
            await workflow.execute_activity(
                OPEN, wire.dumps(job.run_id), start_to_close_timeout=JOURNAL_TIMEOUT,
                retry_policy=UNTIL_WRITTEN,
            )
        )  # fmt: skip
        self.port = journal = port.JournalPort(job.run_id, opened.location, opened.controls)
        spec = declared_spec(job)
        if spec.policy is not None and given.control is None:
            raise ApplicationError(
                f"run {job.run_id}: its machine declares a halt policy, but it was submitted"
                " without its control plane (start it with fsm_agent.temporal.setup.submission)",
                non_retryable=True,
            )
        ctx, run_id = new_context(
            spec, task=job.task, model=setup.model, tools=setup.tools, control=given.control,
            budgets=attrs.asdict(job.budgets), clock=workflow.time, run_id=job.run_id,
            repair=setup.repair, judge=setup.judge, secrets=setup.secrets,
            allow=setup.allow, halt_lane=given.halt_lane, thrash_limit=given.thrash_limit,
        )  # fmt: skip
        worker = Worker(ctx, journal, run_id, None, None, False, None, _wall)  # type: ignore[arg-type]
        return worker

    async def _take_over(self, given: Submission) -> Worker:
        """The run from its journal: resumed (taken for Temporal), or continued as new."""
        run_id, setup = given.job.run_id, current()
        loaded: Loaded = wire.loads(
            await workflow.execute_activity(
                LOAD, wire.dumps((run_id, given.mode == "resume")),
                start_to_close_timeout=JOURNAL_TIMEOUT, retry_policy=ONCE,
            )
        )  # fmt: skip
        row = loaded.row
        self.port = journal = port.JournalPort(run_id, loaded.location, loaded.controls)
        journal.head = loaded.head
        source = f"{row.machine} (journaled with run {run_id})"
        ctx = restore_context(
            parse_machine(row.machine_text, source=source), row, loaded.events,
            model=setup.model, tools=setup.tools, clock=workflow.time, repair=setup.repair,
            judge=setup.judge,
        )  # fmt: skip
        ctx.secrets = setup.secrets
        worker = Worker(ctx, journal, run_id, None, None, False, None, _wall)  # type: ignore[arg-type]
        worker.take_over(row, loaded.events, loaded.head)
        worker.claimed = True
        worker.continuing = given.mode == "continue"
        return worker

    @workflow.signal(name="control")
    def control(self, control: bytes) -> None:
        """An operator's act, journaled by the command that sent it: applied before the
        run's next model call, as the journal's own controls are."""
        journal = self.port
        if journal is not None:
            journal.flushed(port.Flushed(head=journal.head, controls=(wire.loads(control),)))

    @workflow.query(name="state")
    def state(self) -> dict[str, Any]:
        """The run's live position: state, seq, steps used."""
        worker = self.worker
        if worker is None:
            return {"state": None}
        record = worker.record
        return {
            "state": worker.state,
            "seq": worker.seq,
            "steps_used": worker.ctx.steps_used,
            "halted": None if record is None else record.halt_reason.value,
        }

    async def _drive(self, script: Generator[Call, CallResult, None]) -> BaseException | None:
        """Drive the run's script: each call it yields made by an activity, the journal's
        writes committed before it. Returns what the script raised (None: it ended), or
        `_Continue` when the history has grown enough that the run goes on as new (between
        two calls: everything it did is in the journal, and no call is in flight)."""
        result: CallResult | None = None
        thrown: BaseException | None = None
        while True:
            try:
                call = script.send(result) if thrown is None else script.throw(thrown)  # type: ignore[arg-type]
            except StopIteration:
                return None
            except BaseException as exc:  # the run's own way out: `conclude` names its halt
                return exc
            result, thrown = None, None
            failed = await self._flush()
            if failed is not None:
                return failed
            if self.cancelled:  # the run's SIGTERM, at the call it was about to make
                thrown = Interrupted(int(signal.SIGTERM))
                continue
            if _grown():
                return _Continue()
            try:
                result = await self._call(call)
            except asyncio.CancelledError:  # a cancel on Temporal: SIGTERM, at the call
                self.cancelled = True
                thrown = Interrupted(int(signal.SIGTERM))

    async def _flush(self) -> JournalError | None:
        journal, worker = self.port, self.worker
        assert journal is not None  # noqa: S101 - set by run
        assert worker is not None  # noqa: S101 - set by run
        ops = journal.take()
        if not ops:
            return None
        batch = wire.dumps((journal.run_id, ops, worker.control_seen))
        writing = asyncio.ensure_future(
            workflow.execute_activity(
                JOURNAL, batch, start_to_close_timeout=JOURNAL_TIMEOUT, retry_policy=UNTIL_WRITTEN
            )
        )
        try:
            try:
                answer = await asyncio.shield(writing)
            except asyncio.CancelledError:  # a cancel: what was done is journaled all the same
                self.cancelled = True
                answer = await writing
        except ActivityError as exc:
            why = f"the journal refused a write: {_cause(exc)}"
            return JournalError(why, path=journal.location)
        journal.flushed(wire.loads(answer))
        return None

    async def _call(self, call: Call) -> CallResult:
        journal = self.port
        assert journal is not None  # noqa: S101 - set by run
        request = wire.request_of(journal.run_id, call)
        once = current().side_effect(call.name)
        begun = workflow.time()
        try:
            answer = await workflow.execute_activity(
                CALL,
                wire.dumps(request),
                start_to_close_timeout=datetime.timedelta(
                    seconds=max(call.timeout_s, 0.0) + CALL_MARGIN_S
                ),
                heartbeat_timeout=datetime.timedelta(seconds=HEARTBEAT_S),
                retry_policy=ONCE if once else READ_AGAIN,
            )
        except ActivityError as exc:
            if isinstance(exc.cause, CancelledError):  # the workflow's cancel, not a loss
                raise asyncio.CancelledError from None
            return lost(int((workflow.time() - begun) * 1000), _why_lost(exc.cause))
        result: CallResult = wire.loads(answer)
        return result


def _why_lost(cause: BaseException | None) -> str:
    """What became of a call whose activity failed, in a few words, for its outcome's text."""
    if isinstance(cause, ActivityTimeout):
        if cause.type == TimeoutType.HEARTBEAT:
            return "lost with its worker (no heartbeat)"
        return f"past Temporal's own timeout ({cause.type.name.lower() if cause.type else '?'})"
    return f"its activity failed ({_cause(cause) if cause is not None else 'no cause given'})"


def _cause(exc: BaseException) -> str:
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return str(exc)
