"""The frozen snapshot of a run that every guard decides on, and the facts it is built from.

A snapshot holds everything a guard may read — meters, budgets, the last proposal, the last
tool outcome with its receipts, the lane that owns the halt vote, and the clock reading the
worker took for this decision. It is journaled with every transition, so replay can
re-evaluate every guard without a model, a tool or a clock.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final, Literal

import attrs

from fsm_agent.runtime.budgets import Budgets, Meters
from fsm_agent.runtime.lanes import LOCAL, ControlPlane, Lane
from fsm_agent.runtime.proposals import Proposal
from fsm_agent.runtime.receipts import Receipt

ToolStatus = Literal["returned", "failed", "timed_out", "interrupted"]

#: The success rules new runs are decided under. 1: journals recorded before 2026-12-01 (an
#: answer grounded by any substring match; side effects not checked); 2: no `completed`
#: while a side-effecting call lacks complete receipts, and value-level grounding, where the
#: declaration's guards say so; 3 (since 2026-12-02): the runtime's own contract
#: (`fsm_agent.runtime.contract`) on top of every declaration. Replay re-decides a run
#: under the rules it was recorded with.
SUCCESS_RULES: Final = 3
#: What each older version of the success rules came before, as review says it.
BEFORE: Final = {
    1: "before side effects needed receipts and answers value-level grounding",
    2: "before the runtime enforced its own contract whatever the declaration said",
}


@attrs.frozen
class ToolOutcome:
    """What one tool call (or user action) produced, as the worker observed it."""

    name: str
    args: dict[str, Any]
    status: ToolStatus
    receipts: tuple[Receipt, ...] = ()
    observation: Any = None
    final: str | None = None
    error: str | None = None
    retryable: bool = False
    cost: float = 0.0
    duration_ms: int = 0
    #: True when the tool was abandoned or killed at a deadline: its side effect is unknown.
    outcome_unknown: bool = False
    #: False for a call that cannot have changed the world: a tool declared as a read, or a
    #: call refused before it was made. True (the default) fails closed.
    side_effect: bool = True


@attrs.frozen
class PendingEffect:
    """A side-effecting call whose receipts are not complete (a non-2xx status, an empty or
    missing id, no receipts, a failure): its effect is not known to have happened. It stays
    pending until the same tool with the same arguments returns complete receipts."""

    step: int
    name: str
    args: dict[str, Any]
    why: str
    #: True when the call may have happened without a word back (timed out, interrupted,
    #: raised something other than a `ToolError`): it is never re-issued unless the tool is
    #: idempotent, and a later call's receipts do not settle it (rules 3)
    unknown: bool = False

    def describe(self) -> str:
        """`step 2: close_ticket({"ticket": "T-200"}) -> 206 with an empty id`."""
        return f"step {self.step}: {call_text(self.name, self.args)} -> {self.why}"


def call_text(name: str, args: dict[str, Any]) -> str:
    """`refund({"cents": 500, "customer": "C-17"})`: one call as a person reads it."""
    return f"{name}({json.dumps(args, sort_keys=True, default=repr)})"


def call_sha256(name: str, args: dict[str, Any]) -> str:
    """The digest an approval is bound to: sha256 of the call's canonical JSON
    (`["refund", {"cents": 500}]`, keys sorted, no spaces)."""
    text = json.dumps([name, args], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@attrs.frozen
class DoneEffect:
    """A side-effecting call that returned complete receipts: its effect happened. The same
    call is not made again unless its tool is declared `repeatable` or idempotent (rules 3)."""

    step: int
    name: str
    args: dict[str, Any]
    ids: tuple[str, ...] = ()

    def describe(self) -> str:
        """`step 2: refund({"cents": 500}) -> receipted (rf_1)`."""
        ids = ", ".join(self.ids)
        return f"step {self.step}: {call_text(self.name, self.args)} -> receipted ({ids})"


@attrs.frozen
class Receipted:
    """What one tool call with complete receipts returned: the values an answer may be
    grounded in (its `final` and every observation value) and its receipt ids (which an
    answer may cite, but which ground nothing by themselves)."""

    step: int
    name: str
    values: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()

    def label(self) -> str:
        return f"step {self.step}: {self.name}"


@attrs.frozen
class Snapshot:
    """Everything a guard may read. Guards are pure functions of this value."""

    state: str
    outcome: str | None
    next_action: str | None
    clock_ms: int
    budgets: Budgets
    meters: Meters
    proposal: Proposal | None = None
    tool: ToolOutcome | None = None
    evidence: bool = False
    #: Under success rules 1 only: values (finals, receipt ids, observation strings) returned
    #: by receipted tool calls. Rules 2 keep them per call in `receipted`.
    grounded: tuple[str, ...] = ()
    #: the success rules this run is decided under (see SUCCESS_RULES); 1 for old journals
    rules: int = 1
    #: side-effecting calls of this run without complete receipts (rules 2)
    unreceipted: tuple[PendingEffect, ...] = ()
    #: pending calls older than the last MAX_PENDING, only counted (they stay pending)
    unreceipted_omitted: int = 0
    #: receipted tool calls and what they returned, for grounding an answer (rules 2)
    receipted: tuple[Receipted, ...] = ()
    allowlist: tuple[str, ...] = ()
    privileged: tuple[str, ...] = ()
    halt_lane: Lane = LOCAL
    control: ControlPlane = attrs.field(factory=ControlPlane)
    repeats: int = 0
    thrash_limit: int = 0
    #: the schema-repair vote on the last reply: none, refused (voter not on a local lane),
    #: repaired, or failed (the repaired reply was still invalid)
    repair: Literal["none", "refused", "repaired", "failed"] = "none"
    #: a second-opinion judge's vote on a possible success: none (no judge or not asked),
    #: agree, veto, or ignored (a judge off a local or paid lane has no vote)
    judge: Literal["none", "agree", "veto", "ignored"] = "none"
    #: side-effecting calls of this run that returned complete receipts (rules 3)
    effects: tuple[DoneEffect, ...] = ()
    #: such calls older than the last MAX_PENDING, only counted
    effects_omitted: int = 0
    #: the run's tools declared idempotent: a call of one may be re-issued (rules 3)
    idempotent: tuple[str, ...] = ()
    #: the run's tools whose repeat is meant (declared repeatable, or idempotent)
    repeatable: tuple[str, ...] = ()
    #: the run's tools a person must approve each call of (`Tool.approval`, or the policy's
    #: `approve_privileged`)
    approval: tuple[str, ...] = ()
    #: the sha256 of the one call a person approved (`call_sha256`), until it is made
    approved: str | None = None
    #: a repeat of a call that already took effect waits for a person's approval instead of
    #: being refused (the run's declaration continues an approval: an `approved` edge)
    repeat_asks: bool = False


def entering(snap: Snapshot, state: str, next_action: str | None, meters: Meters) -> Snapshot:
    """`snap` as the run enters `state` (no outcome yet, `next_action` next, `meters` now):
    `attrs.evolve(snap, state=…, outcome=None, next_action=…, meters=…)`, built directly
    (the loop makes one per transition)."""
    return Snapshot(
        state,
        None,
        next_action,
        snap.clock_ms,
        snap.budgets,
        meters,
        snap.proposal,
        snap.tool,
        snap.evidence,
        snap.grounded,
        snap.rules,
        snap.unreceipted,
        snap.unreceipted_omitted,
        snap.receipted,
        snap.allowlist,
        snap.privileged,
        snap.halt_lane,
        snap.control,
        snap.repeats,
        snap.thrash_limit,
        snap.repair,
        snap.judge,
        snap.effects,
        snap.effects_omitted,
        snap.idempotent,
        snap.repeatable,
        snap.approval,
        snap.approved,
        snap.repeat_asks,
    )
