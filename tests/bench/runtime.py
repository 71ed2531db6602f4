"""The fsm-agent cases: the real runtime on the loop, durable, read-back, and overshoot.

Each run is `fsm_agent.run(...)` on the canonical `agent_loop` declaration with a stub
model and a stub tool, a fresh journal file and a fresh halt-record path. The timing covers
the whole run as a caller sees it: opening the store, every transition, the halt record
(written with fsync) and closing the store.
"""

from __future__ import annotations

import functools
import gc
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsm_agent import (
    Event,
    HaltRecord,
    MachineSpec,
    Prompt,
    Receipt,
    Tool,
    ToolError,
    ToolRegistry,
    ToolResult,
    load_machine,
    run,
)
from fsm_agent.deadline import Isolation
from fsm_agent.replay import replay_events
from stores.sqlite import SqliteStore
from stores.sqlite_open import Synchronous
from tests.bench.workload import TOOL, Scratch, Workload

TASK = "look up every row, then report the receipted one"
#: Long enough never to trip in the throughput cases.
_GENEROUS_MS = 3_600_000


@functools.cache
def agent_loop() -> MachineSpec:
    """The canonical declaration, loaded (and validated) once per process."""
    return load_machine("agent_loop")


class StubModel:
    """Proposes the workload's tool call on every step, at once."""

    def __init__(self, workload: Workload, isolation: Isolation = "thread") -> None:
        self.workload = workload
        self.isolation = isolation

    def __call__(self, prompt: Prompt) -> dict[str, Any]:
        return self.workload.reply(prompt.step)


def stub_tools(workload: Workload, isolation: Isolation = "thread") -> ToolRegistry:
    """The workload's tool (a read) as a registry: returns at once; the last result is
    receipted."""

    def lookup(step: int) -> ToolResult:
        data = workload.result(step)
        return ToolResult(
            receipts=tuple(Receipt(**r) for r in data["receipts"]),
            observation=data["observation"],
            final=data["final"],
        )

    return ToolRegistry((Tool(name=TOOL, fn=lookup, isolation=isolation, side_effect=False),))


def budgets_for(workload: Workload) -> dict[str, int]:
    """Room for exactly the workload's steps; time budgets that never trip."""
    return {
        "max_steps": workload.steps,
        "wall_clock_ms": _GENEROUS_MS,
        "tool_timeout_ms": _GENEROUS_MS,
    }


def count_events(path: Path, run_id: str) -> int:
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT count(*) FROM events WHERE run_id = ?", (run_id,)).fetchone()
    finally:
        conn.close()
    return int(row[0])


def _expect(record: HaltRecord, reason: str, what: str) -> None:
    if record.halt_reason != reason:
        raise RuntimeError(
            f"{what}: expected halt {reason!r}, got {record.halt_reason!r} ({record.error})"
        )


def run_loop(
    workload: Workload,
    db: Path,
    record_path: Path,
    synchronous: Synchronous = "NORMAL",
    isolation: Isolation = "thread",
) -> tuple[HaltRecord, float]:
    """One complete run of the loop; returns its record and its elapsed seconds.

    NORMAL passes the journal path (the runtime opens and closes the store); FULL passes a
    `SqliteStore(path, synchronous="FULL")` opened and closed inside the timing. With
    isolation="inline" the stub model and tool run in the worker's thread (no hand-off).
    """
    model, tools = StubModel(workload, isolation), stub_tools(workload, isolation)
    spec = agent_loop()
    options: dict[str, Any] = {"budgets": budgets_for(workload), "record_path": record_path}
    gc.collect()
    start = time.perf_counter()
    if synchronous == "NORMAL":
        record = run(spec, task=TASK, model=model, tools=tools, store=db, **options)
    else:
        store = SqliteStore(db, synchronous=synchronous)
        try:
            record = run(spec, task=TASK, model=model, tools=tools, store=store, **options)
        finally:
            store.close()
    elapsed = time.perf_counter() - start
    _expect(record, "completed", "fsm-agent run")
    return record, elapsed


def per_transition(
    workload: Workload,
    scratch: Scratch,
    synchronous: Synchronous,
    isolation: Isolation = "thread",
) -> float:
    """µs per journaled transition: elapsed / the number of events in the journal."""
    db, record_path = scratch.fresh("fsm-agent.db"), scratch.fresh("record.json")
    record, elapsed = run_loop(workload, db, record_path, synchronous, isolation)
    events = count_events(db, record.run_id)
    scratch.discard(db, record_path)
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
