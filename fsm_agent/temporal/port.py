"""The journal as a run's workflow sees it: writes are queued as operations, and the
workflow commits them in one journal activity before the run's next call (and at its end),
so every transition is committed before the next model, tool, judge, repair or user-action
call, exactly as in one process (`fsm_agent.runtime.journaling`).

Workflow code cannot touch a database, so `JournalPort` stands in for the store inside the
run's worker: `start_run`/`append`/`append_many`/`finish_run`/`mark_run` queue, the head
they return is a placeholder (`pending:SEQ`) that the activity replaces by the real one,
and `controls` answers from what the last journal activity read. `apply` is the activity's
half: each operation applied to the real store, idempotently (an activity retried after a
write it already made finds its events there, equal, and goes on; anything else there is a
conflict, never overwritten).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import attrs

from fsm_agent.errors import JournalError
from fsm_agent.journal import serde
from fsm_agent.journal.store import Control, Event, RunRow, RunStatus, Store
from fsm_agent.run_ids import RunNotFound
from fsm_agent.runtime.record import HaltRecord

PENDING = "pending:"
#: The owner a Temporal run's row names (see `fsm_agent.temporal.activities.OWNER`).
OWNER = "temporal"


def owned_by_temporal(row: RunRow) -> bool:
    """A row a workflow run of this run id left: Temporal runs at most one at a time, so the
    one that takes it is its only driver (the lease is Temporal's)."""
    return row.host == OWNER


@attrs.frozen
class Op:
    """One journal write of a run, as queued by the workflow."""

    kind: Literal["start", "append", "finish", "mark"]
    row: RunRow | None = None
    events: tuple[Event, ...] = ()
    record: HaltRecord | None = None
    status: RunStatus | None = None


@attrs.frozen
class Flushed:
    """What a journal activity answers: the run's head after the writes, and the operators'
    controls for the run queued after `after` (the workflow's next `controls` reads)."""

    head: str | None
    controls: tuple[Control, ...] = ()


class Conflict(JournalError):
    """The journal holds something else where this run's write goes: never retried."""


class JournalPort:
    """The store inside a run's workflow (see the module's doc)."""

    def __init__(self, run_id: str, location: str, controls: Sequence[Control] = ()) -> None:
        self.run_id = run_id
        self._location = location
        self.ops: list[Op] = []
        self.known: list[Control] = list(controls)
        self.head: str | None = None
        self.chain_key = None

    @property
    def location(self) -> str:
        return self._location

    def take(self) -> list[Op]:
        ops, self.ops = self.ops, []
        return ops

    def flushed(self, answer: Flushed) -> None:
        self.head = answer.head
        seen = {c.id for c in self.known}
        self.known.extend(c for c in answer.controls if c.id not in seen)

    def start_run(self, run: RunRow, first: Event) -> str:
        run = attrs.evolve(run, pid=None, host=OWNER)  # no process of a host owns it
        self.ops.append(Op("start", row=run, events=(first,)))
        return PENDING + str(first.seq)

    def append(self, event: Event) -> str:
        return self.append_many((event,))

    def append_many(self, events: Sequence[Event]) -> str:
        self.ops.append(Op("append", events=tuple(events)))
        return PENDING + str(events[-1].seq)

    def finish_run(self, record: HaltRecord) -> None:
        self.ops.append(Op("finish", record=record))

    def mark_run(self, run_id: str, status: RunStatus, pid: int | None, host: str | None) -> None:
        self.ops.append(Op("mark", status=status))  # owned by no process (`OWNER`)

    def controls(self, run_id: str, after: int = 0) -> list[Control]:
        return [c for c in self.known if c.id > after]

    def control_version(self) -> object | None:
        return len(self.known)


def apply(store: Store, run_id: str, ops: Sequence[Op], after: int) -> Flushed:
    """The journal activity: `ops` applied in order (each idempotently), then the run's
    head and its controls after `after`."""
    head: str | None = None
    for op in ops:
        if op.kind == "start":
            assert op.row is not None  # noqa: S101 - a start carries its row
            head = _start(store, op.row, op.events[0])
        elif op.kind == "append":
            head = _append(store, run_id, op.events)
        elif op.kind == "finish":
            assert op.record is not None  # noqa: S101 - a finish carries its record
            _finish(store, op.record, head or _head(store, run_id))
        else:
            assert op.status is not None  # noqa: S101 - a mark carries its status
            owner = OWNER if op.status == "running" else None
            store.mark_run(run_id, op.status, None, owner)
    return Flushed(head=head, controls=tuple(store.controls(run_id, after=after)))


def _head(store: Store, run_id: str) -> str | None:
    _, _, head = store.chain(run_id)
    return head


def _same(stored: Event, given: Event) -> bool:
    return bool(serde.unstructure(stored) == serde.unstructure(given))


def _start(store: Store, row: RunRow, first: Event) -> str | None:
    try:
        store.get_run(row.run_id)
    except RunNotFound:
        return store.start_run(row, first)
    stored = store.events(row.run_id)
    if not stored or not _same(stored[0], first):
        raise Conflict(f"run {row.run_id} is already in the journal, started otherwise",
                       path=store.location)  # fmt: skip
    return _head(store, row.run_id)


def _append(store: Store, run_id: str, events: Sequence[Event], again: bool = True) -> str | None:
    last = store.last_event(run_id)
    if last.seq == events[0].seq - 1:
        try:
            return store.append_many(events)
        except JournalError:
            if not again:
                raise
            # Another worker process wrote this run's last events: this store's own note of
            # the run's head was stale, and a refused append drops it; asked once more, it
            # chains onto the head it reads now (or finds the write made, or a conflict).
            return _append(store, run_id, events, again=False)
    if last.seq >= events[-1].seq:  # a retry of a write that was made: equal, or a conflict
        stored = {e.seq: e for e in store.events(run_id)}
        if all(e.seq in stored and _same(stored[e.seq], e) for e in events):
            return _head(store, run_id)
    raise Conflict(
        f"run {run_id}: the journal ends at seq {last.seq}; this write is seq"
        f" {events[0].seq}..{events[-1].seq} (another writer, or a lost write)",
        path=store.location,
    )


def _finish(store: Store, record: HaltRecord, head: str | None) -> None:
    row = store.get_run(record.run_id)
    if row.status == "halted" and row.record is not None:
        if row.record.halt_reason is not record.halt_reason:
            raise Conflict(f"run {record.run_id} already halted {row.record.halt_reason.value}",
                           path=store.location)  # fmt: skip
        return
    store.finish_run(attrs.evolve(record, journal_head=head))


def fix_head(value: Any, head: str | None) -> Any:
    """A record built in the workflow names its journal head as the store gave it (a
    placeholder): the real head, for what the workflow returns."""
    if isinstance(value, HaltRecord) and (value.journal_head or "").startswith(PENDING):
        return attrs.evolve(value, journal_head=head)
    return value
