"""What a refuted `receipts` or `privileged` property blames, edge by edge, each under the
lint rule that names it: one cause, one finding.

`fsm-agent lint` has no second account of these rules: it reports the causes found here, on
check's own exploration, instead of the property's code.

- `receipts`: a reachable decision chooses an edge that halts `completed` where the
  runtime's success rule refuses it (the run halts `side_effect_unknown` or
  `ungrounded_answer` instead): the declaration's guards, not receipts, decided success.
  HP003 when a user guard is on the edge, else HP001 from a model state, else HP006.
- `privileged`: a privileged tool enters a tool state before the local halt check passed
  (HP010); a `retry: true` edge is taken with no `retries_left` passing (HP004); an edge
  goes on after a failure without `retry: true` (HX006, `uncounted_retry`).

An edge `receipts` blames is not dead for `dead` besides, even where every run that chooses
it is refused, nor are the `done` and `completed` it never reaches: one cause, one finding.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final

import attrs

from fsm_agent.checking.explore import Exploration, Step
from fsm_agent.checking.model import base
from fsm_agent.declaration.spec import MachineSpec, TransitionSpec, uncounted_retry
from fsm_agent.halt import HANDOFF, HaltReason

#: Guards whose passing is the local halt check before a privileged tool.
LOCAL_CHECKS: Final = frozenset({"privileged_cleared", "halt_lane_local"})


@attrs.frozen
class Cause:
    """One edge a refuted property blames: the lint rule that reports it, the transition,
    what check found there (one sentence), and a shortest path whose last step shows it."""

    code: str
    transition: int
    summary: str
    path: tuple[Step, ...] = attrs.field(default=(), eq=False, repr=False)


def passed(log: Iterable[tuple[int, str, bool]], names: frozenset[str]) -> bool:
    """Some guard of `names` was evaluated with its own value True (a `not` refused)."""
    for _, ref, result in log:
        positive, name = base(ref)
        if name in names and result == positive:
            return True
    return False


def user_guards(t: TransitionSpec) -> list[str]:
    """The user guards (`package.module:function`) on `t`, `not` folded."""
    return [name for _, name in map(base, t.guards) if ":" in name]


def success_rule(spec: MachineSpec, t: TransitionSpec) -> str:
    """The lint rule for a way into done the runtime refuses, by what decided it: a user
    guard (HP003), the model's reply (HP001), a tool, receipts or user-action state (HP006)."""
    if user_guards(t):
        return "HP003"
    return "HP001" if spec.state(t.source).action == "model" else "HP006"


def refused_success(s: Step) -> bool:
    """The runtime's success rule refused the decision of `s` (an edge that halts
    `completed`: the contract's other rules refuse only edges into a tool state)."""
    return (
        s.refused is not None
        and s.transition is not None
        and s.transition.halt is HaltReason.COMPLETED
    )


def _edge(t: TransitionSpec) -> str:
    return f"transition {t.index} {t.trigger!r} {t.source} → {t.dest}"


def _refused_why(s: Step) -> str:
    rule = next((ref for _, ref, ok in s.log if ref.startswith("runtime:") and not ok), "")
    if rule == "runtime:receipts":
        why = "a side-effecting call lacks complete receipts"
    elif s.after.kind == "answer":
        why = "the answer is not grounded in what receipted calls returned"
    else:
        why = "no tool result with complete receipts carries the goal"
    reason = s.refused.value if s.refused is not None else "handoff"
    return f"{why} (the run halts {reason})"


def _kind(spec: MachineSpec, code: str, t: TransitionSpec) -> str:
    if code == "HP003":
        return f"success decided by {', '.join(user_guards(t))}"
    if code == "HP001":
        return "success decided by the model's reply"
    if code == "HP006":
        action = spec.state(t.source).action
        guards = ", ".join(t.guards) or "none"
        return f"success without receipts (action {action}, guards: {guards})"
    return {
        "HP010": "a privileged tool can run before the local halt check",
        "HP004": "a retry is decided without the local retry meter",
        "HX006": "a retry that never counts",
    }[code]


def _by_depth(e: Exploration, steps: Iterable[Step]) -> list[Step]:
    return sorted(steps, key=lambda s: e.depth[s.source])


def _first(e: Exploration, found: Iterator[tuple[str, Step, str]]) -> tuple[Cause, ...]:
    """One cause per (rule, transition): the first found, with its path."""
    out: dict[tuple[str, int], Cause] = {}
    for code, s, what in found:
        t = s.transition
        assert t is not None  # noqa: S101 - every cause is of a chosen edge
        if (code, t.index) not in out:
            summary = f"{_kind(e.spec, code, t)}: {_edge(t)} {what}"
            out[(code, t.index)] = Cause(code, t.index, summary, (*e.path_to(s.source), s))
    return tuple(out.values())


def receipt_causes(e: Exploration) -> tuple[Cause, ...]:
    """Every edge into done a reachable decision chooses where the runtime's success rule
    refuses it, nearest the start first."""

    def found() -> Iterator[tuple[str, Step, str]]:
        for s in _by_depth(e, e.all_steps()):
            if refused_success(s):
                assert s.transition is not None  # noqa: S101 - refused_success says so
                what = f"is chosen where the runtime's success rule refuses it: {_refused_why(s)}"
                yield success_rule(e.spec, s.transition), s, what

    return _first(e, found())


def privileged_causes(e: Exploration) -> tuple[Cause, ...]:
    """Every privileged tool entered before the local halt check (nearest the start first),
    then every retry the local retry meter did not count or allow; a step the runtime's
    contract refuses is not taken."""
    tools = {s.name for s in e.spec.states if s.action == "tool"}
    steps = [s for s in _by_depth(e, e.all_steps()) if s.transition is not None]
    steps = [s for s in steps if s.refused is None]

    def found() -> Iterator[tuple[str, Step, str]]:
        for s in steps:
            t = s.transition
            assert t is not None  # noqa: S101 - filtered above
            if (
                t.dest in tools
                and s.after.kind == "tool_call"
                and s.after.privileged
                and not passed(s.log, LOCAL_CHECKS)
                and s.source.state != HANDOFF  # an approval: the runtime's privileged rule
                # passed on this very call before it waited (it refuses first)
            ):
                yield "HP010", s, "is taken with no privileged_cleared (or halt_lane_local) passing"
        for s in steps:
            t = s.transition
            assert t is not None  # noqa: S101 - filtered above
            if t.retry and not passed(s.log, frozenset({"retries_left"})):
                yield "HP004", s, "retries with no retries_left passing"
            elif uncounted_retry(t, e.spec.state(t.dest)):
                yield (
                    "HX006",
                    s,
                    "goes on after a failure without `retry: true`, so the retry meter does"
                    " not decrement in code",
                )

    return _first(e, found())
