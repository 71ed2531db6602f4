"""A fork's lineage as its journal holds it: the `forked` event's `Lineage` (where the fork
comes from, what it changed), and the stretches of a fork's events by the declaration that
decided them (what it copied under its parent's, the rest under its own). Written by
`fsm_agent.runtime.fork`; read by replay and every review surface.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import attrs

from fsm_agent.errors import InvalidInputError
from fsm_agent.journal import serde
from fsm_agent.journal.store import Event, RunRow

#: `Facts.action` of the `forked` event: its `reply` is the lineage.
FORK_ACTION: Final = "fork"


@attrs.frozen
class BudgetRaise:
    """One cap a fork raised over its parent's at the fork point."""

    name: str
    parent: float
    fork: float


@attrs.frozen
class Lineage:
    """Where a fork comes from, journaled (and so chained) in its `forked` event.

    `parent_hash` is the parent's event hash at seq `at` (hex; chained in `parent_chain`);
    `parent_machine_text` is the parent's declaration when it is not the fork's (the
    copied events were decided by it: replay re-decides them under it). `allowlist` and
    `thrash_limit` are the fork's where they differ from the parent's (None: the same);
    `model` is the model spec the fork was started with, when the caller named one.
    """

    parent: str
    at: int
    parent_hash: str
    parent_chain: str | None
    state: str
    parent_machine: str
    parent_machine_sha256: str
    machine: str
    machine_sha256: str
    parent_machine_text: str | None = None
    raised: tuple[BudgetRaise, ...] = ()
    allowlist: tuple[str, ...] | None = None
    thrash_limit: int | None = None
    model: str | None = None

    def changes(self) -> list[str]:
        """What the fork changed, one phrase each (empty: nothing but where it goes on)."""
        found = []
        if self.machine_sha256 != self.parent_machine_sha256:
            found.append(
                f"declaration {self.parent_machine} ({self.parent_machine_sha256[:12]}) →"
                f" {self.machine} ({self.machine_sha256[:12]})"
            )
        found += [f"{r.name} {number(r.parent)} → {number(r.fork)}" for r in self.raised]
        if self.allowlist is not None:
            found.append(f"allow-list → {', '.join(self.allowlist) or 'none'}")
        if self.thrash_limit is not None:
            found.append(f"thrash limit → {self.thrash_limit}")
        if self.model is not None:  # the parent's spec is not journaled: not a known change
            found.append(f"model given: {self.model} (the parent's model spec is not journaled)")
        return found


def number(value: float) -> str:
    """A cap as people read it: `8`, not `8.0`."""
    return str(int(value)) if float(value).is_integer() else str(value)


def lineages(events: Sequence[Event]) -> list[tuple[int, Lineage]]:
    """The index of each `forked` event of a run and its lineage, in order: none for a run
    that is no fork, the fork's own last (a fork of a fork also holds the one it copied).
    Raises `InvalidInputError` when such an event's lineage cannot be read."""
    found = []
    for i, event in enumerate(events):
        if event.kind != "forked":
            continue
        facts = event.facts
        if facts is None or facts.action != FORK_ACTION:
            raise InvalidInputError(f"seq {event.seq}: a forked event without its lineage")
        try:
            found.append((i, serde.structure(facts.reply, Lineage)))
        except Exception as exc:
            why = serde.error_path(exc)
            raise InvalidInputError(
                f"seq {event.seq}: the fork's lineage cannot be read ({why})"
            ) from None
    return found


@attrs.frozen
class Stretch:
    """Events `start`..`end` - 1 of a run, decided under the declaration `text`, whose
    sha256 the run's chain says is `sha256` (a fork's lineage, or the run's row)."""

    start: int
    end: int
    text: str
    sha256: str


def stretches(run: RunRow, events: Sequence[Event]) -> list[Stretch]:
    """A run's events by the declaration that decided them: one stretch for a run that is
    no fork; for a fork, what it copied (under its parent's declaration, from its lineage)
    and, from its `forked` event on, its own."""
    text, sha, end = run.machine_text, run.machine_sha256, len(events)
    found = []
    for index, lineage in reversed(lineages(events)):
        found.append(Stretch(index, end, text, sha))
        if lineage.parent_machine_text is not None:
            text = lineage.parent_machine_text
        sha, end = lineage.parent_machine_sha256, index
    found.append(Stretch(0, end, text, sha))
    return found[::-1]
