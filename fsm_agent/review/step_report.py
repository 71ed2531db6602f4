"""The report of one re-decided step (`fsm_agent.review.redecide`): its verdict, the recorded and
recomputed guard results side by side, and what the journal holds beside it."""

from __future__ import annotations

from typing import Any, Literal

import attrs

from fsm_agent.halt import HaltReason
from fsm_agent.journal.store import Event
from fsm_agent.runtime.budgets import Meters
from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.snapshot import Snapshot

Verdict = Literal["match", "diverged", "external", "halted_earlier", "needs_facts"]


@attrs.frozen
class GuardCheck:
    """One guard of one candidate transition: recorded vs recomputed (None: not evaluated)."""

    transition: int
    guard: str
    recorded: bool | None
    recomputed: bool | None


@attrs.frozen
class StepReport:
    """One journaled transition, re-decided."""

    seq: int
    step: int
    max_steps: int
    source: str | None
    dest: str
    trigger: str | None
    verdict: Verdict
    recorded_halt: HaltReason | None = None
    recomputed_dest: str | None = None
    recomputed_halt: HaltReason | None = None
    guards: tuple[GuardCheck, ...] = ()
    meters: Meters | None = None
    reply: Any = None
    receipts: tuple[Receipt, ...] = ()
    detail: str | None = None
    #: what the journal noted beside the transition (a refused or grounded answer, an act)
    note: str | None = None


def step_base(event: Event, snap: Snapshot) -> dict[str, Any]:
    facts = event.facts
    tool = facts.tool if facts is not None else None
    return {
        "seq": event.seq,
        "step": snap.meters.steps_used,
        "max_steps": snap.budgets.max_steps,
        "source": event.source,
        "dest": event.dest,
        "trigger": event.trigger,
        "recorded_halt": event.halt,
        "meters": snap.meters,
        "reply": facts.reply if facts is not None and facts.action == "model" else None,
        "receipts": tool.receipts if tool is not None else (),
        "note": event.note,
    }


def matched_step(
    event: Event,
    snap: Snapshot,
    guards: tuple[GuardCheck, ...],
    dest: str,
    halt: HaltReason | None,
) -> StepReport:
    """The report of a transition re-decided as recorded: `step_base` with verdict
    "match", built positionally (in `StepReport`'s field order: the replay's common case)."""
    facts = event.facts
    reply = receipts = None
    if facts is not None:
        reply = facts.reply if facts.action == "model" else None
        receipts = facts.tool.receipts if facts.tool is not None else None
    meters = snap.meters
    return StepReport(
        event.seq, meters.steps_used, snap.budgets.max_steps, event.source, event.dest,
        event.trigger, "match", event.halt, dest, halt, guards, meters, reply,
        () if receipts is None else receipts, None, event.note,
    )  # fmt: skip
