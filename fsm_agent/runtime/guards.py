"""Guards: pure predicates over a `Snapshot`, referenced by name from machine declarations.

Built-in guards are looked up by bare name; a user guard is referenced as
`package.module:function`; `not <guard>` negates. Names are resolved once, at load time,
from this registry — never lazily, never by magic attribute lookup.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Final

from fsm_agent.declaration.refs import BadReference, Search, check_form, resolve_callable
from fsm_agent.runtime.budgets import tripped_meter
from fsm_agent.runtime.grounding import ground, grounded_v1
from fsm_agent.runtime.lanes import halt_lane_refusal
from fsm_agent.runtime.proposals import FinalAnswer, Rejection, ToolCall
from fsm_agent.runtime.receipts import receipts_complete as _receipts_complete
from fsm_agent.runtime.snapshot import Snapshot

Guard = Callable[[Snapshot], bool]


def within_budget(s: Snapshot) -> bool:
    """No meter has tripped for the next action (wall clock, money, steps)."""
    return tripped_meter(s.budgets, s.meters, next_action=s.next_action) is None


def budget_tripped(s: Snapshot) -> bool:
    """Some meter has tripped: the run must stop as `budget_exhausted`."""
    return not within_budget(s)


def tool_allowed(s: Snapshot) -> bool:
    """The proposed tool is on the allow-list (unknown names are refused before anything runs)."""
    return isinstance(s.proposal, ToolCall) and s.proposal.name in s.allowlist


def privileged_cleared(s: Snapshot) -> bool:
    """The proposed tool is not privileged, or the local halt check clears it."""
    if not isinstance(s.proposal, ToolCall):
        return False
    if s.proposal.name not in s.privileged:
        return True
    return halt_lane_refusal(s.control, "halt", s.halt_lane) is None


def halt_lane_local(s: Snapshot) -> bool:
    """The halt vote is owned by a local, non-free function (the halt policy's control plane)."""
    return halt_lane_refusal(s.control, "halt", s.halt_lane) is None


def receipts_complete(s: Snapshot) -> bool:
    """The last tool call returned receipts, all with a 2xx status and a non-empty id."""
    return (
        s.tool is not None and s.tool.status == "returned" and _receipts_complete(s.tool.receipts)
    )


def goal_satisfied(s: Snapshot) -> bool:
    """The last tool result, backed by complete receipts, carries the run's final value."""
    return receipts_complete(s) and s.tool is not None and bool(s.tool.final)


def evidence_complete(s: Snapshot) -> bool:
    """Some tool call in this run returned complete receipts (a final answer needs evidence)."""
    return s.evidence


def answer_grounded(s: Snapshot) -> bool:
    """The final answer comes from what receipted tool calls returned: every concrete value
    it asserts was returned, and some call's returned value backs it (see
    `fsm_agent.runtime.grounding`; citing a receipt id grounds nothing by itself)."""
    if not isinstance(s.proposal, FinalAnswer):
        return False
    if s.rules < 2:
        return grounded_v1(s.proposal.text, s.grounded)
    return ground(s.proposal.text, s.receipted).grounded


def side_effects_receipted(s: Snapshot) -> bool:
    """No side-effecting call of this run lacks complete receipts (on every edge that halts
    `completed`, added by the loader)."""
    return not s.unreceipted and not s.unreceipted_omitted


def thrashing(s: Snapshot) -> bool:
    """The same tool with the same arguments was proposed `thrash_limit` times in a row."""
    return s.thrash_limit > 0 and s.repeats >= s.thrash_limit


def retries_left(s: Snapshot) -> bool:
    """The retry budget is not spent."""
    return s.meters.retries_used < s.budgets.max_retries


def error_retryable(s: Snapshot) -> bool:
    """The last tool call failed with an error its adapter marked retryable."""
    return s.tool is not None and s.tool.status == "failed" and s.tool.retryable


def reply_empty(s: Snapshot) -> bool:
    """The last model reply was empty."""
    return isinstance(s.proposal, Rejection) and s.proposal.kind == "empty_response"


def judge_agrees(s: Snapshot) -> bool:
    """No second-opinion judge vetoed this success. A judge can only hold a halt back: it
    never makes one alone, since the receipt guards beside it still have to pass."""
    return s.judge != "veto"


def repair_refused(s: Snapshot) -> bool:
    """An invalid reply's repair vote was routed to a voter not on a local lane: hard fail."""
    return s.repair == "refused"


BUILTIN_GUARDS: Final[Mapping[str, Guard]] = MappingProxyType(
    {
        g.__name__: g
        for g in (
            within_budget,
            budget_tripped,
            tool_allowed,
            privileged_cleared,
            halt_lane_local,
            receipts_complete,
            goal_satisfied,
            evidence_complete,
            answer_grounded,
            side_effects_receipted,
            thrashing,
            retries_left,
            error_retryable,
            reply_empty,
            repair_refused,
            judge_agrees,
        )
    }
)


#: Guards that came with a version of the success rules: a snapshot journaled under older
#: rules never had them evaluated, so replay of an old journal skips them (and records them
#: as skipped nowhere: they were not part of the rule that run was decided under).
GUARD_SINCE: Final[Mapping[str, int]] = MappingProxyType({"side_effects_receipted": 2})


class UnknownGuard(BadReference):
    """A guard reference that does not resolve (converted to a `MachineSpecError` by the loader)."""


def _negate(name: str, guard: Guard) -> Guard:
    def negated(s: Snapshot) -> bool:
        return not guard(s)

    negated.__name__ = f"not {name}"
    return negated


def guard_form(ref: str) -> None:
    """Refuse what `resolve_guard` would, importing nothing: a user guard is checked for
    its `package.module:function` form only (see `refs.check_form`)."""
    ref = ref.strip()
    if ref.startswith("not "):
        guard_form(ref[4:].strip())
    elif ":" in ref:
        try:
            check_form(ref)
        except BadReference as exc:
            raise UnknownGuard(f"guard {ref!r}: {exc}") from exc
    else:
        resolve_guard(ref)


def resolve_guard(ref: str, search: Search = ()) -> Guard:
    """Resolve a guard reference: `name`, `not name`, or `package.module:function` (looked
    for as `fsm_agent.declaration.refs` says, `search` after sys.path)."""
    ref = ref.strip()
    if ref.startswith("not "):
        inner = ref[4:].strip()
        return _negate(inner, resolve_guard(inner, search))
    if ":" in ref:
        try:
            return resolve_callable(ref, search)
        except BadReference as exc:
            raise UnknownGuard(f"guard {ref!r}: {exc}") from exc
    try:
        return BUILTIN_GUARDS[ref]
    except KeyError:
        known = ", ".join(sorted(BUILTIN_GUARDS))
        raise UnknownGuard(f"unknown guard {ref!r} (built-ins: {known})") from None
