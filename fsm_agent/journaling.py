"""How the worker journals one event: built from the run's position, appended onto the
run's head under the interrupt gate, then handed to the caller's `on_transition`.

The base of the worker's mixins (`Halting`, `Resumption`, `OperatorControls`): each of them
journals, none of them declares how a second time.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Sequence

from fsm_agent.halt import HaltReason
from fsm_agent.interrupts import InterruptGate
from fsm_agent.journal import Event, EventKind, Facts, GuardResult, Store
from fsm_agent.snapshot import Snapshot

#: the last whole second formatted, and its text (swapped whole: threads may share it)
_second: tuple[int, str] = (-1, "")


def now_iso() -> str:
    """The time now in UTC, ISO 8601 to the millisecond (`2026-01-01T12:00:00.123+00:00`);
    the date and time of day are formatted once a second."""
    global _second
    second, ms = divmod(int(time.time() * 1000), 1000)
    cached = _second
    if cached[0] != second:
        moment = datetime.datetime.fromtimestamp(second, datetime.UTC)
        cached = _second = (second, moment.strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{cached[1]}.{ms:03d}+00:00"


class Journaling:
    """The run's position in the journal, and the one way an event reaches it."""

    store: Store
    run_id: str
    state: str
    seq: int
    head: str | None
    gate: InterruptGate
    on_transition: Callable[[Event], None] | None

    def _event(
        self,
        trigger: str | None,
        dest: str,
        snapshot: Snapshot,
        guards: tuple[GuardResult, ...] = (),
        check: tuple[GuardResult, ...] = (),
        facts: Facts | None = None,
        *,
        halt: HaltReason | None = None,
        retry: bool = False,
        note: str | None = None,
        kind: EventKind = "transition",
        control: int | None = None,
    ) -> Event:
        return Event(
            run_id=self.run_id,
            seq=self.seq + 1,
            kind=kind,
            at_ms=snapshot.clock_ms,
            wall_time=now_iso(),
            source=self.state,
            dest=dest,
            trigger=trigger,
            snapshot=snapshot,
            guards=guards,
            check=check,
            facts=facts,
            halt=halt,
            retry=retry,
            note=note,
            control=control,
        )

    def _commit(self, event: Event) -> None:
        """Journal `event` now: committed before this returns (and before any call the run
        makes next), then handed to `on_transition`."""
        self._commit_all((event,))

    def _commit_all(self, events: Sequence[Event]) -> None:
        """Journal `events` (consecutive, each its own hash-chained row) under one critical
        section, then hand each to `on_transition`. The one place events reach the store:
        committing several transitions together (none of them separated by a model, tool or
        user-action call) is a change here alone, e.g. to one `append_many` per batch."""
        with self.gate.critical():
            for event in events:
                self.head = self.store.append(event)
                self.seq, self.state = event.seq, event.dest
        for event in events:
            self._notify(event)

    def _notify(self, event: Event) -> None:
        if self.on_transition is not None:
            self.on_transition(event)
