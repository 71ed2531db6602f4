"""The five properties `fsm-agent check` proves over an exploration, each proven or refuted
with a shortest counterexample path.

- `halts`: no reachable cycle (the step and retry meters only grow, so a repeated
  configuration is a loop no step or retry budget ends: only the wall clock does, or the
  money cap where its tools or user actions report a cost); the longest run in transitions
  and model calls.
- `no-gap`: in every reachable configuration some edge's guards pass for every outcome
  its action can produce (`no_transition` cannot happen).
- `receipts`: no reachable decision chooses an edge into `done` that the runtime's success
  rule refuses (a side-effecting call lacking complete receipts, an answer receipted results
  do not ground, no tool result carrying the goal): the declaration's own guards decide
  success from receipts, and the runtime's contract never has to.
- `privileged`: a tool state is entered with a privileged tool proposed only by a decision
  whose local halt check (`privileged_cleared` or `halt_lane_local`) passed; every retry edge
  is taken only when the local retry meter (`retries_left`) allowed it, and none goes on
  after a failure without `retry: true`; the policy's control plane is local.
- `dead`: every declared state, edge and halt reason is reachable; edges that could also
  have fired where an earlier one was chosen are listed (information: declaration order
  picks the first).

A refuted `receipts` or `privileged` names each edge it blames as a `Cause`, under the lint
rule that reports it (`fsm_agent.checking.causes`): lint shows those, not a second finding.
"""

from __future__ import annotations

import functools
import sys
from collections import deque
from collections.abc import Iterable
from typing import Final

import attrs

from fsm_agent.checking.causes import (
    Cause,
    privileged_causes,
    receipt_causes,
    refused_success,
)
from fsm_agent.checking.explore import Exploration, Halt, Node, Step
from fsm_agent.checking.model import Config, contract_refusal
from fsm_agent.declaration.spec import BUDGET_TRIGGER, MachineSpec
from fsm_agent.halt import DONE, HANDOFF, HaltReason

#: property name -> what it claims, for reports.
CLAIMS: Final = {
    "halts": "every run halts within its step and retry budgets: no loop only the wall clock"
    " or the money cap ends",
    "no-gap": "some transition's guards pass in every reachable configuration",
    "receipts": "done only where the runtime's success rule allows it: every side effect"
    " receipted, the answer or the goal grounded in receipts",
    "privileged": "privileged tools only after the local halt check; retries and halts"
    " decided by local code",
    "dead": "every declared state, transition and halt reason is reachable",
}
#: property name -> the code `fsm-agent lint` reports it under.
CODES: Final = {
    "halts": "CK001",
    "no-gap": "CK002",
    "receipts": "CK003",
    "privileged": "CK004",
    "dead": "CK005",
}
GROUNDING: Final = frozenset({"answer_grounded", "goal_satisfied"})


@attrs.frozen
class Verdict:
    """One property: proven or not, why, and (refuted) the shortest bad path."""

    name: str
    proven: bool
    summary: str
    path: tuple[Step, ...] = ()
    #: for `halts` refuted: where the path's cycle starts (the steps from there repeat)
    loop_from: int | None = None
    #: for `halts` refuted: what ends the loop (`loop_enders`)
    ends: str | None = None
    details: tuple[str, ...] = ()
    #: the declaration's key path it points at, when not the path's last transition
    key: str | None = None
    #: for `halts` proven: (most transitions, most model calls) of any run
    longest: tuple[int, int] | None = None
    #: for `receipts` and `privileged` refuted: every edge blamed, under the lint rule that
    #: reports it (lint reports the property's own code only for a verdict that names none)
    causes: tuple[Cause, ...] = ()


def halts(e: Exploration) -> Verdict:
    cycle = _find_cycle(e)
    if cycle is not None:
        lead, loop = cycle
        ends = loop_enders(e.spec, loop)
        return Verdict(
            "halts",
            False,
            f"a run can loop with no step or retry budget to end it, until {ends} does: a"
            f" loop of {_plural(len(loop), 'transition')} from {loop[0].source.state!r}"
            " repeats",
            tuple(lead + loop),
            loop_from=len(lead),
            ends=ends,
        )
    longest, calls = longest_run(e)
    return Verdict(
        "halts",
        True,
        f"every run halts; the longest takes {longest} transitions and {calls} model calls",
        longest=(longest, calls),
    )


def loop_enders(spec: MachineSpec, loop: Iterable[Step]) -> str:
    """What can end a loop that makes no model call: the wall clock, and the money cap too
    when a tool call or a user action in it may report a cost (a receipts wait cannot)."""
    spends = any(spec.state(s.source.state).action not in (None, "receipts") for s in loop)
    return "the wall clock or the money cap" if spends else "the wall clock"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _find_cycle(e: Exploration) -> tuple[list[Step], list[Step]] | None:
    """A reachable cycle as (a shortest path to its first configuration, the cycle), or
    None: of the configurations on some cycle, one nearest the start, and a shortest cycle
    through it."""
    on_cycle = _cyclic(e)
    if not on_cycle:
        return None
    order = {c: n for n, c in enumerate(e.steps) if c in on_cycle}
    entry = min(on_cycle, key=lambda c: (e.depth[c], _weight(c), order[c]))
    group = on_cycle[entry]
    back: dict[Config, Step] = {}
    queue = deque([entry])
    while queue:  # breadth first inside the entry's component, back to the entry
        node = queue.popleft()
        for step in e.steps[node]:
            dest = step.dest
            if not isinstance(dest, Config) or on_cycle.get(dest) != group:
                continue
            if dest == entry:
                loop = [step]
                while loop[0].source != entry:
                    loop.insert(0, back[loop[0].source])
                return e.path_to(entry), loop
            if dest not in back:
                back[dest] = step
                queue.append(dest)
    raise AssertionError("a configuration of a cyclic component has no cycle back")


def _weight(c: Config) -> int:
    """How many facts a configuration has set (of two as near, the plainer one is shown)."""
    return (not c.lane_local) + sum(map(bool, c[4:]))


def _cyclic(e: Exploration) -> dict[Config, int]:
    """Every configuration on some cycle -> its strongly connected component's number
    (Tarjan's algorithm, iterative: explorations are deeper than Python's stack)."""
    index: dict[Config, int] = {}
    low: dict[Config, int] = {}
    stack: list[Config] = []
    on_stack: set[Config] = set()
    out: dict[Config, int] = {}
    groups = 0

    def succ(c: Config) -> list[Config]:
        return [s.dest for s in e.steps[c] if isinstance(s.dest, Config)]

    for root in e.steps:
        if root in index:
            continue
        work: list[tuple[Config, list[Config]]] = []
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work.append((root, succ(root)))
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, succ(nxt)))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] != index[node]:
                continue
            members = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                members.append(top)
                if top == node:
                    break
            if len(members) > 1 or node in succ(node):
                out.update(dict.fromkeys(members, groups))
                groups += 1
    return out


def longest_run(e: Exploration) -> tuple[int, int]:
    """(most transitions, most model calls) of any run; the exploration has no cycle."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(e.steps) + 1000))
    try:

        @functools.cache
        def longest(node: Node) -> int:
            if isinstance(node, Halt):
                return 0
            return max((1 + longest(s.dest) for s in e.steps[node]), default=0)

        most = max(longest(s) for s in e.starts)
    finally:
        sys.setrecursionlimit(limit)
    calls = max((n.steps for n in e.parent if isinstance(n, Halt)), default=0)
    return most, calls


def gaps(e: Exploration) -> Verdict:
    found = [
        s
        for s in e.all_steps()
        if s.transition is None and s.trigger != BUDGET_TRIGGER and s.source.state != HANDOFF
    ]  # a waiting run's story without a decision (nobody decides, the wait expires) is none
    if not found:
        return Verdict("no-gap", True, "some transition passes for every outcome of every action")
    where = sorted({f"{s.source.state} on {s.trigger!r} ({s.after.facts()})" for s in found})
    first = min(found, key=lambda s: e.depth[s.source])
    return Verdict(
        "no-gap",
        False,
        f"{len(where)} configurations where no transition passes (the run halts no_transition)",
        (*e.path_to(first.source), first),
        details=tuple(where[:20]) + ((f"… and {len(where) - 20} more",) if len(where) > 20 else ()),
    )


def receipts(e: Exploration) -> Verdict:
    """No decision chooses an edge into done that the runtime's success rule refuses on its
    configuration (`contract_refusal`: the runtime refuses it whatever the declaration's
    guards, so a declaration that leaves it to the runtime is refuted, edge by edge)."""
    bad = [
        s
        for s in e.all_steps()
        if isinstance(s.dest, Halt)
        and s.dest.state == DONE
        and (s.transition is None or contract_refusal(s.after, s.transition, e.spec) is not None)
    ]
    causes = receipt_causes(e)
    if bad:  # the explored model let a run into done that the runtime refuses: no rule names it
        first = min(bad, key=lambda s: e.depth[s.source])
        return Verdict(
            "receipts",
            False,
            "a run can end done while the runtime's success rule refuses it",
            (*e.path_to(first.source), first),
            causes=causes,
        )
    if causes:
        return _blamed("receipts", causes)
    return Verdict("receipts", True, "every way into done is receipted and grounded")


def _blamed(name: str, causes: tuple[Cause, ...], more: tuple[str, ...] = ()) -> Verdict:
    """A refuted verdict showing its first cause; the others (and `more`) as details."""
    first = causes[0]
    rest = tuple(f"{c.summary} (lint {c.code})" for c in causes[1:])
    return Verdict(
        name,
        False,
        f"{first.summary} (lint {first.code})",
        first.path,
        details=rest + more,
        key=f"$.transitions[{first.transition}]",
        causes=causes,
    )


def privileged(e: Exploration, policy_problems: tuple[str, ...] = ()) -> Verdict:
    causes = privileged_causes(e)
    if causes:
        return _blamed("privileged", causes, policy_problems)
    if policy_problems:
        return Verdict(
            "privileged", False, "the policy's control plane is not local", details=policy_problems
        )
    return Verdict(
        "privileged", True, "privileged tools only after the local halt check; retries counted"
    )


def dead(e: Exploration) -> Verdict:
    spec = e.spec
    states = {c.state for c in e.steps} | {n.state for n in e.parent if isinstance(n, Halt)}
    taken = {
        s.transition.index for s in e.all_steps() if s.transition is not None and s.refused is None
    }
    reasons: set[HaltReason] = {s.dest.reason for s in e.all_steps() if isinstance(s.dest, Halt)}
    # an edge `receipts` blames (chosen, then refused by the success rule) is its finding:
    # neither it nor the done and the completed it never reaches are dead besides
    blamed = [s.transition for s in e.all_steps() if refused_success(s) and s.transition]
    taken |= {t.index for t in blamed}
    states |= {t.dest for t in blamed}
    reasons |= {t.halt for t in blamed if t.halt is not None}
    missing = [f"state {s.name!r}" for s in spec.states if s.name not in states]
    missing += [
        f"transition {t.index} {t.trigger!r} {t.source} → {t.dest}"
        for t in spec.transitions
        if not t.implicit and t.index not in taken
    ]
    declared = dict.fromkeys(t.halt for t in spec.transitions if t.halt is not None)
    missing += [f"halt reason {r.value!r}" for r in declared if r not in reasons]
    overlaps = _overlaps(e)
    if missing:
        first = next((t for t in spec.transitions if not t.implicit and t.index not in taken), None)
        key = None if first is None else f"$.transitions[{first.index}]"
        return Verdict(
            "dead",
            False,
            f"{len(missing)} never reachable: {'; '.join(missing)}",
            details=overlaps,
            key=key,
        )
    return Verdict(
        "dead", True, "every state, transition and halt reason is reachable", details=overlaps
    )


def _overlaps(e: Exploration) -> tuple[str, ...]:
    """Per chosen edge, the later guarded edges that could also have fired (an edge with no
    guards is a catch-all by design and is not listed)."""
    pairs: dict[int, dict[int, int]] = {}
    for s in e.all_steps():
        if s.transition is not None:
            for later in s.overlaps:
                if e.spec.transitions[later].guards:
                    counts = pairs.setdefault(s.transition.index, {})
                    counts[later] = counts.get(later, 0) + 1
    out = []
    for first, counts in sorted(pairs.items()):
        t = e.spec.transitions[first]
        others = ", ".join(
            f"{later} (→ {e.spec.transitions[later].dest}, {n} configurations)"
            for later, n in sorted(counts.items())
        )
        out.append(f"{t.source} on {t.trigger!r}: order picks {first} (→ {t.dest}) over {others}")
    return tuple(out)


def check_all(e: Exploration, policy_problems: tuple[str, ...] = ()) -> tuple[Verdict, ...]:
    """Every property's verdict, in the order of `CLAIMS`."""
    return (halts(e), gaps(e), receipts(e), privileged(e, policy_problems), dead(e))
