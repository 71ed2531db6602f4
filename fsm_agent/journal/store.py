"""The journal: what every store records, and the protocol every store implements.

The journal is append-only and keyed by (run id, sequence number). Each event holds the
snapshot a decision was made on, the result of every guard evaluated, and the raw facts of
the action that led to it (model reply, tool outcome) — enough to replay the run without
the model, the tools or a clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

import attrs

from fsm_agent.runtime.budgets import Budgets

if TYPE_CHECKING:
    from fsm_agent.journal.chain import ChainLink
from fsm_agent.halt import HaltReason
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.runtime.snapshot import Snapshot, ToolOutcome
from fsm_agent.runtime.usage import ModelUsage

SCHEMA_VERSION = 1
#: started opens a run; transition is one state change; operator is a person's act on a
#: live run (a raised budget, a pause), journaled where it took effect; resumed marks where
#: a new process took an interrupted or paused run over.
#: resumed marks where a new process took an interrupted or paused run over; decided is a
#: person's decision on a run that waited in `handoff` (approve, deny, answer), which
#: continues it.
#: forked marks where a fork goes on by itself, after the events it took from its parent;
#: it holds the fork's lineage (`fsm_agent.runtime.fork_lineage.Lineage`).
EventKind = Literal["started", "transition", "operator", "resumed", "decided", "forked"]
#: paused: a person paused the run; its process ended and the run waits for `resume`.
RunStatus = Literal["running", "paused", "halted"]


@attrs.frozen
class GuardResult:
    """One guard evaluated for one candidate transition (by index in the declaration)."""

    transition: int
    guard: str
    result: bool


@attrs.frozen
class Facts:
    """What the action performed in the source state produced, before any decision."""

    action: str
    reply: Any = None
    reply_cost: float = 0.0
    tool: ToolOutcome | None = None
    error: str | None = None
    #: the reply as the local schema-repair voter rewrote it (what the proposal came from)
    repaired: Any = None
    #: a model call's tokens, models, finish reason and latency (None: not a model call, or
    #: journaled before usage was kept)
    usage: ModelUsage | None = None


@attrs.frozen
class Event:
    """One journal entry. `started` opens a run; each `transition` is one state change.

    `guards` are the results that chose this transition; `check` the budget guard evaluated
    on entering `dest` (a tripped check is followed by a `budget` transition).
    """

    run_id: str
    seq: int
    kind: EventKind
    at_ms: int
    wall_time: str
    source: str | None
    dest: str
    trigger: str | None
    snapshot: Snapshot
    guards: tuple[GuardResult, ...] = ()
    check: tuple[GuardResult, ...] = ()
    facts: Facts | None = None
    halt: HaltReason | None = None
    retry: bool = False
    note: str | None = None
    #: the id of the operator control an `operator` event applied
    control: int | None = None


@attrs.frozen
class RunRow:
    """One row per run: what ran, under which frozen budgets, and how it ended."""

    run_id: str
    machine: str
    machine_sha256: str
    machine_text: str
    task: str
    budgets: Budgets
    state: str
    status: RunStatus
    started_at: str
    steps_used: int = 0
    halt_reason: HaltReason | None = None
    ended_at: str | None = None
    record: HaltRecord | None = None
    pid: int | None = None
    #: the host of the process that owns the run while it is live (with `pid`)
    host: str | None = None
    #: how the run's hash chain is made (`fsm_agent.journal.chain_hash`): None for a run journaled
    #: before halt records were sealed, `sha256` (unkeyed) or `hmac-sha256:<key id>` (keyed)
    chain: str | None = None
    #: the halt record's seal onto the run's head (`chain_hash.record_link`), written with it
    record_hash: str | None = None


ControlKind = Literal["raise_budget", "freeze_routing", "unfreeze_routing", "pause"]


@attrs.frozen
class Control:
    """An operator's instruction, waiting in the store until a run reads it: for one live run
    (raise_budget, pause), or for every run (freeze_routing / unfreeze_routing, `run_id` None)."""

    id: int
    run_id: str | None
    kind: ControlKind
    payload: dict[str, Any]
    who: str
    why: str
    at: str


@attrs.frozen
class Job:
    """A run as `fsm-agent submit` starts it (`fsm_agent.submission.frozen_job`): the
    declaration's text and the budgets frozen at submit time; the run's id is the job's."""

    run_id: str
    machine: str
    machine_text: str
    task: str
    budgets: Budgets
    submitted_at: str


@attrs.frozen
class RunSummary:
    """The few columns of one run that statistics need, read without decoding its events.

    `steps_used` is final once the run has halted; `cost` is the halt record's
    `meters.cost` (None while the run has no record); `input_tokens` / `output_tokens` add
    up what its model calls reported (None when none did, or it was journaled before usage
    was kept).
    """

    run_id: str
    machine: str
    status: RunStatus
    halt_reason: HaltReason | None
    steps_used: int
    max_steps: int
    started_at: str
    ended_at: str | None
    cost: float | None
    input_tokens: int | None = None
    output_tokens: int | None = None
    #: what a halted run waits for (`approval`, `answer`: its record's `handoff.awaits`);
    #: None for a stop that is final
    awaits: str | None = None


class Store(Protocol):
    """A journal backend. Every write commits before it returns, or raises `JournalError`."""

    #: the key new runs are chained with, and keyed runs checked with (None: unkeyed)
    chain_key: bytes | None

    @property
    def location(self) -> str: ...

    def start_run(self, run: RunRow, first: Event) -> str:
        """Write a new run's row and first event; return the run's head hash."""
        ...

    def append(self, event: Event) -> str:
        """Chain one event onto its run's head (the event at seq - 1, which no other event
        follows yet); return the new head hash. Refused (`JournalError`, nothing written)
        when the head is not the one this store last wrote or read: two writers never fork
        a run's chain."""
        ...

    def append_many(self, events: Sequence[Event]) -> str:
        """Chain several events of one run onto its head, in order, each its own row with
        its own hash chained on the one before, in ONE transaction with `append`'s check on
        the first: all are written or none. Returns the new head hash."""
        ...

    def finish_run(self, record: HaltRecord) -> None: ...

    def mark_run(self, run_id: str, status: RunStatus, pid: int | None, host: str | None) -> None:
        """Set a live run's status and owner (a pause, a resume); never a halted run's."""
        ...

    def reopen_run(
        self,
        event: Event,
        *,
        seal: str,
        pid: int | None,
        host: str | None,
        status: RunStatus = "running",
    ) -> str | None:
        """Continue a halted run that waits for a person's decision: only while its record
        is still the one sealed `seal`, in ONE transaction the row becomes `status` under
        (`pid`, `host`) — `running`, driven by the caller, or `paused`, for `resume` —, its
        record moves out of the row (the event carries it, chained), and `event` is chained
        onto its sealed head. The new head hash; None (nothing written) when another
        decision or process changed the run first."""
        ...

    def claim_run(
        self,
        run_id: str,
        *,
        was: tuple[RunStatus, int | None, str | None],
        head: str,
        pid: int,
        host: str,
    ) -> bool:
        """Make (`pid`, `host`) the owner of a `running` run, only if its row still shows
        `was` (status, pid, host) and its head hash is still `head`: one atomic
        compare-and-set, so of the processes that read the same row and head, one wins.
        False (nothing written) when the row or its head changed meanwhile."""
        ...

    def get_run(self, run_id: str) -> RunRow: ...

    def list_runs(
        self,
        limit: int | None = 20,
        *,
        machine: str | None = None,
        halt_reason: HaltReason | None = None,
        status: RunStatus | None = None,
        since: str | None = None,
        until: str | None = None,
        task_contains: str | None = None,
        before: tuple[str, str] | None = None,
    ) -> list[RunRow]:
        """Runs newest first, narrowed by every filter given (`since`/`until`: ISO times in
        UTC as the journal writes `started_at`, both inclusive; `task_contains`: text in the
        task, case folded), at most `limit` (None: all); with `before` = (started_at,
        run_id) of a page's last run, the page after it (by key, through an index)."""
        ...

    def run_ids_from(self, prefix: str, limit: int) -> list[str]:
        """Up to `limit` run ids that start with `prefix`, in byte order (an index range)."""
        ...

    def latest_run_id(self) -> str | None:
        """The id of the run started last (ties: the greatest id); None when there is none."""
        ...

    def events(self, run_id: str) -> list[Event]: ...

    def last_event(self, run_id: str) -> Event:
        """The run's newest event (one row read, however long the run)."""
        ...

    def events_between(self, run_id: str, first: int, last: int) -> list[Event]:
        """The run's events from seq `first` to `last` (both included), in order: those rows
        and the run's first are read, however long the run. `RunNotFound` if there is no
        such run."""
        ...

    def event_at(self, run_id: str, seq: int) -> Event | None:
        """The run's event at `seq` (None: the run has none there): that row and the run's
        first (what its values are written against) are read, however long the run.
        `RunNotFound` if there is no such run."""
        ...

    def add_control(self, control: Control) -> int: ...

    def controls(self, run_id: str, after: int = 0) -> list[Control]: ...

    def control_version(self) -> object | None:
        """A value that differs from the last one read whenever a control may have been
        added since (None: unknown, and `controls` is read every time)."""
        ...

    def close(self) -> None: ...

    def chain(self, run_id: str) -> tuple[RunRow, list[ChainLink], str | None]:
        """The run's row, its events as stored with their hashes, and its head hash."""
        ...

    def run_ids(self) -> list[str]:
        """Every run id in the journal, oldest first."""
        ...

    def import_run(self, run: RunRow, events: Sequence[Event], record: HaltRecord | None) -> None:
        """Write a whole run exported from another journal in one transaction; refuse
        (`JournalError`) a run id this journal already holds."""
        ...

    def run_summaries(
        self, machine: str | None = None, since: str | None = None
    ) -> list[RunSummary]:
        """One `RunSummary` per run, optionally of one machine and started at or after
        `since` (an ISO timestamp in UTC, compared as text), ordered by machine then start."""
        ...
