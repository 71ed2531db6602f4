"""The abstract run `fsm-agent check` explores: a configuration, what each action can do to
it, and what every built-in guard means on it.

A configuration is the state plus what the guards can read, abstracted: the step and retry
meters exactly (bounded by the budgets), the halt lane (local or not), the last proposal's
facts (its kind; for a tool call: allow-listed, privileged, thrashing; for an answer:
grounded; for a rejection: empty, repair vote refused), the last tool outcome's facts
(returned, failed or timed out; receipts complete; a final value; retryable), whether a
side-effecting call still lacks complete receipts (pending) and whether some call's complete
receipts were collected (evidence). The wall clock and the money meter are not counted:
either may trip after any action (a run may always end `wall_clock` or `cost_cap`), and no
cycle may rely on them to end. User guards and the judge's vote are free booleans (one value
per decision, the same for every edge of that decision). Every other guard, and the
runtime's contract, is decided by the runtime's own code on the snapshot a configuration
stands for (`fsm_agent.checking.concrete`): there is no second account of what they mean.

Facts no guard can read before an action overwrites them are dropped on entering a state
(`Liveness`), so configurations that differ only in dead facts are one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

import attrs

from fsm_agent.checking.concrete import snapshot_of
from fsm_agent.declaration.spec import (
    ACTION_OUTCOMES,
    BUDGET_TRIGGER,
    USER_FAILURES,
    MachineSpec,
    TransitionSpec,
)
from fsm_agent.halt import HaltReason
from fsm_agent.runtime.contract import refusal
from fsm_agent.runtime.guards import BUILTIN_GUARDS

#: Built-in guards the configuration does not decide (the judge's vote); every other
#: built-in is decided by `guard_value`, and user guards (`package.module:function`) are free.
FREE_BUILTINS = frozenset({"judge_agrees"})
#: Guards that read the last proposal, and those that read the last tool outcome.
_PROPOSAL_GUARDS = frozenset(
    {
        "tool_allowed",
        "privileged_cleared",
        "answer_grounded",
        "thrashing",
        "reply_empty",
        "repair_refused",
    }
)
_TOOL_GUARDS = frozenset({"receipts_complete", "goal_satisfied", "error_retryable"})
#: The outcome a user action that declares no `outcomes:` may return beside those its
#: edges name: no edge handles it, so such a state is a gap until it declares its outcomes.
UNDECLARED = "an undeclared outcome"


class Config(NamedTuple):
    """One abstract configuration of a run, on entering `state` (before its action)."""

    state: str
    steps: int
    retries: int
    lane_local: bool
    kind: str | None = None  # tool_call, answer, handoff, rejected
    allowed: bool = False
    privileged: bool = False
    thrash: bool = False
    grounded: bool = False
    empty: bool = False
    refused: bool = False
    tool: str | None = None  # returned, failed, timed_out
    complete: bool = False
    final: bool = False
    retryable: bool = False
    pending: bool = False
    evidence: bool = False
    #: the proposed tool needs a person's approval; a person approved the proposed call
    approval: bool = False
    approved: bool = False
    #: in `handoff`, waiting for a person's decision: `approval` or `answer`
    awaits: str | None = None

    def facts(self) -> str:
        """The facts a reader needs, as `kind allowed privileged …` words."""
        words = [] if self.lane_local else ["halt lane not local"]
        if self.kind == "tool_call":
            words.append(
                "tool call"
                + "".join(
                    f", {w}"
                    for w, on in (
                        ("not allow-listed", not self.allowed),
                        ("privileged", self.privileged),
                        ("repeated", self.thrash),
                        ("needs approval", self.approval),
                        ("approved", self.approved),
                    )
                    if on
                )
            )
        elif self.kind == "answer":
            words.append("answer, " + ("grounded" if self.grounded else "not grounded"))
        elif self.kind == "rejected":
            words.append(
                "rejected reply"
                + (", empty" if self.empty else "")
                + (", repair vote refused" if self.refused else "")
            )
        elif self.kind is not None:
            words.append(self.kind)
        if self.tool == "returned":
            words.append(
                "tool returned "
                + ("complete receipts" if self.complete else "incomplete receipts")
                + (", a final value" if self.final else "")
            )
        elif self.tool is not None:
            words.append(
                f"tool {self.tool.replace('_', ' ')}" + (", retryable" if self.retryable else "")
            )
        if self.pending:
            words.append("a side effect lacks receipts")
        if self.evidence:
            words.append("receipts collected")
        if self.awaits is not None:
            words.append(f"waiting for a person's {self.awaits}")
        return "; ".join(words)


def base(ref: str) -> tuple[bool, str]:
    """(positive?, guard name) of a guard reference, `not` prefixes folded."""
    ref, positive = ref.strip(), True
    while ref.startswith("not "):
        ref, positive = ref[4:].strip(), not positive
    return positive, ref


def is_free(name: str) -> bool:
    """A guard whose value the configuration does not decide (a user guard, the judge)."""
    return ":" in name or name in FREE_BUILTINS


@attrs.frozen
class Bounds:
    """The budgets the meters are bounded by, and what the run may call."""

    max_steps: int
    max_retries: int
    #: False when the tool registry says no allow-listed tool is privileged
    privileged_possible: bool = True
    #: True when a proposed call may wait for a person's approval that continues the run
    #: (the machine declares an `approved` edge out of handoff)
    approval_possible: bool = False


#: Bounds for what reads no budget (the contract).
_UNBOUNDED = Bounds(10**9, 10**9)


def guard_value(name: str, c: Config, bounds: Bounds) -> bool:
    """What built-in guard `name` returns on `c`: the runtime's own predicate
    (`fsm_agent.runtime.guards`), run on the snapshot `c` stands for
    (`fsm_agent.checking.concrete`). A decision is made after an action no meter stopped."""
    return BUILTIN_GUARDS[name](snapshot_of(c, bounds))


def contract_refusal(
    c: Config, t: TransitionSpec, spec: MachineSpec
) -> tuple[str, HaltReason] | None:
    """The runtime's contract (`fsm_agent.runtime.contract.refusal`, its own code) on the
    decision that chose `t` on `c`: (`runtime:<rule>`, the halt) when the runtime refuses
    it for certain, or None. The rules that need the identity of calls are
    `repeat_refusals`. (No rule reads a budget: any bounds stand for the run's.)"""
    found = refusal(
        snapshot_of(c, _UNBOUNDED),
        completes=t.halt is HaltReason.COMPLETED,
        runs_tool=spec.state(t.dest).action == "tool",
    )
    return None if found is None else (found.guard, found.reason)


def repeat_refusals(
    c: Config, t: TransitionSpec, spec: MachineSpec, *, asks: bool
) -> tuple[tuple[str, HaltReason], ...]:
    """The refusals of the contract's call-identity rules that may also stop the decision
    that chose `t` on `c` (configurations do not keep which calls were made, so these are
    possibilities): a proposed call may repeat an earlier one that took effect (once any
    call may have been made; with `asks`, where the declaration continues approvals, the
    repeat waits for one) or one whose outcome is unknown (while a call is pending)."""
    if spec.state(t.dest).action != "tool" or c.kind != "tool_call":
        return ()
    out: tuple[tuple[str, HaltReason], ...] = ()
    may_repeat = c.steps > 1 or c.pending or c.evidence or c.tool is not None
    if may_repeat and not c.approved:  # an approved call runs, a repeat or not
        out += (
            ("runtime:approval", HaltReason.APPROVAL_REQUIRED)
            if asks
            else ("runtime:repeat", HaltReason.REPEAT_REFUSED),
        )
    if c.pending:
        out += (("runtime:unknown_effect", HaltReason.SIDE_EFFECT_UNKNOWN),)
    return out


class Liveness:
    """Which guards the machine reads, and which fact groups are live on entering each
    state (read by some guard before an action overwrites them)."""

    def __init__(self, spec: MachineSpec) -> None:
        self.spec = spec
        self.reads = frozenset(base(g)[1] for t in spec.transitions for g in t.guards)
        reads_at: dict[str, set[str]] = {s.name: set() for s in spec.states}
        for t in spec.transitions:
            reads_at[t.source].update(base(g)[1] for g in t.guards)
        live: dict[str, set[str]] = {}
        completes = {t.source for t in spec.transitions if t.halt is HaltReason.COMPLETED}
        for s in spec.states:
            groups: set[str] = set()
            if s.name in completes:  # the runtime's success rule reads both
                groups.update(("proposal", "tool"))
            if reads_at[s.name] & _PROPOSAL_GUARDS or s.action == "tool":
                groups.add("proposal")  # a tool state's entry is checked for privilege
            if reads_at[s.name] & _TOOL_GUARDS or s.action == "receipts":
                groups.add("tool")
            live[s.name] = groups
        changed = True
        while changed:  # live(S): what S reads, and what its dests read that S does not overwrite
            changed = False
            for t in spec.transitions:
                at_dest = live[t.dest] - _overwritten(spec.state(t.dest).action)
                carried = at_dest - _overwritten(spec.state(t.source).action)
                if not carried <= live[t.source]:
                    live[t.source] |= carried
                    changed = True
        self.live: Mapping[str, frozenset[str]] = {
            name: frozenset(groups - _overwritten(spec.state(name).action))
            for name, groups in live.items()
        }

    def reads_any(self, *names: str) -> bool:
        return any(n in self.reads for n in names)

    def entering(self, c: Config, state: str) -> Config:
        """`c` as the run enters `state`, its dead facts reset."""
        live = self.live[state]
        c = c._replace(state=state)
        if "proposal" not in live:
            c = c._replace(
                kind=None,
                allowed=False,
                privileged=False,
                thrash=False,
                grounded=False,
                empty=False,
                refused=False,
                approval=False,
            )
        if "tool" not in live:
            c = c._replace(tool=None, complete=False, final=False, retryable=False)
        return c


def _overwritten(action: str | None) -> frozenset[str]:
    if action == "model":
        return frozenset({"proposal"})
    if action is None or action == "receipts":
        return frozenset()
    return frozenset({"tool"})  # a tool call or a user action


def _both(wanted: bool) -> tuple[bool, ...]:
    return (False, True) if wanted else (False,)


def model_outcomes(c: Config, live: Liveness, bounds: Bounds) -> Iterator[tuple[str, Config]]:
    """Every (trigger, configuration) a model call can lead to: one more step."""
    c = c._replace(steps=c.steps + 1)
    allowed = (False, True)  # the runtime's contract reads the allow-list
    privileged = _both(bounds.privileged_possible)
    thrash = _both(live.reads_any("thrashing"))
    approval = _both(bounds.approval_possible)
    approved = _both(c.approved)  # the same call proposed again runs on its approval
    for a in allowed:
        for p in privileged:
            for t in thrash:
                for n in approval:
                    for ok in approved if n else (False,):
                        yield (
                            "tool_call",
                            c._replace(kind="tool_call", allowed=a, privileged=p, thrash=t,
                                       approval=n, approved=ok),
                        )  # fmt: skip
    c = c._replace(approval=False, approved=False)
    grounded = _both(c.evidence)  # the runtime's success rule grounds every answer
    for g in grounded:
        yield "answer", c._replace(kind="answer", grounded=g)
    yield "handoff", c._replace(kind="handoff")
    for e in _both(live.reads_any("reply_empty")):
        for r in _both(live.reads_any("repair_refused")):
            yield "rejected", c._replace(kind="rejected", empty=e, refused=r)


def _settled(c: Config, complete: bool) -> tuple[bool, ...]:
    """Pending after a side-effecting call: complete receipts settle the same call (another
    may still be pending), anything less leaves one pending."""
    if not complete:
        return (True,)
    return (False, True) if c.pending else (False,)


def call_outcomes(
    c: Config, live: Liveness, returned: tuple[str, ...], failures: tuple[str, str]
) -> Iterator[tuple[str, Config]]:
    """Every (trigger, configuration) a tool call or user action can lead to. `returned`:
    the triggers of a call that returned; `failures`: those of a failure and a timeout."""
    finals = (False, True)  # the runtime's success rule reads a tool's final value
    for trigger in returned:
        for complete in (False, True):
            for final in finals:
                for pending in sorted(
                    {*_settled(c, complete), c.pending}
                ):  # a read changes nothing
                    yield (
                        trigger,
                        c._replace(
                            tool="returned",
                            complete=complete,
                            final=final,
                            retryable=False,
                            pending=pending,
                        ),
                    )
    failed, timed_out = failures
    for retryable in _both(live.reads_any("error_retryable")):
        for pending in sorted({True, c.pending}):
            yield (
                failed,
                c._replace(
                    tool="failed", complete=False, final=False, retryable=retryable, pending=pending
                ),
            )
    for pending in sorted({True, c.pending}):
        yield (
            timed_out,
            c._replace(
                tool="timed_out", complete=False, final=False, retryable=False, pending=pending
            ),
        )


def outcomes(c: Config, action: str, live: Liveness, bounds: Bounds) -> list[tuple[str, Config]]:
    """Every (trigger, configuration) the action of `c`'s state can lead to."""
    if action == "model":
        return list(model_outcomes(c, live, bounds))
    if action == "tool":  # the call is made: an approval lets that one call run
        c = c._replace(approved=False)
        return list(call_outcomes(c, live, ("tool_returned",), ("tool_failed", "tool_timed_out")))
    if action == "receipts":
        collected = c.evidence or (c.tool == "returned" and c.complete)
        return [
            (
                "collected",
                c._replace(evidence=collected),
            )
        ]
    declared = live.spec.state(c.state).outcomes
    if declared is None:  # what the edges name, and whatever else the action may return
        named = (t.trigger for t in live.spec.transitions if t.source == c.state)
        declared = (*dict.fromkeys(n for n in named if n not in USER_FAILURES), UNDECLARED)
    declared = tuple(n for n in declared if n != BUDGET_TRIGGER)
    return list(call_outcomes(c, live, declared, USER_FAILURES))


def action_triggers(action: str | None) -> tuple[str, ...]:
    """The triggers a built-in action produces (for a user action: its failures only)."""
    if action is None:
        return ()
    return ACTION_OUTCOMES.get(action, USER_FAILURES)
