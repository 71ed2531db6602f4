"""The worker loop: drives a declared machine until exactly one named halt.

The loop performs the current state's action (data plane), takes a clock reading, checks
the meters, and asks the compiled machine which transition the guards allow (control
plane). Every transition is committed to the journal before the next model, tool, judge,
repair or user-action call (a read's result and the receipts check after it share one
commit: `fsm_agent.runtime.journaling`); the halt record is written atomically on every way out,
signals included. The loop runs on a
driver thread, the caller's thread supervising it (`fsm_agent.runtime.driver`): guards, actions and
`on_transition` run on that thread; a halt the loop raises is journaled in the caller's.
"""

from __future__ import annotations

import os
import signal
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fsm_agent.adapters.models import ModelAdapter
from fsm_agent.declaration.load import load_machine
from fsm_agent.declaration.machine import Decision, compile_machine
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.encoding import refuse_unencodable
from fsm_agent.errors import (
    ContractRefused,
    HaltPathRefused,
    Interrupted,
    InvalidInputError,
    JournalError,
    RunPaused,
)
from fsm_agent.halt import HaltReason
from fsm_agent.journal.store import Control, Event, RunRow, Store
from fsm_agent.outputs import check_run_outputs
from fsm_agent.redaction import Redactor, run_secrets
from fsm_agent.run_ids import check_run_id
from fsm_agent.runtime.actions import Steps, ask_judge, perform, success_possible
from fsm_agent.runtime.budgets import Budgets, make_budgets, tripped_meter
from fsm_agent.runtime.context import Clock, RunContext
from fsm_agent.runtime.contract import allow_list
from fsm_agent.runtime.deadline import error_text
from fsm_agent.runtime.decided import STARTED_BY
from fsm_agent.runtime.driver import supervise
from fsm_agent.runtime.interrupts import InterruptGate, raised_by_user_code
from fsm_agent.runtime.lanes import CONTROL_KEYS, LOCAL, ControlPlane, Lane, halt_lane_refusal
from fsm_agent.runtime.operator import OperatorControls, RoutingFrozen
from fsm_agent.runtime.operator_acts import login_name
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.runtime.resume import Resumption, claim_run, load_resumable, restore_context
from fsm_agent.runtime.snapshot import Snapshot, entering
from fsm_agent.runtime.tools import ToolRegistry, check_tools
from fsm_agent.runtime.verdict import decision_note


def open_store(store: Store | str | os.PathLike[str]) -> tuple[Store, bool]:
    if isinstance(store, str | os.PathLike):
        from fsm_agent.stores import open_store  # a SQLite path or a postgresql:// DSN

        return open_store(store), True
    return store, False


def run(
    machine: MachineSpec | str,
    *,
    task: str,
    model: ModelAdapter,
    tools: ToolRegistry | None = None,
    store: Store | str | os.PathLike[str],
    budgets: Mapping[str, int | float | None] | None = None,
    record_path: str | os.PathLike[str] | None = None,
    halt_lane: Lane = LOCAL,
    control: ControlPlane | None = None,
    thrash_limit: int | None = None,
    clock: Clock = time.monotonic,
    on_transition: Callable[[Event], None] | None = None,
    handle_signals: bool = True,
    run_id: str | None = None,
    trace_copy: str | os.PathLike[str] | None = None,
    repair: Callable[[Any], Any] | None = None,
    judge: Callable[[Snapshot], Any] | None = None,
    secret_env: Sequence[str] = (),
    allow: Sequence[str] | None = None,
) -> HaltRecord:
    """Run `task` on a declared machine until it halts; return the halt record.

    Budgets are the machine's defaults with `budgets` overrides applied, frozen at start.
    `store` is the journal: a `Store`, a SQLite file path or a PostgreSQL DSN; it has no
    default (the CLI's `--db` defaults to `./fsm-agent.db`). The record is stored in the
    journal, and written to `record_path` when one is given (a library call writes no file
    it was not asked for; the CLI's `--record` defaults to `./halt-contract.json`). Raises
    `InvalidInputError` for bad input before anything runs, and `JournalError` if the
    journal cannot be written (after writing the record file). With `trace_copy`, a run file
    of the whole run is written there before the run may halt; if that fails, a run that
    would have completed ends `internal_error` instead (it is never reported as done).
    `repair` is a schema-repair voter (raw reply -> rewritten reply, with a `lane`): only a
    local one may vote; one on any other lane makes an invalid reply a hard `schema_fail`.
    `judge` (Snapshot -> bool, with a `lane`) is a second opinion asked before a success:
    it can veto one, never make one; a judge on a free lane has no vote.
    `secret_env` names environment variables whose values are redacted (`[redacted:NAME]`)
    from the task, every reply and every tool outcome before anything is journaled, as the
    `openai:` lane's API key always is (see `fsm_agent.redaction`).
    `allow` narrows the declaration's `tools:` to these names, or, for a declaration that
    lists no tools, is the run's whole allow-list (without it, no tool may run, and
    registering tools for such a run is an `InvalidInputError` before it starts).
    """
    check_run_outputs(store, record_path, trace_copy)  # before the run: never the journal
    ctx, rid = new_context(
        machine, task=task, model=model, tools=tools, budgets=budgets, halt_lane=halt_lane,
        control=control, thrash_limit=thrash_limit, clock=clock, run_id=run_id, repair=repair,
        judge=judge, secret_env=secret_env, allow=allow,
    )  # fmt: skip
    opened, owned = open_store(store)
    try:
        worker = Worker(
            ctx,
            opened,
            rid,
            None if record_path is None else Path(record_path),
            on_transition,
            handle_signals,
            None if trace_copy is None else Path(trace_copy),
        )
        return worker.execute()
    finally:
        if owned:
            opened.close()


def new_context(
    machine: MachineSpec | str,
    *,
    task: str,
    model: ModelAdapter,
    tools: ToolRegistry | None = None,
    budgets: Mapping[str, int | float | None] | None = None,
    halt_lane: Lane = LOCAL,
    control: ControlPlane | None = None,
    thrash_limit: int | None = None,
    clock: Clock = time.monotonic,
    run_id: str | None = None,
    repair: Callable[[Any], Any] | None = None,
    judge: Callable[[Snapshot], Any] | None = None,
    secret_env: Sequence[str] = (),
    allow: Sequence[str] | None = None,
    secrets: Redactor | None = None,
) -> tuple[RunContext, str]:
    """A new run's context and id, every input checked (`InvalidInputError` before anything
    runs): what `run` starts, and what a durable workflow starts (`fsm_agent.temporal`).
    `secrets`: what the run redacts, already read (a workflow's, read once when its worker
    started: workflow code never reads the environment); default: read now from
    `secret_env` and the model's own key."""
    spec = load_machine(machine) if isinstance(machine, str) else machine
    if not isinstance(task, str) or not task.strip():
        raise InvalidInputError("task must be a non-empty string")
    refuse_unencodable("the task", task)
    if secrets is None:
        secrets = run_secrets(secret_env, model)
    rid = uuid.uuid4().hex[:12] if run_id is None else check_run_id(run_id, where="run_id")
    frozen = make_budgets(spec.budgets, budgets)
    declared_policy = spec.policy_path()
    if control is None and declared_policy is not None:
        from fsm_agent.declaration.policy import load_policy

        control = load_policy(declared_policy).control_plane_for_runtime()
    if thrash_limit is not None and (isinstance(thrash_limit, bool) or thrash_limit < 0):
        raise InvalidInputError(f"thrash_limit must be >= 0 (0 = off), got {thrash_limit!r}")
    registry = tools if tools is not None else ToolRegistry()
    allowlist = allow_list(spec.tools, registry.names(), allow)
    check_tools(registry, allowlist)  # an annotation no schema can be made of: before the run
    plane = control or ControlPlane()
    ctx = RunContext(
        spec=spec,
        task=secrets.text(task),
        budgets=frozen,
        model=model,
        tools=registry,
        allowlist=allowlist,
        halt_lane=halt_lane,
        control=plane,
        thrash_limit=spec.thrash_limit if thrash_limit is None else thrash_limit,
        clock=clock,
        start=clock(),
        privileged=tuple(t.name for t in registry if t.privileged),
        idempotent=tuple(t.name for t in registry if t.idempotent),
        repeatable=tuple(t.name for t in registry if t.repeatable or t.idempotent),
        approval=tuple(
            t.name
            for t in registry
            if t.approval or (t.privileged and plane.privileged_approval != "none")
        ),
        repeat_asks=spec.continues("approval"),
        repair_voter=repair,
        judge=judge,
        secrets=secrets,
    )
    return ctx, rid


async def arun(machine: MachineSpec | str, **kwargs: Any) -> HaltRecord:
    """`run` for async callers: the loop runs on a worker thread (async adapters are awaited
    there, each call in its own event loop). Signals stay with the caller's process."""
    kwargs["handle_signals"] = False
    import asyncio

    return await asyncio.to_thread(run, machine, **kwargs)


def resume_run(
    run_id: str,
    *,
    model: ModelAdapter,
    tools: ToolRegistry | None = None,
    store: Store | str | os.PathLike[str],
    record_path: str | os.PathLike[str] | None = None,
    clock: Clock = time.monotonic,
    on_transition: Callable[[Event], None] | None = None,
    handle_signals: bool = True,
    trace_copy: str | os.PathLike[str] | None = None,
    repair: Callable[[Any], Any] | None = None,
    judge: Callable[[Snapshot], Any] | None = None,
    secret_env: Sequence[str] = (),
) -> HaltRecord:
    """Continue an interrupted or paused run from its last committed transition; return
    its halt record (see `fsm_agent.runtime.resume` for what is rebuilt and what is refused).

    The declaration, budgets (with any raise journaled), allow-list, halt lane and control
    plane are the run's own, from the journal; `model` and `tools` are given again (they are
    code, not journaled). The wall clock goes on from the last journaled reading: time
    while nothing ran the run is not counted. Raises `InvalidInputError` for a run that has
    halted, may still be running, or whose journal does not verify, and for one another
    process took first (two resumes at once: one wins, the other is refused naming the
    run's holder, pid@host, and has done nothing). `secret_env` as for `run` (give it
    again: what is secret is not journaled).
    """
    secrets = run_secrets(secret_env, model)
    check_run_outputs(store, record_path, trace_copy)
    opened, owned = open_store(store)
    try:
        row, spec, events, head = load_resumable(opened, run_id)
        ctx = restore_context(
            spec,
            row,
            events,
            model=model,
            tools=tools if tools is not None else ToolRegistry(),
            clock=clock,
            repair=repair,
            judge=judge,
        )
        ctx.secrets = secrets
        worker = Worker(
            ctx,
            opened,
            run_id,
            None if record_path is None else Path(record_path),
            on_transition,
            handle_signals,
            None if trace_copy is None else Path(trace_copy),
        )
        worker.take_over(row, events, head)
        claim_run(opened, row, head)  # one driver per run
        worker.claimed = True
        return worker.execute()
    finally:
        if owned:
            opened.close()


def started_by() -> str:
    """`started by <login name>`: journaled where a policy needs the approver to differ."""
    return STARTED_BY + login_name()


class Worker(Resumption, OperatorControls):
    def __init__(
        self,
        ctx: RunContext,
        store: Store,
        run_id: str,
        record_path: Path | None,
        on_transition: Callable[[Event], None] | None,
        handle_signals: bool,
        trace_copy: Path | None = None,
        wall: Callable[[], str] | None = None,
    ) -> None:
        if wall is not None:  # before anything reads it (the run's start time, below)
            self.wall = wall
        self.ctx, self.store, self.run_id = ctx, store, run_id
        self.spec = ctx.spec
        self.compiled = compile_machine(ctx.spec)
        self.record_path, self.on_transition = record_path, on_transition
        self.handle_signals = handle_signals
        self.trace_copy = trace_copy
        self.gate = InterruptGate()
        self.state = ctx.spec.initial
        self.seq = 0
        self.started_at = self.wall()
        self.record: HaltRecord | None = None
        self.journaled = False  # True once the run's first event is committed
        self.head: str | None = None  # the run's head hash in the journal
        self.pending: list[Event] = []  # transitions waiting for the next commit
        self.control_seen = 0  # the last operator control applied
        self.frozen_by: Control | None = None  # the freeze in force, if routing is frozen
        self.resuming = False  # True when this worker takes over a run already journaled
        self.last_halt: HaltReason | None = None  # a taken-over run's committed halt

    @property
    def budgets(self) -> Budgets:
        return self.ctx.budgets

    def execute(self) -> HaltRecord:
        with self.gate.installed(self.handle_signals):
            try:
                supervise(self.script(), self.gate, clock=self.ctx.clock)
            except BaseException as exc:
                self.conclude(exc)
        assert self.record is not None  # noqa: S101 - every path of conclude sets it
        return self.record

    def script(self) -> Steps[None]:
        """The run's whole loop as a script (`fsm_agent.runtime.driver`), the events that
        wait committed before each call it yields: whoever drives it (this process's
        supervisor, a durable workflow) makes the calls and hands `conclude` what it raised."""
        return self.flushed(self._loop())

    def conclude(self, exc: BaseException) -> None:
        """What the script raised, turned into the run's one named halt (journaled, the
        record written); re-raised where the caller must see it (a pause, a run not ours
        any more, a journal that failed, a real Ctrl-C)."""
        if isinstance(exc, RunPaused):
            self.store.mark_run(self.run_id, "paused", None, None)
            raise exc
        if isinstance(exc, Interrupted):
            if self.gate.taken_over:  # its callback still runs on the fenced driver
                self.on_transition = None
            self._force(HaltReason.INTERRUPTED, "signal", str(exc), signum=exc.signum)
        elif isinstance(exc, JournalError):
            self._journal_failed(exc)
            raise exc
        elif isinstance(exc, ContractRefused):
            self._force(HaltReason(exc.reason), "refused", str(exc))
        elif isinstance(exc, HaltPathRefused):
            self._force(HaltReason.HALT_PATH_REFUSED, "refused", str(exc))
        elif isinstance(exc, RoutingFrozen):
            self._force(HaltReason.ROUTING_FROZEN, "routing_frozen", str(exc))
        elif isinstance(exc, Exception):
            self._force(HaltReason.INTERNAL_ERROR, "error", f"{type(exc).__name__}: {exc}")
        elif not raised_by_user_code(exc):  # a real Ctrl-C, for a caller that handles it
            why = "interrupted by signal 2 (KeyboardInterrupt, left to the caller)"
            self._force(HaltReason.INTERRUPTED, "signal", why, signum=int(signal.SIGINT))
            raise exc
        else:  # sys.exit, KeyboardInterrupt … from user code
            self._force(
                HaltReason.INTERNAL_ERROR, "error", f"{error_text(exc)} (raised by user code)"
            )

    def _journal_failed(self, exc: JournalError) -> None:
        self._flush_if_possible()
        committed = (
            f"the journal holds this run up to seq {self.seq}"
            if self.journaled
            else "nothing of this run reached the journal"
        )
        unwritten = self._write_file_only(f"journal write failed: {exc}; {committed}")
        if unwritten is not None:  # no record file says so: the error must
            exc.args = (f"{exc}; and {unwritten}",)

    # --- the loop -------------------------------------------------------------------------

    def _loop(self) -> Steps[None]:
        """The run's loop, driven on a driver thread (`fsm_agent.runtime.driver`): it yields each
        model, tool or user-action call, and is sent how the call ended."""
        self._resume() if self.resuming else self._start()
        while self.record is None:
            yield from self._step()

    def _start(self) -> None:
        # Routing frozen before the run starts applies to it. Caught up before the run exists:
        # an act aimed at it (a pause right after it starts) must stay unseen until applied.
        self._catch_up_routing()
        first = self.ctx.snapshot(self.state, None, self.spec.state(self.state).action)
        check = self.compiled.check_budget(self.state, first)
        row = RunRow(
            run_id=self.run_id,
            machine=self.spec.name,
            machine_sha256=self.spec.sha256,
            machine_text=self.spec.text,
            task=self.ctx.task,
            budgets=self.budgets,
            state=self.state,
            status="running",
            started_at=self.started_at,
            pid=os.getpid(),
            host=socket.gethostname(),
        )
        event = Event(
            run_id=self.run_id,
            seq=0,
            kind="started",
            at_ms=first.clock_ms,
            wall_time=self.started_at,
            source=None,
            dest=self.state,
            trigger=None,
            snapshot=first,
            check=check.guards,
            note=started_by() if first.control.privileged_approval == "by_another" else None,
        )
        with self.gate.critical():
            self.head = self.store.start_run(row, event)
            self.journaled = True
        self._notify(event)
        self._check_lanes()
        if check.transition is not None:
            self._halt_on(check.transition, first, check.guards, None, self._meter(first))

    def _check_lanes(self) -> None:
        for key in sorted(CONTROL_KEYS):
            why = halt_lane_refusal(self.ctx.control, key, self.ctx.halt_lane)
            if why is not None:
                raise HaltPathRefused(why, decision_key=key, lane=self.ctx.halt_lane)

    def _step(self) -> Steps[None]:
        state = self.state
        action = self.spec.state(state).action or ""
        if action == "model":  # before each model call: an operator may have raised a cap
            self._apply_controls(action)
        outcome, facts = yield from perform(self.ctx, state, action)
        snap = self.ctx.snapshot(state, outcome, None)
        if self.ctx.judge is not None and success_possible(self.spec, state, outcome, snap):
            snap = yield from ask_judge(self.ctx, snap)
        budget = self.compiled.check_budget(state, snap)
        if budget.transition is not None:
            self._halt_on(budget.transition, snap, budget.guards, facts, self._meter(snap))
            return
        decision = self.compiled.decide(state, outcome, snap)
        chosen = decision.transition
        refused = decision.refused
        if refused is not None:  # the runtime's contract, whatever the declaration chose
            self._force(refused.reason, outcome, refused.why, snapshot=snap,
                        guards=decision.guards, facts=facts)  # fmt: skip
            return
        if chosen is None:
            self._force(
                HaltReason.NO_TRANSITION,
                outcome,
                f"no transition out of {state!r} on {outcome!r} passed its guards",
                snapshot=snap,
                guards=decision.guards,
                facts=facts,
            )
            return
        note = decision_note(self.ctx, chosen)
        if chosen.retry:
            self.ctx.retries_used += 1
        dest = self.spec.state(chosen.dest)
        if dest.terminal:
            self._halt_on(chosen, snap, decision.guards, facts, chosen.halt, note)
            return
        check, after = self._entering(snap, dest.name, dest.action)
        self._journal(
            self._event(
                chosen.trigger,
                dest.name,
                snap,
                decision.guards,
                check.guards,
                facts,
                retry=chosen.retry,
                note=note,
            )
        )
        if after is not None and check.transition is not None:
            self._halt_on(check.transition, after, check.guards, None, self._meter(after))

    def _entering(
        self, snap: Snapshot, state: str, action: str | None
    ) -> tuple[Decision, Snapshot | None]:
        """The budget check entering `state` after `snap`, and the snapshot it was decided
        on: built only when a budget tripped (None: nothing tripped)."""
        meters = self.ctx.meters
        if tripped_meter(snap.budgets, meters, next_action=action) is None:
            return self.compiled.untripped(state), None
        after = entering(snap, state, action, meters)
        return self.compiled.check_budget(state, after), after

    @staticmethod
    def _meter(snap: Snapshot) -> HaltReason | None:
        return tripped_meter(snap.budgets, snap.meters, next_action=snap.next_action)
