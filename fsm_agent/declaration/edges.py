"""Transition identity: which declared transition a journaled event took, and which
transition of another declaration is the same one.

A transition is identified by what it declares — source, trigger, dest, guards, halt
reason, retry mark (and which of several identical declarations it is) — not by its
position, so a picture marks exactly the edges a run took (never a parallel edge between
the same states on the same trigger), and a counterfactual replay against a declaration
that adds, removes or reorders edges still compares each decision with the same edge.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fsm_agent.declaration.spec import BUDGET_TRIGGER, MachineSpec, TransitionSpec
from fsm_agent.journal.store import Event, GuardResult
from fsm_agent.runtime.guards import GUARD_SINCE

#: (source, trigger, dest, guards, halt, retry, implicit, n-th identical declaration)
EdgeId = tuple[str, str, str, tuple[str, ...], str | None, bool, bool, int]


def edge_ids(spec: MachineSpec) -> dict[int, EdgeId]:
    """Every transition of `spec` by index -> its identity."""
    seen: dict[tuple[Any, ...], int] = {}
    ids: dict[int, EdgeId] = {}
    for t in spec.transitions:
        content = (t.source, t.trigger, t.dest, t.guards, t.halt.value if t.halt else None,
                   t.retry, t.implicit)  # fmt: skip
        nth = seen.get(content, 0)
        seen[content] = nth + 1
        ids[t.index] = (*content, nth)
    return ids


def keyed(
    results: tuple[GuardResult, ...], ids: Mapping[int, EdgeId]
) -> dict[tuple[EdgeId | int, str], bool]:
    """Guard results keyed by (transition identity, guard); an index the declaration does
    not have stays an index (it matches nothing in another declaration)."""
    return {(ids.get(g.transition, g.transition), g.guard): g.result for g in results}


def taken_transition(spec: MachineSpec, event: Event) -> TransitionSpec | None:
    """The declared transition `event` took, from its trigger and recorded guard results
    (the first candidate whose guards all passed, as the live decision picks); None for an
    event no declared transition made (the start, an operator's act, a take-over, a halt
    the runtime imposed)."""
    if event.kind != "transition" or event.source is None or event.trigger is None:
        return None
    if event.trigger == BUDGET_TRIGGER:
        return next((t for t in spec.transitions if t.implicit and t.source == event.source), None)
    for t in spec.candidates(event.source, event.trigger):
        results = {g.guard: g.result for g in event.guards if g.transition == t.index}
        if False in results.values():
            continue  # this candidate was tried and refused
        applies = [g for g in t.guards if GUARD_SINCE.get(g, 0) <= event.snapshot.rules]
        if all(results.get(g) is True for g in applies):
            matches = t.dest == event.dest and t.halt == event.halt and t.retry == event.retry
            return t if matches else None
        return None  # a candidate neither refused nor passed: the journal does not say
    return None
