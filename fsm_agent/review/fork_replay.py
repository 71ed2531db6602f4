"""What replay says of a fork: each stretch of its events is re-decided under the declaration
that decided it (`fsm_agent.review.replay` walks them) — what it copied from its parent under
the parent's declaration (kept in the fork's lineage, in its chain, and checked against the
sha256 the lineage names), the rest under the fork's own — never a copied event claimed for
the fork's declaration. A counterfactual (`--machine`, budget flags) re-decides every
stretch under the other declaration or budgets, each matched by transition identity against
the declaration that decided it as recorded.
"""

from __future__ import annotations

from collections.abc import Sequence

from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.errors import InvalidInputError
from fsm_agent.journal.store import Event
from fsm_agent.runtime.fork_lineage import Lineage, Stretch, lineages


def decided_under(
    events: Sequence[Event],
    parts: Sequence[Stretch],
    specs: Sequence[MachineSpec],
    machine: MachineSpec | None,
) -> str:
    """What each stretch of a fork was re-decided under, as the summary's last clause."""
    _, own = lineages(events)[-1]
    said = []
    for i, (part, spec) in enumerate(zip(parts, specs, strict=True)):
        whose = "its own declaration" if i == len(parts) - 1 else "its parent's declaration"
        seqs = f"seq {events[part.start].seq}..{events[part.end - 1].seq}"
        said.append(f"{seqs} under {whose} {spec.name} ({spec.sha256[:12]})")
    if machine is not None:
        return (
            f" (a fork of run {own.parent} at seq {own.at}; every event under"
            f" {machine.name} ({machine.sha256[:12]}), decided as recorded {'; '.join(said)})"
        )
    return f" (a fork of run {own.parent} at seq {own.at}: {'; '.join(said)})"


def kept_wrong(events: Sequence[Event], part: Stretch) -> str:
    """Why a stretch's declaration cannot be used: it is not the one its lineage names."""
    first, last = events[part.start].seq, events[part.end - 1].seq
    return (
        f"the declaration kept for seq {first}..{last} does not match the sha256 its lineage"
        f" names ({part.sha256[:12]}…)"
    )


def own_lineage(events: Sequence[Event]) -> tuple[int, Lineage] | None:
    """The index of a fork's own `forked` event and its lineage (None: no fork, or a
    lineage that cannot be read: replay says why)."""
    try:
        found = lineages(events)
    except InvalidInputError:
        return None
    return found[-1] if found else None
