"""Resume: a new process continues an interrupted or paused run from its last committed
transition, with the same frozen budgets, declaration, allow-list and control plane.

Everything the loop needs is rebuilt from the journal alone: the meters and the last
proposal and tool outcome from the newest snapshot, the model's history and the record's
tool calls from the journaled facts (through the same note builders the live loop uses).

A tool call that was issued but has no journaled receipt is a side effect of unknown
outcome. Resume re-issues it only when the tool is declared idempotent — with the same
arguments, so with the same idempotency key — and otherwise ends the run in `handoff`
(`side_effect_unknown`), never re-issuing it silently. A user action cut off the same way
is unknown too.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fsm_agent.adapters.models import ModelAdapter
from fsm_agent.declaration.load import parse_machine
from fsm_agent.declaration.spec import MachineSpec, TransitionSpec
from fsm_agent.errors import InvalidInputError
from fsm_agent.halt import HaltReason
from fsm_agent.journal.chain import verify_chain
from fsm_agent.journal.store import Control, Event, GuardResult, RunRow, Store
from fsm_agent.journal.witness import NO_WITNESS, Witness, read_log
from fsm_agent.runtime.actions import (
    call_entry,
    failure_note,
    has_side_effect,
    proposal_note,
    receipts_note,
)
from fsm_agent.runtime.context import Clock, RunContext
from fsm_agent.runtime.contract import may_reissue
from fsm_agent.runtime.decided import decision_note, decision_of
from fsm_agent.runtime.halting import Halting
from fsm_agent.runtime.proposals import ToolCall
from fsm_agent.runtime.run_status import liveness, waiting_for
from fsm_agent.runtime.snapshot import SUCCESS_RULES, Snapshot
from fsm_agent.runtime.tools import ToolRegistry, check_tools

#: A budget edge that tripped on entering a state: the edge, the snapshot it tripped on, and
#: its guard results.
EntryTrip = tuple[TransitionSpec, Snapshot, tuple[GuardResult, ...]]


def check_resumable(run: RunRow, *, lease_held: bool = False) -> None:
    """Refuse a run that has halted, or whose process may still be running it (unless the
    caller holds the run by other means: Temporal runs one workflow per run id, so the
    workflow that takes a run Temporal owned is its only driver)."""
    if run.status == "halted":
        reason = run.halt_reason.value if run.halt_reason else "?"
        awaits = waiting_for(run)
        if awaits is not None:
            how = (
                f"fsm-agent approve {run.run_id} --why … (or deny)"
                if awaits == "approval"
                else f"fsm-agent answer {run.run_id} --text … --why …"
            )
            raise InvalidInputError(
                f"run {run.run_id} waits for a person's {awaits} ({reason}); it goes on when"
                f" someone decides: {how}"
            )
        raise InvalidInputError(
            f"run {run.run_id} has already halted ({reason}); nothing to resume"
        )
    if run.status == "paused" or lease_held:
        return
    where = liveness(run)
    if where == "live":
        raise InvalidInputError(
            f"run {run.run_id} is still running, held by {holder(run)} (this host); pause it"
            f" first with `fsm-agent pause {run.run_id}`, or wait for it"
        )
    if where == "elsewhere":
        raise InvalidInputError(
            f"run {run.run_id} is owned by a process on host {run.host!r}; this host cannot tell"
            " whether it is still running: resume it there"
        )


def holder(run: RunRow) -> str:
    """Who owns a live run, as `pid N@host` (`no process` for a paused one)."""
    return "no process" if run.pid is None else f"pid {run.pid}@{run.host or '?'}"


def claim_run(store: Store, run: RunRow, head: str) -> None:
    """Take the run for this process, exclusively: its row becomes `running` under this
    pid and host only if nobody changed it since `run` and `head` were read and checked (one
    compare-and-set in the journal). Of two resumes of one run, the second is refused, naming
    the run's holder; it has written nothing."""
    was = (run.status, run.pid, run.host)
    if store.claim_run(run.run_id, was=was, head=head, pid=os.getpid(), host=socket.gethostname()):
        return
    now = store.get_run(run.run_id)
    if now.status == "halted":
        check_resumable(now)  # says how it halted
    hint = f": wait for it, or pause it with `fsm-agent pause {run.run_id}`"
    raise InvalidInputError(
        f"run {run.run_id} was taken first by another process, held by {holder(now)} (now"
        f" {now.status}); this one has done nothing" + (hint if now.status == "running" else "")
    )


def load_resumable(
    store: Store, run_id: str, *, lease_held: bool = False
) -> tuple[RunRow, MachineSpec, list[Event], str]:
    """The run, its declaration (as frozen at start), its events and its head hash; refuses
    a run that cannot be resumed or whose hash chain does not verify."""
    run = store.get_run(run_id)
    check_resumable(run, lease_held=lease_held)
    spec, events, head = verified(store, run)
    return run, spec, events, head


def verified(store: Store, run: RunRow) -> tuple[MachineSpec, list[Event], str]:
    """The run's declaration (as frozen at start), its events and its head hash, refused
    (`InvalidInputError`, nothing written) when its hash chain does not verify: a run is
    continued only from a journal that proves itself."""
    run_id = run.run_id
    witness = _own_witness(store, run_id)
    chained_run, links, head = store.chain(run_id)
    # the events, and the declaration it is resumed with against its sha256 (`machine_edited`),
    # and against what this store's witness saw (a halted run reopened is not run again)
    report = verify_chain(chained_run, links, head, key=store.chain_key, witness=witness)
    if not report.intact or head is None:
        first = report.findings[0] if report.findings else None
        why = f"seq {first.seq}: {first.detail}" if first else (report.notes or ["no head hash"])[0]
        raise InvalidInputError(
            f"run {run_id}: its journal does not verify ({why}); it is not resumed"
            f" (see `fsm-agent verify {run_id}`)"
        )
    spec = parse_machine(run.machine_text, source=f"{run.machine} (journaled with run {run_id})")
    return spec, store.events(run_id), head


def _own_witness(store: Store, run_id: str) -> Witness:
    """What the witness this store appends to saw of the run (none: no witness)."""
    writer = getattr(store, "witness", None)
    if writer is None:
        return NO_WITNESS
    return read_log([writer.path], store.chain_key, run_id=run_id, missing_ok=True)


def restore_context(
    spec: MachineSpec,
    run: RunRow,
    events: Sequence[Event],
    *,
    model: ModelAdapter,
    tools: ToolRegistry,
    clock: Clock,
    repair: Callable[[Any], Any] | None,
    judge: Callable[[Snapshot], Any] | None,
) -> RunContext:
    """The run's context as it was after its last committed event."""
    last = events[-1]
    snap = last.snapshot
    if snap.rules < 2:  # its journal cannot say which calls had side effects
        raise InvalidInputError(
            f"run {run.run_id} was recorded under success rules {snap.rules}, before this"
            f" version (rules {SUCCESS_RULES}) learned which calls have side effects; it is"
            " not resumed: check its last tool call by hand, then start the task again"
        )
    check_tools(tools, snap.allowlist)  # before the run is taken: see `run`
    ctx = RunContext(
        spec=spec,
        task=run.task,
        budgets=snap.budgets,
        model=model,
        tools=tools,
        allowlist=snap.allowlist,
        halt_lane=snap.halt_lane,
        control=snap.control,
        thrash_limit=snap.thrash_limit,
        clock=clock,
        start=clock() - snap.clock_ms / 1000,
        privileged=snap.privileged,
        idempotent=snap.idempotent,
        repeatable=snap.repeatable,
        approval=snap.approval,
        approved=snap.approved,
        repeat_asks=snap.repeat_asks,
        effects=snap.effects,
        effects_omitted=snap.effects_omitted,
        repair_voter=repair,
        judge=judge,
        steps_used=snap.meters.steps_used,
        retries_used=snap.meters.retries_used + int(last.retry),
        cost=snap.meters.cost,
        elapsed_ms=snap.clock_ms,
        proposal=snap.proposal,
        tool=snap.tool,
        evidence=snap.evidence,
        rules=snap.rules,
        unreceipted=snap.unreceipted,
        unreceipted_omitted=snap.unreceipted_omitted,
        receipted=snap.receipted,
        repeats=snap.repeats,
        repair=snap.repair,
    )
    for event in events:
        _replay_facts(ctx, event)
    return ctx


def _replay_facts(ctx: RunContext, event: Event) -> None:
    """What one journaled action left in the history and the tool-call list."""
    facts = event.facts
    if facts is None:
        return
    snap = event.snapshot
    note = None
    if facts.action == "decision":
        decided = decision_of(event)
        note = None if decided is None else decision_note(decided, snap.proposal)
    elif facts.action == "model" and snap.proposal is not None:
        note = proposal_note(snap.proposal)
        if isinstance(snap.proposal, ToolCall):
            ctx.last_tool_call = snap.proposal
            ctx.last_call = json.dumps(
                [snap.proposal.name, snap.proposal.args], sort_keys=True, default=repr
            )
    elif facts.action == "receipts" and snap.tool is not None and snap.tool.status == "returned":
        note = receipts_note(snap.tool)
    elif facts.tool is not None and snap.meters.tool_calls > ctx.calls_made:
        # the call was made and counted (a refused name never reached a tool)
        ctx.count_call(call_entry(snap.meters.steps_used, facts.tool))
        note = failure_note(facts.tool) if facts.action == "tool" else None
    if note is not None:
        ctx.history.append(note)


def applied_controls(run: RunRow, events: Sequence[Event], controls: Sequence[Control]) -> int:
    """The id of the last operator control this run has already taken into account: those
    journaled as applied, and the routing controls it caught up with when it started."""
    seen = [e.control for e in events if e.control is not None]
    seen += [c.id for c in controls if c.run_id is None and c.at <= run.started_at]
    return max(seen, default=0)


def unknown_side_effect(spec: MachineSpec, ctx: RunContext, state: str) -> str | None:
    """Why the action the run was in when it stopped cannot be re-done blindly, or None."""
    action = spec.state(state).action or ""
    if action == "tool":
        call = ctx.proposal
        if not isinstance(call, ToolCall):
            return None  # nothing was proposed, so nothing was issued
        tool = ctx.tools.get(call.name)
        if tool is not None and may_reissue(
            side_effect=tool.side_effect, idempotent=tool.idempotent
        ):
            return None
        what = "not declared idempotent" if tool is not None else "not in the tools given"
        return (
            f"tool {call.name!r} was issued with args {json.dumps(call.args, default=repr)} and"
            f" has no journaled receipt; it is {what}, so it is not re-issued: its side effect"
            " is unknown — check it by hand"
        )
    if has_side_effect(action):
        return (
            f"the user action {action!r} was running and has no journaled result; its side"
            " effect is unknown — check it by hand"
        )
    return None


class Resumption(Halting):
    """The worker's side of resume: take a journaled run over (mixed into the worker)."""

    seq: int
    control_seen: int
    resuming: bool
    last_halt: HaltReason | None
    #: True when this process took the run with `claim_run` (a resume by hand, or a
    #: Temporal worker's load)
    claimed: bool = False
    #: True when a person's decision (its `decided` event already journaled) took the run
    #: over (`fsm_agent.runtime.decisions`); with the budget edge that tripped entering its
    #: dest, and the snapshot it tripped on
    decided: bool = False
    entry_trip: EntryTrip | None = None
    #: the journal's last event when this worker took the run over, and whether the run
    #: was paused then (no process owned it)
    taken: Event
    was_paused: bool = False
    #: True when the same driver goes on with its own run from the journal between two
    #: calls (a durable workflow continued as new): no call was in flight, the run was
    #: never away, so nothing is journaled of it and nothing of it is unknown
    continuing: bool = False

    if TYPE_CHECKING:  # the worker's own (a stub here would shadow OperatorControls')

        def _catch_up_routing(self, upto: int | None = None) -> None: ...

        def _check_lanes(self) -> None: ...

        @staticmethod
        def _meter(snap: Snapshot) -> HaltReason | None: ...

    def take_over(self, run: RunRow, events: Sequence[Event], head: str) -> None:
        """Continue `run` from its last committed event instead of starting a new run."""
        last = self.taken = events[-1]
        self.was_paused = run.status == "paused"
        self.resuming, self.journaled = True, True
        self.state, self.seq, self.head = last.dest, last.seq, head
        self.started_at = run.started_at
        self.control_seen = applied_controls(run, events, self.store.controls(run.run_id))
        if last.halt is not None:  # the halt was committed; only its record is missing
            self.last_halt = last.halt

    def _resume(self) -> None:
        """Take the run over: own it (unless `claim_run` already made it this process's),
        journal the take-over, re-check the lanes, and end it in handoff if it stopped in
        the middle of a side effect that cannot be re-done."""
        if self.continuing:
            self._catch_up_routing(upto=self.control_seen)
            return
        if not self.claimed:
            self.store.mark_run(self.run_id, "running", os.getpid(), socket.gethostname())
        if self.last_halt is not None:
            self._finish(self.last_halt, None, None)
            return
        if self.decided:  # the decided event is the take-over: it says who and why
            self._notify(self.taken)
            self._catch_up_routing(upto=self.control_seen)
            self._check_lanes()
            if self.entry_trip is not None:
                edge, after, guards = self.entry_trip
                self._halt_on(edge, after, guards, None, self._meter(after))
            return
        action = self.spec.state(self.state).action
        snap = self.ctx.snapshot(self.state, None, action)
        note = f"resumed by pid {os.getpid()} on {socket.gethostname()}"
        self._commit(self._event(None, self.state, snap, kind="resumed", note=note))
        self._catch_up_routing(upto=self.control_seen)
        self._check_lanes()
        # A decision only journaled (the row left paused): its approved call was never made.
        untouched = self.taken.kind == "decided" and self.was_paused
        why = None if untouched else unknown_side_effect(self.spec, self.ctx, self.state)
        if why is not None:
            self._force(HaltReason.SIDE_EFFECT_UNKNOWN, "resume", why)
