"""The contract the runtime enforces whatever a declaration says (success rules 3).

A declaration's guards choose among its edges; they can make a machine stricter, never
looser. Once the declaration has chosen an edge, the runtime refuses it — the run halts in
`handoff` with the reason below and a packet — when taking it would:

- `allow_list` -> `tool_refused`: run a tool that is not on the run's allow-list (the
  declaration's `tools:` that are registered, narrowed by the operator's `allow`; for a
  declaration that lists none, what `allow` names and nothing else: `allow_list`);
- `privileged` -> `halt_path_refused`: run a privileged tool while the halt vote is not
  owned by a local function;
- `unknown_effect` -> `side_effect_unknown`: re-issue a side-effecting call whose earlier
  outcome is unknown (timed out, interrupted, failed without a `ToolError`), unless its
  tool is idempotent;
- `repeat` -> `repeat_refused`: make again a side-effecting call that already returned
  complete receipts, unless its tool is `repeatable` or idempotent, or a person approved
  that repeat (where the declaration continues an approval, the repeat stops for one:
  `approval_required`);
- `approval` -> `approval_required`: run a tool a person must approve (`Tool.approval`, or
  a privileged tool under the policy's `approve_privileged`) other than the one call a
  person approved (`fsm-agent approve`): the run waits in `handoff`, the call frozen;
- `receipts` -> `side_effect_unknown`: end `completed` while a side-effecting call lacks
  complete receipts;
- `grounded` -> `ungrounded_answer`: end `completed` with an answer receipted results do
  not back (a final answer stating values no receipted call returned, a tool `final`
  without complete receipts, no answer at all).

Every rule is a pure function of the decision's snapshot, so replay re-decides it, `check`
explores it and `simulate` meets it through this one module. A run recorded under older
success rules (its snapshots' `rules` < 3) was not decided under this contract and replays
without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import attrs

from fsm_agent.errors import InvalidInputError
from fsm_agent.halt import HaltReason
from fsm_agent.runtime.effects import pending_summary
from fsm_agent.runtime.grounding import ground
from fsm_agent.runtime.lanes import halt_lane_refusal
from fsm_agent.runtime.proposals import FinalAnswer, ToolCall
from fsm_agent.runtime.receipts import receipts_complete
from fsm_agent.runtime.snapshot import Snapshot, call_sha256, call_text

#: The success rules that brought this contract.
CONTRACT_SINCE: Final = 3
#: How a refusal is written in a decision's guard log: `runtime:<rule>`, False.
PREFIX: Final = "runtime:"
#: Every rule of the contract -> the halt it refuses with.
RULES: Final = {
    "allow_list": HaltReason.TOOL_REFUSED,
    "privileged": HaltReason.HALT_PATH_REFUSED,
    "unknown_effect": HaltReason.SIDE_EFFECT_UNKNOWN,
    "repeat": HaltReason.REPEAT_REFUSED,
    "approval": HaltReason.APPROVAL_REQUIRED,
    "receipts": HaltReason.SIDE_EFFECT_UNKNOWN,
    "grounded": HaltReason.UNGROUNDED_ANSWER,
}


@attrs.frozen
class Refusal:
    """The runtime's refusal of a declared edge: the rule, the halt, and why, in one line."""

    rule: str
    reason: HaltReason
    why: str

    def __attrs_post_init__(self) -> None:
        if RULES.get(self.rule) is not self.reason:
            raise ValueError(f"rule {self.rule!r} refuses with {RULES.get(self.rule)}")

    @property
    def guard(self) -> str:
        """The refusal's name in the guard log."""
        return PREFIX + self.rule


def tool_refusal(s: Snapshot) -> Refusal | None:
    """Why the runtime will not run the proposed tool call of `s`, or None."""
    p = s.proposal
    if not isinstance(p, ToolCall):
        return None
    call = call_text(p.name, dict(p.args))
    if p.name not in s.allowlist:
        allowed = ", ".join(s.allowlist) or "no tools"
        return Refusal(
            "allow_list",
            HaltReason.TOOL_REFUSED,
            f"tool {p.name!r} is not on the run's allow-list ({allowed}); nothing was run",
        )
    if p.name in s.privileged and halt_lane_refusal(s.control, "halt", s.halt_lane) is not None:
        return Refusal(
            "privileged",
            HaltReason.HALT_PATH_REFUSED,
            f"tool {p.name!r} is privileged and the halt vote is not owned by a local"
            " function; nothing was run",
        )
    if p.name not in s.idempotent:
        for pending in s.unreceipted:
            if pending.unknown and pending.name == p.name and pending.args == p.args:
                return Refusal(
                    "unknown_effect",
                    HaltReason.SIDE_EFFECT_UNKNOWN,
                    f"{call} was proposed again, but its earlier call's outcome is unknown"
                    f" ({pending.describe()}); {p.name} is not declared idempotent, so it is"
                    " not re-issued: check the earlier call by hand",
                )
    # the call's digest only where an approval is in play (a run's every decision asks)
    approved = s.approved is not None and s.approved == call_sha256(p.name, dict(p.args))
    if p.name not in s.repeatable and not approved:  # a person may approve a repeat
        for done in s.effects:
            if done.name == p.name and done.args == p.args:
                return _repeat(
                    s, p, f"{call} was proposed again after the same call already took"
                    f" effect ({done.describe()}); {p.name} is not declared repeatable or"
                    " idempotent",
                )  # fmt: skip
        if s.effects_omitted:  # older calls are only counted: a repeat cannot be ruled out
            return _repeat(
                s, p, f"{call} may repeat one of {s.effects_omitted} earlier receipted"
                " calls no longer named in the snapshot",
            )  # fmt: skip
    if p.name in s.approval and not approved:
        return Refusal(
            "approval",
            HaltReason.APPROVAL_REQUIRED,
            f"{call} needs a person's approval before it runs; nothing was run (call"
            f" sha256 {call_sha256(p.name, dict(p.args))})",
        )
    return None


def _repeat(s: Snapshot, p: ToolCall, why: str) -> Refusal:
    """A repeat of a call that took effect: refused, or — where the declaration continues
    an approval — stopped for a person to approve that repeat."""
    if s.repeat_asks:
        return Refusal(
            "approval",
            HaltReason.APPROVAL_REQUIRED,
            f"{why}, so it is made again only if a person approves; nothing was run (call"
            f" sha256 {call_sha256(p.name, dict(p.args))})",
        )
    return Refusal("repeat", HaltReason.REPEAT_REFUSED, f"{why}, so it is not made twice")


def success_refusal(s: Snapshot) -> Refusal | None:
    """Why the runtime will not end the run `completed` on `s`, or None."""
    if s.unreceipted or s.unreceipted_omitted:
        return Refusal(
            "receipts",
            HaltReason.SIDE_EFFECT_UNKNOWN,
            "no success while a side-effecting call lacks complete receipts: "
            + pending_summary(s.unreceipted, s.unreceipted_omitted),
        )
    p = s.proposal
    if isinstance(p, FinalAnswer):
        verdict = ground(p.text, s.receipted)
        if verdict.grounded:
            return None
        if verdict.missing:
            said = ", ".join(repr(v) for v in verdict.missing[:5])
            why = f"the answer states {said}, which no receipted tool result returned"
        else:
            why = "no value a receipted tool result returned backs the answer"
        return Refusal("grounded", HaltReason.UNGROUNDED_ANSWER, f"no success: {why}")
    t = s.tool
    if t is None or not t.final:
        return Refusal(
            "grounded",
            HaltReason.UNGROUNDED_ANSWER,
            "no success: the run has no answer (no grounded final answer, no tool result"
            " carrying the goal)",
        )
    if t.status != "returned" or not receipts_complete(t.receipts):
        return Refusal(
            "grounded",
            HaltReason.UNGROUNDED_ANSWER,
            f"no success: {t.name}'s result carries the goal without complete receipts",
        )
    return None


def refusal(s: Snapshot, *, completes: bool, runs_tool: bool) -> Refusal | None:
    """The runtime's refusal of an edge that halts `completed` (`completes`) or enters a
    state whose action runs the proposed tool (`runs_tool`), decided on `s`; None for a run
    under older success rules, which were decided without this contract."""
    if s.rules < CONTRACT_SINCE:
        return None
    if completes:
        return success_refusal(s)
    if runs_tool:
        return tool_refusal(s)
    return None


def allow_list(
    declared: tuple[str, ...] | None, registered: tuple[str, ...], allow: Sequence[str] | None
) -> tuple[str, ...]:
    """The run's allow-list: the tools the declaration's `tools:` lists, narrowed to `allow`
    when the operator names some (`--allow`), and to the tools registered. For a declaration
    without `tools:`, `allow` is the whole list, and without it the list is empty: a tools
    module's discovery is not permission. Raises `InvalidInputError` when `allow` would widen
    the declaration or names a tool nobody registered, and when tools were registered of
    which the run may call none (a run handed tools it may not use is a mistake to name
    before it starts, not a `tool_refused` at its first proposal)."""
    if allow is None:
        if declared is None:
            if registered:
                raise InvalidInputError(
                    "the machine lists no tools (no tools:) and no allow-list was given, so"
                    f" none of the registered tools ({', '.join(registered)}) may run: a"
                    " tools module registers tools, it does not permit them. Name those"
                    " this run may call with --allow NAME[,NAME] (allow= in Python), or"
                    " list them under tools: in the machine"
                )
            return ()
        return tuple(n for n in declared if n in registered)
    names = tuple(dict.fromkeys(n.strip() for n in allow if n.strip()))
    if declared is not None:
        wider = [n for n in names if n not in declared]
        if wider:
            raise InvalidInputError(
                f"the allow-list (--allow) names {', '.join(map(repr, wider))}, which the"
                f" machine's tools: ({', '.join(declared) or 'none'}) does not list: an"
                " allow-list narrows the declaration, never widens it"
            )
    unknown = [n for n in names if n not in registered]
    if unknown:
        known = ", ".join(registered) or "none"
        raise InvalidInputError(
            f"the allow-list (--allow) names {', '.join(map(repr, unknown))}, which no"
            f" registered tool is (registered: {known})"
        )
    return names


def may_reissue(*, side_effect: bool, idempotent: bool) -> bool:
    """Whether a call cut off with no word back may be made again: a read, or an idempotent
    tool (the same arguments, so the same idempotency key). The live run and `resume` both
    ask this."""
    return not side_effect or idempotent
