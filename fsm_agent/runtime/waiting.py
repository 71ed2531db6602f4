"""What a person's decision on a run that waits in `handoff` is, and how it is journaled:
approve or deny its frozen call, or answer its question (driven on by
`fsm_agent.runtime.decisions`).

A run stops in `handoff` and waits (its record says `awaits`) when its declaration has an
edge out of `handoff` for the decision: `approved` for a call that needs a person's
approval (`approval_required`), `answered` for a question the model asked
(`handoff_requested`). Waiting holds no process. The decision is journaled as one chained
`decided` event that carries the waiting record and its seal (nothing journaled is lost), in
ONE transaction with the row's compare-and-set (`Store.reopen_run`): of two decisions at
once, one wins and the other has written nothing. Then the run goes on along the declared
edge: `approved` runs exactly the frozen call (the approval is bound to its sha256 and lets
that one call run), `denied` and `answered` go back with the decision as the model's next
observation. Budgets carry across the wait: the wall clock counts only the time the run is
awake, and steps, money and retries are the run's own.

A wait is bounded by the declaration's `wait_limit_ms` (`expired_event`).
"""

from __future__ import annotations

import datetime
import os
import socket
from typing import Any, Literal

import attrs

from fsm_agent.declaration.machine import CompiledMachine, compile_machine
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.errors import InvalidInputError
from fsm_agent.halt import HANDOFF, HaltReason
from fsm_agent.journal import serde
from fsm_agent.journal.store import Event, Facts, RunRow, Store
from fsm_agent.runtime.budgets import tripped_meter
from fsm_agent.runtime.context import RunContext
from fsm_agent.runtime.decided import STARTED_BY, PersonDecision, decision_note, span, wait_over
from fsm_agent.runtime.journaling import now_iso
from fsm_agent.runtime.operator_acts import signature
from fsm_agent.runtime.proposals import ToolCall
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.runtime.resume import EntryTrip, verified
from fsm_agent.runtime.run_status import waiting_for
from fsm_agent.runtime.snapshot import Snapshot, entering

#: each act -> the trigger it fires out of `handoff`, and what the run must wait for
TRIGGER: dict[str, str] = {"approve": "approved", "deny": "denied", "answer": "answered"}
NEEDS: dict[str, str] = {"approve": "approval", "deny": "approval", "answer": "answer"}
#: the longest answer a person may give (it becomes the model's next observation)
MAX_ANSWER = 20_000


def signed(
    act: str, by: str | None, why: str, text: str | None = None, call: str | None = None
) -> PersonDecision:
    """A decision with who (the login name by default) and when; refused without a why, an
    answer without text, or text on an approval."""
    if act not in TRIGGER:
        raise InvalidInputError(f"unknown decision {act!r} (one of approve, deny, answer)")
    if not isinstance(why, str):
        raise InvalidInputError("--why must say why (it is journaled with the decision)")
    who, at = signature(by, why)  # as every person's act is signed
    if act == "answer" and (not isinstance(text, str) or not text.strip()):
        raise InvalidInputError("an answer needs its text (--text …)")
    if act != "answer" and text is not None:
        raise InvalidInputError(f"{act} takes no --text (only an answer has one)")
    if text is not None and len(text) > MAX_ANSWER:
        raise InvalidInputError(f"the answer is {len(text)} characters; at most {MAX_ANSWER}")
    return PersonDecision(act, who, why, at, text, call)  # type: ignore[arg-type]


@attrs.frozen
class Waiting:
    """A waiting run as the journal proves it: its row (with the sealed record), its
    declaration, its events and its head."""

    row: RunRow
    spec: MachineSpec
    events: list[Event]
    head: str

    @property
    def record(self) -> HaltRecord:
        assert self.row.record is not None  # noqa: S101 - a waiting run has its record
        return self.row.record

    @property
    def awaits(self) -> str:
        return waiting_for(self.row) or ""

    def expired(self, now: str) -> bool:
        """Whether the wait has run past the declaration's limit at `now`."""
        packet = self.record.handoff
        return wait_over(now, None if packet is None else packet.wait_until)

    def waited(self, now: str) -> str:
        """How long the run has waited at `now`, as people read it (`2h 5m`)."""
        waited = _moment(now) - _moment(self.record.ended_at)
        return span(max(0, int(waited.total_seconds() * 1000)))


def load_waiting(store: Store, run_id: str) -> Waiting:
    """The run, refused (`InvalidInputError`, nothing written) unless it waits for a
    person's decision and its journal verifies."""
    row = store.get_run(run_id)
    if row.status != "halted" or waiting_for(row) is None:
        how = row.status if row.status != "halted" else f"halted ({_reason(row)}), for good"
        raise InvalidInputError(
            f"run {run_id} is not waiting for a decision: it is {how}; only a run waiting in"
            " handoff (`fsm-agent runs --status waiting`) takes one, and nothing was journaled"
        )
    try:
        spec, events, head = verified(store, row)
    except InvalidInputError:
        _decided_meanwhile(store, row)
        raise
    if row.record_hash is None or events[-1].halt is None:
        _decided_meanwhile(store, row)
        raise InvalidInputError(
            f"run {run_id}: its waiting record is not sealed onto its journal; nothing was"
            f" journaled (see `fsm-agent verify {run_id}`)"
        )
    return Waiting(row, spec, events, head)


def _decided_meanwhile(store: Store, row: RunRow) -> None:
    """The row, the events and the head are read apart: a decision another process took
    meanwhile shows as events past the sealed head. Refuse as that, not as tampering."""
    now = store.get_run(row.run_id)
    if (now.status, now.record_hash) != (row.status, row.record_hash):
        raise InvalidInputError(
            f"run {row.run_id} was decided first by someone else (it is now {now.status});"
            " this decision was not journaled"
        ) from None


def check_decision(waiting: Waiting, decision: PersonDecision) -> None:
    """Refuse a decision the run does not wait for, or on a call other than the frozen one."""
    run_id, awaits = waiting.row.run_id, waiting.awaits
    if NEEDS[decision.act] != awaits:
        acts = "approve or deny" if awaits == "approval" else "answer"
        raise InvalidInputError(
            f"run {run_id} waits for an {awaits}, not"
            f" for a decision to {decision.act}: {acts} it; nothing was journaled"
        )
    _check_approver(waiting, decision)
    frozen = None if waiting.record.handoff is None else waiting.record.handoff.call_sha256
    if decision.call is not None and (
        frozen is None or len(decision.call) < 8 or not frozen.startswith(decision.call.lower())
    ):
        raise InvalidInputError(
            f"run {run_id} waits on the call {frozen or '(none)'}, not {decision.call}: a"
            " decision is bound to the exact frozen call; nothing was journaled"
        )


def _check_approver(waiting: Waiting, decision: PersonDecision) -> None:
    """Under a policy whose approvals of privileged tools come from someone else, refuse an
    approval by the person who started the run (as its first event names them)."""
    last = waiting.events[-1].snapshot
    proposal = last.proposal
    if decision.act != "approve" or last.control.privileged_approval != "by_another":
        return
    if not isinstance(proposal, ToolCall) or proposal.name not in last.privileged:
        return
    note = waiting.events[0].note or ""
    starter = note[len(STARTED_BY) :] if note.startswith(STARTED_BY) else None
    if starter is None or starter == decision.by:
        raise InvalidInputError(
            f"run {waiting.row.run_id} was started by {starter or 'someone not named'}, and"
            f" its policy has a privileged call approved by someone else; {decision.by} may"
            " not approve it (nothing was journaled)"
        )


def apply_decision(ctx: RunContext, waiting: Waiting, decision: PersonDecision) -> None:
    """What the decision changes in the run's context: an approval lets exactly the frozen
    call run; a denial or an answer is the model's next observation (`decision_note`, which
    `resume` rebuilds from the journal the same way)."""
    packet = waiting.record.handoff
    if decision.act == "approve":
        ctx.approved = None if packet is None else packet.call_sha256
        return
    note = decision_note(decision, ctx.proposal)
    if note is not None:
        ctx.history.append(note)


def decided_event(
    waiting: Waiting, ctx: RunContext, decision: PersonDecision
) -> tuple[Event, EntryTrip | None]:
    """The `decided` event (not yet journaled), decided on the declared edges out of
    `handoff`, and the budget edge that tripped entering its dest with the snapshot it
    tripped on and its guards (None: none did).
    Refuses a decision no declared edge takes, or one the runtime's contract refuses."""
    compiled: CompiledMachine = compile_machine(waiting.spec)
    trigger = TRIGGER[decision.act]
    snap = ctx.snapshot(HANDOFF, trigger, None)
    chosen = compiled.decide(HANDOFF, trigger, snap)
    run_id = waiting.row.run_id
    if chosen.refused is not None:
        raise InvalidInputError(f"run {run_id}: {chosen.refused.why}; nothing was journaled")
    if chosen.transition is None:
        edges = waiting.spec.candidates(HANDOFF, trigger)
        why = "its guards refused it" if edges else "the machine declares no such edge"
        raise InvalidInputError(
            f"run {run_id}: no edge out of handoff on {trigger!r} ({why}); nothing was journaled"
        )
    dest = waiting.spec.state(chosen.transition.dest)
    after: Snapshot | None = None
    check = compiled.untripped(dest.name)
    if tripped_meter(snap.budgets, ctx.meters, next_action=dest.action) is not None:
        after = entering(snap, dest.name, dest.action, ctx.meters)
        check = compiled.check_budget(dest.name, after)
    last = waiting.events[-1]
    event = Event(
        run_id=run_id,
        seq=last.seq + 1,
        kind="decided",
        at_ms=snap.clock_ms,
        wall_time=now_iso(),
        source=HANDOFF,
        dest=dest.name,
        trigger=trigger,
        snapshot=snap,
        guards=chosen.guards,
        check=check.guards,
        facts=_facts(waiting, decision),
        note=_note(decision),
    )
    tripped = check.transition
    return event, None if after is None or tripped is None else (tripped, after, check.guards)


def reopen(
    store: Store, waiting: Waiting, event: Event, status: Literal["running", "paused"] = "running"
) -> str:
    """Journal `event` and make the run this process's (`running`), or leave it `paused`
    for `resume`, atomically; refused when another decision or process took the run first
    (it has written nothing)."""
    assert waiting.row.record_hash is not None  # noqa: S101 - checked by load_waiting
    ours = status == "running"
    head = store.reopen_run(
        event,
        seal=waiting.row.record_hash,
        pid=os.getpid() if ours else None,
        host=socket.gethostname() if ours else None,
        status=status,
    )
    if head is None:
        now = store.get_run(waiting.row.run_id)
        raise InvalidInputError(
            f"run {waiting.row.run_id} was decided first by someone else (it is now"
            f" {now.status}); this decision was not journaled"
        )
    return head


def _facts(waiting: Waiting, decision: PersonDecision | None) -> Facts:
    """What the event carries: the decision as given, and the waiting record it supersedes
    with that record's seal (so the chain keeps both)."""
    reply: dict[str, Any] = {
        "record": serde.unstructure(waiting.record),
        "record_seal": waiting.row.record_hash,
    }
    if decision is not None:
        reply["decision"] = serde.unstructure(decision)
    return Facts(action="decision", reply=reply)


def _note(decision: PersonDecision) -> str:
    verb = {"approve": "approved", "deny": "denied", "answer": "answered"}[decision.act]
    said = f": {decision.text}" if decision.text is not None else ""
    return f"{verb} by {decision.by}{said} (why: {decision.why})"


def _reason(row: RunRow) -> str:
    return row.halt_reason.value if row.halt_reason else "?"


def _moment(iso: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(iso)


def expired_event(waiting: Waiting, ctx: RunContext, now: str) -> Event:
    """The imposed halt of a wait past its limit, carrying the waiting record like a
    decision does."""
    snap = ctx.snapshot(HANDOFF, None, None)
    limit = span(waiting.spec.wait_limit_ms)
    note = (
        f"waited {waiting.waited(now)} for an"
        f" {waiting.awaits}, past the wait limit ({limit}): no decision was taken"
    )
    return Event(
        run_id=waiting.row.run_id,
        seq=waiting.events[-1].seq + 1,
        kind="decided",
        at_ms=snap.clock_ms,
        wall_time=now,
        source=HANDOFF,
        dest="budget_exhausted",
        trigger="wait",
        snapshot=snap,
        facts=_facts(waiting, None),
        halt=HaltReason.WAIT_EXPIRED,
        note=note,
    )
