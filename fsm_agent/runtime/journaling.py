"""How the worker journals one event: built from the run's position, appended onto the
run's head under the interrupt gate, then handed to the caller's `on_transition`.

A transition whose step made no call outside the process, or only a read (`deferrable`),
may wait to be committed with the next event: the run's script flushes what waits before
every call it yields (`flushed`), and every halt, pause and operator act commits it first.
So a transition is always committed before the next model, tool, judge, repair or
user-action call, and one commit may carry several (each its own row and hash). A run given
`on_transition` commits each event on its own, the callback seeing it before the run goes on.

What a kill (SIGKILL) loses is what waits: at most a read's result (`tool_returned` of a tool
declared without side effect, or of a call refused before it was made) and the receipts
check after it. The journal then ends at the tool call, exactly as a kill just before that
result's own commit leaves it, and resume treats it the same way (the call has no journaled
result: re-issued only if the tool is idempotent, else `side_effect_unknown`). What a call
with a side effect returned is committed as soon as it returns, as before.

The base of the worker's mixins (`Halting`, `Resumption`, `OperatorControls`): each of them
journals, none of them declares how a second time.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Callable, Generator, Sequence
from typing import TypeVar

from fsm_agent.errors import JournalError
from fsm_agent.halt import HaltReason
from fsm_agent.journal.store import Event, EventKind, Facts, GuardResult, Store
from fsm_agent.runtime.deadline import Call, CallResult
from fsm_agent.runtime.interrupts import InterruptGate
from fsm_agent.runtime.snapshot import Snapshot

T = TypeVar("T")

#: the last whole second formatted, and its text (swapped whole: threads may share it)
_second: tuple[int, str] = (-1, "")


def deferrable(event: Event) -> bool:
    """Whether `event` may wait for the next commit: a plain transition out of a step that
    touched nothing outside the process but a read (receipts checked, a tool declared
    without side effect, or one refused before the call). A kill before that commit loses
    it with the events after it, as a kill just before its own commit would: what a call
    with a side effect returned, and a model's reply, are committed at once."""
    facts = event.facts
    if event.kind != "transition" or event.halt is not None or facts is None:
        return False
    if facts.action == "receipts":
        return True
    return facts.action == "tool" and facts.tool is not None and not facts.tool.side_effect


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
    #: transitions built but not committed yet (`deferrable`); the run's position (`seq`,
    #: `state`) already counts them, its `head` does not
    pending: list[Event]
    #: the wall time journaled with each event (a durable workflow gives its own, replayable)
    wall: Callable[[], str] = staticmethod(now_iso)

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
            wall_time=self.wall(),
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
        """Journal `event` now (after any that wait): committed before this returns (and
        before any call the run makes next), then handed to `on_transition`."""
        self._commit_all((event,))

    def _journal(self, event: Event) -> None:
        """Journal `event`: at once, or with the next commit when it is `deferrable` and no
        `on_transition` waits to see it."""
        if self.on_transition is None and deferrable(event):
            self.pending.append(event)
            self.seq, self.state = event.seq, event.dest
        else:
            self._commit_all((event,))

    def _flush(self) -> None:
        """Commit the events that wait, if any."""
        if self.pending:
            self._commit_all(())

    def _flush_if_possible(self) -> None:
        """After a journal error that was not a commit's (a read): the events that wait are
        committed if the journal still takes them (if not, the run's position goes back to
        its last committed event)."""
        with contextlib.suppress(JournalError):
            self._flush()

    def flushed(self, script: Generator[Call, CallResult, T]) -> Generator[Call, CallResult, T]:
        """`script`, with the events that wait committed before each call it yields."""
        result: CallResult | None = None
        thrown: BaseException | None = None
        while True:
            try:
                call = script.send(result) if thrown is None else script.throw(thrown)  # type: ignore[arg-type]
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            if self.pending:
                self._commit_all(())
            thrown = None
            try:
                result = yield call
            except BaseException as exc:  # raised at the call: the script's to handle
                thrown = exc

    def _commit_all(self, events: Sequence[Event]) -> None:
        """Journal the events that wait and `events` (consecutive, each its own hash-chained
        row) in one commit under one critical section, then hand each to `on_transition`.
        The one place events reach the store."""
        batch = [*self.pending, *events] if self.pending else events
        self.pending = []
        with self.gate.critical():
            try:
                store = self.store
                self.head = store.append(batch[0]) if len(batch) == 1 else store.append_many(batch)
            except BaseException:  # none of them is committed: the run is where it was
                self.seq, self.state = batch[0].seq - 1, batch[0].source or self.state
                raise
            self.seq, self.state = batch[-1].seq, batch[-1].dest
        for event in batch:
            self._notify(event)

    def _notify(self, event: Event) -> None:
        """Hand a committed event to `on_transition`. A signal while it runs halts the run
        at once (`InterruptGate.take_over`): a callback that never returns is stopped too."""
        callback = self.on_transition
        if callback is None:
            return
        self.gate.callback_begins()
        try:
            callback(event)
        finally:
            self.gate.callback_ends()
