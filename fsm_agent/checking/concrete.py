"""One account of the rules: `check` decides every built-in guard and the runtime's contract
by running the runtime's own code (`fsm_agent.runtime.guards`, `fsm_agent.runtime.contract`)
on a concrete `Snapshot` that stands for an abstract configuration.

`snapshot_of(c, bounds)` builds the snapshot a run would have with exactly `c`'s facts: its
meters at `c`'s steps and retries under `bounds`' budgets (no meter tripped: a decision
after an action); a proposal of `c`'s kind — a call of a tool that is on the allow-list or
not, privileged or not, repeated up to the thrash limit or not; an answer whose one value a
receipted call returned, or one no call returned; an empty or malformed reply and its repair
vote; the last call's outcome with complete or incomplete receipts and a final value; one
pending call when a side effect lacks receipts, and one receipted call when evidence was
collected. Nothing else is set, so a guard reads nothing the configuration does not say.

What the snapshot cannot carry — which calls were made, so whether a proposal repeats one —
stays a possibility the exploration branches on (`model.repeat_refusals`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from fsm_agent.runtime.budgets import Budgets, Meters
from fsm_agent.runtime.lanes import LOCAL, Lane
from fsm_agent.runtime.proposals import FinalAnswer, HandoffRequest, Rejection, ToolCall
from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.snapshot import (
    SUCCESS_RULES,
    PendingEffect,
    Receipted,
    Snapshot,
    ToolOutcome,
    call_sha256,
)

if TYPE_CHECKING:
    from fsm_agent.checking.model import Bounds, Config

#: The proposed tool's name, and the one call a pending side effect or the evidence names.
TOOL, EARLIER = "proposed_tool", "earlier_call"
#: The value a receipted call returned (an answer stating it is grounded), and the one an
#: ungrounded answer states that no call returned.
RETURNED, INVENTED = "4242", "9999"
#: A halt lane that may not own the halt vote (a free one).
FREE = Lane(kind="http", tier="free")
#: Budgets no configuration meets but for steps and retries (the clock and the money are
#: not counted: a decision is made after an action no meter stopped).
_ROOM = 10**9
#: The approval of the proposed call (`ToolCall(TOOL, {})`) a person gave.
_APPROVED = call_sha256(TOOL, {})


def _proposal(c: Config) -> ToolCall | FinalAnswer | HandoffRequest | Rejection | None:
    if c.kind == "tool_call":
        return ToolCall(TOOL, {})
    if c.kind == "answer":
        return FinalAnswer(f"the value is {RETURNED if c.grounded else INVENTED}")
    if c.kind == "handoff":
        return HandoffRequest("a person decides")
    if c.kind == "rejected":
        if c.empty:
            return Rejection("empty_response", "an empty reply")
        return Rejection("schema_fail", "a reply that is no proposal")
    return None


def _tool(c: Config) -> ToolOutcome | None:
    if c.tool is None:
        return None
    if c.tool == "returned":
        receipt = Receipt(200, "r-1") if c.complete else Receipt(206, "")
        final = RETURNED if c.final else None
        return ToolOutcome(EARLIER, {}, "returned", (receipt,), {"value": RETURNED}, final)
    if c.tool == "failed":
        return ToolOutcome(EARLIER, {}, "failed", error="failed", retryable=c.retryable)
    return ToolOutcome(EARLIER, {}, "timed_out", error="timed out", outcome_unknown=True)


@lru_cache(maxsize=1 << 16)
def snapshot_of(c: Config, bounds: Bounds) -> Snapshot:
    """The concrete snapshot `c` stands for under `bounds` (see the module's docstring)."""
    budgets = Budgets(bounds.max_steps, _ROOM, float(_ROOM), _ROOM, bounds.max_retries)
    meters = Meters(steps_used=c.steps, retries_used=c.retries)
    pending = (PendingEffect(0, EARLIER, {"pending": True}, "no receipts"),) if c.pending else ()
    backed = c.evidence or (c.kind == "answer" and c.grounded)
    evidence = (Receipted(0, EARLIER, (RETURNED,), ("r-0",)),) if backed else ()
    tool_call = c.kind == "tool_call"
    return Snapshot(
        state=c.state,
        outcome=None,
        next_action=None,
        clock_ms=0,
        budgets=budgets,
        meters=meters,
        proposal=_proposal(c),
        tool=_tool(c),
        evidence=c.evidence,
        rules=SUCCESS_RULES,
        unreceipted=pending,
        receipted=evidence,
        allowlist=(TOOL,) if tool_call and c.allowed else (),
        privileged=(TOOL,) if tool_call and c.privileged else (),
        halt_lane=LOCAL if c.lane_local else FREE,
        repeats=1 if tool_call and c.thrash else 0,
        thrash_limit=1,
        repair="refused" if c.kind == "rejected" and c.refused else "none",
        approval=(TOOL,) if tool_call and c.approval else (),
        approved=_APPROVED if c.approved else None,
    )
