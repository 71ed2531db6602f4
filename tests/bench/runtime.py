"""The fsm-agent cases: the real runtime on the loop, durable, read-back, and overshoot.

Each run is `fsm_agent.run(...)` on the canonical `agent_loop` declaration with a stub
model and a stub tool, a fresh journal file and a fresh halt-record path. The timing covers
the whole run as a caller sees it: opening the store, every transition, the halt record
(written with fsync) and closing the store.
"""

from __future__ import annotations

import functools
import gc
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsm_agent import (
    Event,
    HaltRecord,
    MachineSpec,
    Prompt,
    Receipt,
    Store,
    Tool,
    ToolError,
    ToolRegistry,
    ToolResult,
    load_machine,
    run,
)
from fsm_agent.review.replay import replay_events
from fsm_agent.runtime.deadline import Isolation
from fsm_agent.stores import open_store
from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.stores.sqlite_open import Synchronous
from tests.bench import pg
from tests.bench.workload import TOOL, Scratch, Workload

TASK = "look up every row, then report the receipted one"
#: Long enough never to trip in the throughput cases.
_GENEROUS_MS = 3_600_000


@functools.cache
def agent_loop() -> MachineSpec:
    """The canonical declaration, loaded (and validated) once per process."""
    return load_machine("agent_loop")


class StubModel:
    """Proposes the workload's tool call on every step, at once. No `isolation` attribute:
    the runtime's default applies (what the `fsm-agent` case measures)."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload

    def __call__(self, prompt: Prompt) -> dict[str, Any]:
        return self.workload.reply(prompt.step)


class InlineStubModel(StubModel):
    """The same, called in the worker's thread (`isolation="inline"`)."""

    isolation: Isolation = "inline"


def stub_tools(workload: Workload, isolation: Isolation | None = None) -> ToolRegistry:
    """The workload's tool (a read) as a registry: returns at once; the last result is
    receipted. `isolation` None: the runtime's default."""

    def lookup(step: int) -> ToolResult:
        data = workload.result(step)
        return ToolResult(
            receipts=tuple(Receipt(**r) for r in data["receipts"]),
            observation=data["observation"],
            final=data["final"],
        )

    if isolation is None:
        return ToolRegistry((Tool(name=TOOL, fn=lookup, side_effect=False),))
    return ToolRegistry((Tool(name=TOOL, fn=lookup, side_effect=False, isolation=isolation),))


def budgets_for(workload: Workload) -> dict[str, int]:
    """Room for exactly the workload's steps; time budgets that never trip."""
    return {
        "max_steps": workload.steps,
        "wall_clock_ms": _GENEROUS_MS,
        "tool_timeout_ms": _GENEROUS_MS,
    }


def count_events(location: Path | str, run_id: str) -> int:
    """Events the journal holds for the run, through the store's API (one row read: the
    run's sequence numbers count from 0 with no gap, the chain sees to that)."""
    store = open_store(location, read_only=True)
    try:
        return store.last_event(run_id).seq + 1
    finally:
        store.close()


def _expect(record: HaltRecord, reason: str, what: str) -> None:
    if record.halt_reason != reason:
        raise RuntimeError(
            f"{what}: expected halt {reason!r}, got {record.halt_reason!r} ({record.error})"
        )


#: Where a run journals: a SQLite file's path (the runtime opens and closes the store), or
#: a function opening a store (called, and the store closed, inside the timing).
Journal = Path | Callable[[], Store]


def run_loop(
    workload: Workload, journal: Journal, record_path: Path, inline: bool = False
) -> tuple[HaltRecord, float]:
    """One complete run of the loop; returns its record and its elapsed seconds.

    The stub model and tool run with the runtime's default isolation, or with `inline`
    in the worker's thread (no hand-off).
    """
    model = InlineStubModel(workload) if inline else StubModel(workload)
    tools = stub_tools(workload, "inline" if inline else None)
    spec = agent_loop()
    options: dict[str, Any] = {
        "budgets": budgets_for(workload),
        "record_path": record_path,
        "allow": tools.names(),
    }
    gc.collect()
    start = time.perf_counter()
    if isinstance(journal, Path):
        record = run(spec, task=TASK, model=model, tools=tools, store=journal, **options)
    else:
        store = journal()
        try:
            record = run(spec, task=TASK, model=model, tools=tools, store=store, **options)
        finally:
            store.close()
    elapsed = time.perf_counter() - start
    _expect(record, "completed", "fsm-agent run")
    return record, elapsed


def sqlite_journal(db: Path, synchronous: Synchronous) -> Journal:
    """NORMAL (the default) passes the path; FULL opens `SqliteStore(db, synchronous=…)`."""
    if synchronous == "NORMAL":
        return db
    return functools.partial(SqliteStore, db, synchronous=synchronous)


def per_transition(
    workload: Workload,
    scratch: Scratch,
    synchronous: Synchronous,
    inline: bool = False,
) -> float:
    """µs per journaled transition: elapsed / the number of events in the journal."""
    db, record_path = scratch.fresh("fsm-agent.db"), scratch.fresh("record.json")
    journal = sqlite_journal(db, synchronous)
    record, elapsed = run_loop(workload, journal, record_path, inline)
    events = count_events(db, record.run_id)
    scratch.discard(db, record_path)
    return elapsed * 1e6 / events


def per_transition_pg(workload: Workload, scratch: Scratch) -> float:
    """µs per journaled transition on the PostgreSQL store (a fresh schema), one process:
    the same run as `per_transition`, the store opened and closed inside the timing."""
    record_path = scratch.fresh("pg-record.json")
    with pg.pg_journal(scratch) as dsn:
        record, elapsed = run_loop(workload, functools.partial(open_store, dsn), record_path)
        events = count_events(dsn, record.run_id)
    scratch.discard(record_path)
    return elapsed * 1e6 / events


# --- replay ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayJournal:
    """A journal holding one long completed run, to read back."""

    path: Path
    run_id: str
    events: int


def make_replay_journal(workload: Workload, scratch: Scratch) -> ReplayJournal:
    db, record_path = scratch.fresh("replay.db"), scratch.fresh("replay-record.json")
    record, _ = run_loop(workload, db, record_path)
    return ReplayJournal(db, record.run_id, count_events(db, record.run_id))


def replay(journal: ReplayJournal) -> float:
    """Replay the run from the journal: read every event back (decoded into the journal
    types) and re-decide it with `replay_events`; events per second. The store is opened
    outside the timing."""
    store = SqliteStore(journal.path)
    try:
        gc.collect()
        start = time.perf_counter()
        row = store.get_run(journal.run_id)
        events = store.events(journal.run_id)
        report = replay_events(row, events)
        elapsed = time.perf_counter() - start
    finally:
        store.close()
    if len(events) != journal.events or not isinstance(events[-1], Event) or not report.ok:
        raise RuntimeError(f"replay of {len(events)} events failed: {report.summary}")
    return len(events) / elapsed


# --- wall-clock overshoot -------------------------------------------------------------------

WALL_CLOCK_MS = 200
_RELEASE = threading.Event()


def _hang() -> ToolResult:
    """A tool that never returns while the benchmark runs (released at its end)."""
    _RELEASE.wait()
    raise ToolError("released by the benchmark", retryable=False)


def _hang_model(prompt: Prompt) -> dict[str, Any]:
    return {"tool_call": {"name": "hang", "args": {}}}


def release_hung_tools() -> None:
    """Let the abandoned `hang` threads finish (call once, when no overshoot run is left)."""
    _RELEASE.set()


def overshoot(scratch: Scratch, runs: int) -> list[float]:
    """ms past a 200 ms wall clock at which each run returns, a tool hanging meanwhile.

    The store is opened before the timing: the wall clock starts inside `run`.
    """
    samples = []
    for _ in range(runs):
        db, record_path = scratch.fresh("overshoot.db"), scratch.fresh("overshoot.json")
        store = SqliteStore(db)
        try:
            gc.collect()
            start = time.perf_counter()
            record = run(
                agent_loop(),
                task="wait for a tool that never answers",
                model=_hang_model,
                tools=ToolRegistry((Tool(name="hang", fn=_hang),)),
                allow=("hang",),
                store=store,
                budgets={"wall_clock_ms": WALL_CLOCK_MS, "tool_timeout_ms": _GENEROUS_MS},
                record_path=record_path,
            )
            elapsed_ms = (time.perf_counter() - start) * 1000
        finally:
            store.close()
        _expect(record, "wall_clock", "overshoot run")
        samples.append(elapsed_ms - WALL_CLOCK_MS)
        scratch.discard(db, record_path)
    return samples
