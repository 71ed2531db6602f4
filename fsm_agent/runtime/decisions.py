"""A person's decision on a run that waits in `handoff`, taken and driven on: approve or
deny its frozen call, or answer its question, and the same run goes on from the journal, on
any host (what a decision is and how it is journaled: `fsm_agent.runtime.waiting`).

A wait is bounded by the declaration's `wait_limit_ms`: the first act on a run past it (a
decision, `resume`, or `expire_waits` from a timer) ends the run `wait_expired` instead,
and a decision is refused.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from fsm_agent.adapters.models import ModelAdapter
from fsm_agent.errors import InvalidInputError
from fsm_agent.journal.store import Event, RunRow, Store
from fsm_agent.outputs import check_run_outputs
from fsm_agent.redaction import run_secrets
from fsm_agent.runtime.context import Clock
from fsm_agent.runtime.decided import Act, span
from fsm_agent.runtime.journaling import now_iso
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.runtime.resume import restore_context
from fsm_agent.runtime.run_status import shown_runs
from fsm_agent.runtime.tools import ToolRegistry
from fsm_agent.runtime.waiting import (
    Waiting,
    apply_decision,
    check_decision,
    decided_event,
    expired_event,
    load_waiting,
    reopen,
    signed,
)
from fsm_agent.runtime.worker import Worker, open_store

#: the most waiting runs one `expire_waits` looks at (newest first; run it again for more)
MAX_SWEEP = 10_000


def decide_run(
    run_id: str,
    act: Act,
    *,
    why: str,
    by: str | None = None,
    text: str | None = None,
    call: str | None = None,
    model: ModelAdapter | None,
    tools: ToolRegistry | None = None,
    store: Store | str | os.PathLike[str],
    record_path: str | os.PathLike[str] | None = None,
    clock: Clock = time.monotonic,
    on_transition: Callable[[Event], None] | None = None,
    handle_signals: bool = True,
    trace_copy: str | os.PathLike[str] | None = None,
    secret_env: Sequence[str] = (),
) -> HaltRecord | None:
    """Journal a person's decision on the waiting run `run_id` (`approve`, `deny`, or
    `answer` with `text`; `why` required, `by` the login name by default, `call` the frozen
    call's sha256 or a prefix of at least 8 hex digits, checked when given) and go on with
    the same run until its next stop; its halt record. `model` and `tools` are given again,
    as for `resume_run`; with `model=None` the decision is only journaled and the run waits,
    paused, for `resume_run` (None is returned; a console has no model to go on with).
    Raises `InvalidInputError`, with nothing journaled, for a run that does not wait for
    this decision, a journal that does not verify, a call other than the frozen one, a
    decision no declared edge takes, and a decision another took first; for a wait past
    its limit the run is ended `wait_expired` first (its record written)."""
    decision = signed(act, by, why, text, call)
    secrets = run_secrets(secret_env, model)
    check_run_outputs(store, record_path, trace_copy)
    opened, owned = open_store(store)
    try:
        waiting = load_waiting(opened, run_id)
        check_decision(waiting, decision)
        ctx = restore_context(waiting.spec, waiting.row, waiting.events,
                              model=model if model is not None else _no_model,
                              tools=tools if tools is not None else ToolRegistry(),
                              clock=clock, repair=None, judge=None)  # fmt: skip
        ctx.secrets = secrets
        worker = Worker(ctx, opened, run_id, None if record_path is None else Path(record_path),
                        on_transition, handle_signals,
                        None if trace_copy is None else Path(trace_copy))  # fmt: skip
        now = now_iso()
        if waiting.expired(now):
            _expire(waiting, worker, now)
            raise InvalidInputError(
                f"run {run_id} waited {waiting.waited(now)}, past its wait limit"
                f" ({span(waiting.spec.wait_limit_ms)}): it ended wait_expired (record"
                f" written), and the decision to {act} was not journaled"
            )
        apply_decision(ctx, waiting, decision)
        event, trip = decided_event(waiting, ctx, decision)
        drives = model is not None or trip is not None
        head = reopen(opened, waiting, event, "running" if drives else "paused")
        if not drives:
            return None
        worker.take_over(waiting.row, [*waiting.events, event], head)
        worker.claimed = worker.decided = True
        worker.entry_trip = trip
        return worker.execute()
    finally:
        if owned:
            opened.close()


def _no_model(prompt: object) -> object:
    """The model of a run a decision only journals: it is never asked."""
    raise RuntimeError("no model: this process only journals the decision")


def expire_if_late(
    store: Store, run: RunRow, *, record_path: str | os.PathLike[str] | None = None
) -> HaltRecord | None:
    """End the waiting run `run` `wait_expired` if it has waited past its limit (its new
    record; None while it may still wait): the check `resume` makes of a run that waits."""
    now = now_iso()
    waiting = load_waiting(store, run.run_id)
    if not waiting.expired(now):
        return None
    ctx = restore_context(waiting.spec, waiting.row, waiting.events, model=_no_model,
                          tools=ToolRegistry(), clock=time.monotonic, repair=None,
                          judge=None)  # fmt: skip
    path = None if record_path is None else Path(record_path)
    return _expire(waiting, Worker(ctx, store, run.run_id, path, None, True, None), now)


def expire_waits(store: Store | str | os.PathLike[str]) -> list[HaltRecord]:
    """End every run in `store` that waits for a person's decision past its wait limit
    (`wait_expired`, each record written to the journal); their records. What a timer or
    cron runs, so that a wait nobody answers ends without anyone acting on it."""
    opened, owned = open_store(store)
    try:
        ended = []
        for row in shown_runs(opened, "waiting", MAX_SWEEP):
            try:
                record = expire_if_late(opened, row)
            except InvalidInputError:  # decided, or its journal does not verify: not ours
                continue
            if record is not None:
                ended.append(record)
        return ended
    finally:
        if owned:
            opened.close()


def _expire(waiting: Waiting, worker: Worker, now: str) -> HaltRecord:
    """Journal the wait's expiry and write the run's record (no call is made)."""
    event = expired_event(waiting, worker.ctx, now)
    head = reopen(worker.store, waiting, event)
    worker.take_over(waiting.row, [*waiting.events, event], head)
    worker.claimed = True
    return worker.execute()
