"""Side effects and their receipts: which calls of a run are not known to have happened.

A run can end `completed` only when every side-effecting call it made has complete
receipts (a tool that returned 206 and an empty id has not succeeded: do not halt, wait
for receipts).
Tools are side-effecting unless declared as reads (`side_effect=False`), so a forgotten
declaration fails closed. A call without complete receipts stays pending until the same
tool with the same arguments — an idempotent retry, the way to wait for receipts — returns
complete ones. The loader puts the guard `side_effects_receipted` on every edge that halts
`completed`, in every declaration, so no machine can leave the rule out.
"""

from __future__ import annotations

from fsm_agent.runtime.receipts import Receipt, receipt_ok, receipts_complete
from fsm_agent.runtime.snapshot import DoneEffect, PendingEffect, ToolOutcome

#: The guard the loader adds to every transition that halts `completed`.
RECEIPTS_GUARD = "side_effects_receipted"
#: Pending calls a snapshot names; older ones are only counted (and can no longer be
#: settled: fail closed), so a long run's snapshots stay bounded.
MAX_PENDING = 100


def receipt_problem(receipts: tuple[Receipt, ...]) -> str:
    """Why receipts are not complete, in the words an operator reads (`206 with an empty
    id`, `status 500 (not 2xx)`, `no receipts`)."""
    if not receipts:
        return "no receipts"
    bad = next(r for r in receipts if not receipt_ok(r))
    status: object = bad.status
    two_xx = isinstance(status, int) and not isinstance(status, bool) and 200 <= status < 300
    shown = f"{status}" if two_xx else f"status {status!r} (not 2xx)"
    if isinstance(bad.id, str) and bad.id:
        return shown
    return f"{shown} with an empty id"


def _why(outcome: ToolOutcome) -> str | None:
    """Why this call leaves its side effect unknown, or None when its receipts settle it."""
    if outcome.status == "returned":
        if receipts_complete(outcome.receipts):
            return None
        return receipt_problem(outcome.receipts)
    if outcome.status == "failed":
        return f"failed without receipts ({outcome.error})"
    if outcome.status == "timed_out":
        return "timed out without receipts"
    return "interrupted without receipts"


def unknown(outcome: ToolOutcome) -> bool:
    """Whether the call may have taken effect without a word back: it timed out, was
    interrupted, or raised something other than a `ToolError` (which is the tool's own
    word that it failed)."""
    if outcome.status in ("timed_out", "interrupted"):
        return True
    return outcome.status == "failed" and outcome.outcome_unknown


def settle(
    pending: tuple[PendingEffect, ...],
    omitted: int,
    step: int,
    outcome: ToolOutcome,
    *,
    idempotent: bool = False,
) -> tuple[tuple[PendingEffect, ...], int]:
    """The run's pending side effects (named, and older ones only counted) after one more
    call: a read changes nothing; a side-effecting call with complete receipts settles the
    named pending calls of the same tool with the same arguments — those whose receipts were
    incomplete (the way to wait for receipts), and those of unknown outcome only when the
    tool is idempotent (another call's receipts say nothing about an earlier call of a
    non-idempotent tool); one without them becomes (or stays) pending."""
    if not outcome.side_effect:
        return pending, omitted
    why = _why(outcome)
    if why is None:
        kept = tuple(
            p
            for p in pending
            if not (
                p.name == outcome.name and p.args == outcome.args and (idempotent or not p.unknown)
            )
        )
    else:  # every call is named, a repeat of the same one too (each may have taken effect)
        kept = (
            *pending,
            PendingEffect(
                step=step,
                name=outcome.name,
                args=dict(outcome.args),
                why=why,
                unknown=unknown(outcome),
            ),
        )
    over = max(0, len(kept) - MAX_PENDING)
    return kept[over:], omitted + over


def record_effect(
    done: tuple[DoneEffect, ...], omitted: int, step: int, outcome: ToolOutcome
) -> tuple[tuple[DoneEffect, ...], int]:
    """The run's receipted side effects after one more call (older ones only counted): a
    side-effecting call with complete receipts took effect."""
    if not outcome.side_effect or _why(outcome) is not None:
        return done, omitted
    ids = tuple(dict.fromkeys(r.id for r in outcome.receipts))
    kept = (*done, DoneEffect(step=step, name=outcome.name, args=dict(outcome.args), ids=ids))
    over = max(0, len(kept) - MAX_PENDING)
    return kept[over:], omitted + over


def pending_lines(pending: tuple[PendingEffect, ...], omitted: int) -> tuple[str, ...]:
    """Every pending call as the record lists it, the count of older ones first."""
    lines = tuple(p.describe() for p in pending)
    if omitted:
        lines = (f"({omitted} earlier calls without complete receipts: see the journal)", *lines)
    return lines


def pending_summary(pending: tuple[PendingEffect, ...], omitted: int = 0, shown: int = 3) -> str:
    """One line naming the last pending calls, for a halt's why."""
    more = omitted + max(0, len(pending) - shown)
    text = "; ".join(p.describe() for p in pending[-shown:])
    return f"{text}; and {more} more (see the record)" if more else text
