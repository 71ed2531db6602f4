"""A fork's lineage as the review surfaces show it (`show`, the report, the console's run
page): its parent and the step it was forked at, what it changed, whether the parent's
journal still holds the event it was forked from as it was, and where the fork first went
another way than its parent.

Everything but the comparison with the parent is read from the fork's own chained
`forked` event; the comparison needs the parent's events (the same journal, or none: the
surfaces then say the parent is not there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from fsm_agent.journal.store import Event, Store
from fsm_agent.review.fork_replay import own_lineage
from fsm_agent.review.report_html import esc
from fsm_agent.review.view import abridge
from fsm_agent.run_ids import RunNotFound
from fsm_agent.runtime.fork_lineage import Lineage


@attrs.frozen
class ParentFacts:
    """The parent's events and their hashes (hex), as its journal holds them now."""

    events: tuple[Event, ...]
    hashes: tuple[str, ...]


@attrs.frozen
class ForkView:
    """What a review shows of a fork. `parent_holds` is whether the parent's journal still
    holds, at the fork point, the event hash the lineage names (None: the parent is not in
    this journal); `divergence` where the fork first went another way (None: unknown)."""

    lineage: Lineage
    forked_seq: int
    step: int
    max_steps: int
    changes: tuple[str, ...]
    parent_holds: bool | None
    divergence: str | None


def parent_facts(store: Store, events: Sequence[Event]) -> ParentFacts | None:
    """The facts of a fork's parent from `store` (None: no fork, or no parent there)."""
    found = own_lineage(events)
    if found is None:
        return None
    try:
        _, links, _ = store.chain(found[1].parent)
        parent = store.events(found[1].parent)
    except RunNotFound:
        return None
    return ParentFacts(tuple(parent), tuple(x.hash or "" for x in links))


def fork_view(events: Sequence[Event], parent: ParentFacts | None) -> ForkView | None:
    """A fork's view (None: the run is no fork)."""
    found = own_lineage(events)
    if found is None:
        return None
    index, lineage = found
    at = events[lineage.at].snapshot if lineage.at < len(events) else events[index].snapshot
    holds = divergence = None
    if parent is not None:
        hashes = parent.hashes
        holds = lineage.at < len(hashes) and hashes[lineage.at] == lineage.parent_hash
        divergence = first_divergence(events[index + 1 :], parent.events[lineage.at + 1 :])
    return ForkView(
        lineage=lineage, forked_seq=events[index].seq, step=at.meters.steps_used,
        max_steps=at.budgets.max_steps, changes=tuple(lineage.changes()),
        parent_holds=holds, divergence=divergence,
    )  # fmt: skip


def _key(e: Event) -> tuple[Any, ...]:
    """What two transitions must share to be the same step: the edge, and the facts."""
    f = e.facts
    fact: Any = None
    if f is not None and f.action == "model":
        fact = ("model", f.reply, f.error)
    elif f is not None and f.tool is not None:
        fact = (f.action, f.tool.name, f.tool.args, f.tool.status, f.tool.observation)
    return (e.source, e.trigger, e.dest, e.halt, e.retry, fact)


def _step(e: Event) -> str:
    """One transition as the divergence line names it."""
    text = f"seq {e.seq} {e.source} → {e.dest} [{e.trigger}]"
    if e.halt is not None:
        text += f" halt {e.halt.value}"
    f = e.facts
    if f is not None and f.action == "model":
        text += f", reply {abridge(f.reply, 80)}"
    elif f is not None and f.tool is not None:
        text += f", {f.tool.name}({abridge(f.tool.args, 60)}) {f.tool.status}"
    return text


def first_divergence(mine: Sequence[Event], theirs: Sequence[Event]) -> str:
    """Where the fork's transitions after the fork point (`mine`) first differ from the
    parent's after it (`theirs`): edge or facts; operator acts and take-overs aside."""
    ours = [e for e in mine if e.kind == "transition"]
    parent = [e for e in theirs if e.kind == "transition"]
    for a, b in zip(ours, parent, strict=False):
        if _key(a) != _key(b):
            return f"at {_step(a)}; the parent there: {_step(b)}"
    if len(ours) > len(parent):
        end = "its journal ends" if not parent else f"it ended with {_step(parent[-1])}"
        return f"at {_step(ours[len(parent)])}, where the parent has no more steps ({end})"
    if len(parent) > len(ours):
        return (
            f"none yet: its {len(ours)} steps went the parent's way; the parent went on with"
            f" {_step(parent[len(ours)])}"
        )
    return f"none: its {len(ours)} steps went exactly the parent's way"


def fork_lines(view: ForkView) -> list[str]:
    """The view as `show` prints it."""
    lin = view.lineage
    lines = [
        f"fork of run {lin.parent} at seq {lin.at} (step {view.step}/{view.max_steps},"
        f" {lin.state}); its lineage is seq {view.forked_seq}",
        f"changed: {'; '.join(view.changes) if view.changes else 'nothing but where it goes on'}",
        f"parent: {_holds(view)}",
    ]
    if view.divergence is not None:
        lines.append(f"first divergence from the parent: {view.divergence}")
    return lines


def _holds(view: ForkView) -> str:
    lin = view.lineage
    at, digest = lin.at, lin.parent_hash[:12]
    if view.parent_holds is None:
        return f"run {lin.parent} is not in this journal (its event hash at seq {at}: {digest})"
    if view.parent_holds:
        return f"its event at seq {at} is still the one forked from (hash {digest})"
    return (
        f"its event at seq {at} is NOT the one forked from (the lineage names hash {digest}):"
        f" the parent's journal changed since; see `fsm-agent verify {lin.parent}`"
    )


def fork_html(view: ForkView | None) -> str:
    """The view as the report's and the console's header show it ('' for no fork)."""
    if view is None:
        return ""
    items = "".join(f"<li>{esc(line)}</li>" for line in fork_lines(view))
    return f'<section id="lineage"><h2>Lineage</h2><ul>{items}</ul></section>'
