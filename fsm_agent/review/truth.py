"""What a review may show as fact about a run: its row's summary only where the run's chain
verifies; anything else is shown marked unverified, with the chain's verdict.

The `runs` row (halt reason, state, status, steps, the halt record) is what every list,
filter, chart and headline reads, and it is the easiest thing in the journal to edit: one
`UPDATE`. The chain covers it (`fsm_agent.journal.chain_row`), so each surface asks here
before it shows a row as fact: `truths(store, run_ids)` verifies each run's chain from its
stored bytes (about 1 ms for a run of 26 events) and says which rows stand.

A keyed run read without its key is not verified either: its rows are marked too (the key
is what proves them).

The chain proves a halted run's summary columns (halt reason, state, steps, end time) and
its record; it does not prove a live run's `state` or `steps_used` columns (they move with
every transition, and no halt record anchors them yet). What a live run stands at is its
newest chained event: `run_now` reads the row, that event and the verdict together, so a
display shows the event's state and meters, never the row's. A long-lived reader (the
console) keeps verdicts in `Truths` while the journal does not change.

A live run's row, head and events are separate reads, and its process may append between
them: the chain then looks cut off or extended for an instant. A failing verdict stands
only when the next read says the same (a tampered run fails the same way every time; a
moving run names a new seq each time).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from fsm_agent.errors import JournalError
from fsm_agent.journal.chain import ChainReport, verify_run
from fsm_agent.journal.store import Event, RunRow, Store

#: At most this many reads of a run whose reads disagree (its process appends meanwhile).
READS = 5
#: `Truths` forgets every verdict beyond this many (a journal of more runs is verified again).
KEPT = 200_000

#: How a list marks a row whose chain does not verify (its legend: `LEGEND`).
MARK = "!"
LEGEND = (
    f"{MARK} unverified: the run's chain does not verify (or its key was not given), so its"
    " row may have been edited; `fsm-agent verify RUN_ID` says how"
)


@attrs.frozen
class Truth:
    """Whether one run's row may be shown as fact: `ok` when its chain verifies; `why`
    is the chain's verdict when it does not."""

    run_id: str
    ok: bool
    why: str | None = None

    @classmethod
    def of(cls, chain: ChainReport) -> Truth:
        return cls(chain.run_id, chain.ok, None if chain.ok else chain.verdict())


def _verified(store: Store, run_id: str) -> Truth:
    try:
        return Truth.of(verify_run(store, run_id))
    except JournalError as exc:
        return Truth(run_id, False, f"its chain cannot be read: {exc}")


def truth_of(store: Store, run_id: str) -> Truth:
    """The truth of one run's row (see the module docstring); a row the journal cannot
    even read is not verified either. A failing verdict is read again until two reads
    agree (a live run's process may append between the reads of one)."""
    seen = _verified(store, run_id)
    for _ in range(READS - 1):
        if seen.ok:
            return seen
        again = _verified(store, run_id)
        if again == seen:
            return seen
        seen = again
    return seen


def truths(store: Store, run_ids: Iterable[str]) -> dict[str, Truth]:
    """The truth of each run's row, by run id."""
    return {run_id: truth_of(store, run_id) for run_id in dict.fromkeys(run_ids)}


def shown_halt(row: RunRow, truth: Truth, status: str | None = None) -> str:
    """A row's halt as a list shows it: the halt reason (or `(status)` while it has none),
    marked `MARK` when the row is not verified."""
    reason = row.halt_reason.value if row.halt_reason else f"({status or row.status})"
    if status == "waiting":
        reason = f"{reason} (waiting)"
    return reason if truth.ok else f"{reason}{MARK}"


def headline_halt(row: RunRow, truth: Truth) -> str:
    """A row's halt as a headline states it: as recorded when the chain verifies, else
    what the row says, named as unverified, with the chain's verdict."""
    reason = row.halt_reason.value if row.halt_reason else f"no halt ({row.status})"
    if truth.ok:
        return reason
    return f"UNVERIFIED: the run's row says {reason}, and {truth.why}"


class Truths:
    """`truths` for a reader that lives on (the console): a verdict is kept while the
    journal has not changed since it was reached (`Store.control_version`: SQLite's
    `data_version` moves on every commit by any other connection), and reached again after
    any change. A store with no such token (PostgreSQL) is verified on every call."""

    def __init__(self) -> None:
        self._version: object | None = None
        self._known: dict[str, Truth] = {}

    def of(self, store: Store, run_ids: Iterable[str]) -> dict[str, Truth]:
        """The truth of each run's row, by run id (as `truths`)."""
        wanted = list(dict.fromkeys(run_ids))
        version = store.control_version()
        if version is None:
            return truths(store, wanted)
        if version != self._version or len(self._known) > KEPT:
            self._known.clear()
            self._version = version
        self._known.update(truths(store, [r for r in wanted if r not in self._known]))
        return {r: self._known[r] for r in wanted}


@attrs.frozen
class RunNow:
    """One run as it stands, read together: its row, its newest event and the truth of
    both (see `run_now`)."""

    row: RunRow
    last: Event
    truth: Truth

    @property
    def halted(self) -> bool:
        return self.row.status == "halted"

    @property
    def state(self) -> str:
        """Where the run is: a halted run's terminal state (proven by its record when the
        truth is ok), else its newest event's destination (chained; the row's `state`
        column of a live run is not)."""
        return self.row.state if self.halted else self.last.dest

    @property
    def steps_used(self) -> int:
        """Its steps, as `state`: the record's once halted, else the newest event's."""
        if self.halted and self.row.record is not None:
            return self.row.record.steps_used
        return self.last.snapshot.meters.steps_used


def run_now(store: Store, run_id: str) -> RunNow:
    """The run's row, its newest event and their truth, read again while the row or the
    event moved during the reads (a live run's process appending), so the verdict is of
    what is shown. `RunNotFound` when there is no such run."""
    row, last = store.get_run(run_id), store.last_event(run_id)
    truth = Truth(run_id, False, "it changed on every read")
    for _ in range(READS):
        truth = truth_of(store, run_id)
        again, newest = store.get_run(run_id), store.last_event(run_id)
        if again == row and newest.seq == last.seq:
            return RunNow(row, last, truth)
        row, last = again, newest
    return RunNow(row, last, truth)
