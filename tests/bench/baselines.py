"""The two baselines: the SQLite floor and a naive runtime on `transitions`.

`floor`: raw `sqlite3`, one bound INSERT of a ~300-byte JSON event and a COMMIT per
transition, WAL, `synchronous` NORMAL or FULL. `naive`: a `transitions.Machine` with the
loop's states and condition-guarded transitions, calling the stub model and tool directly,
plus the same insert and commit per transition. Both open a fresh file, create their table
and close it inside the timing, as the runtime does.
"""

from __future__ import annotations

import gc
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from transitions import EventData, Machine

from tests.bench.workload import STATES, TOOL, Hop, Workload, event_body, goal_reached

if TYPE_CHECKING:
    from transitions.core import TransitionConfigDict

Synchronous = Literal["NORMAL", "FULL"]

_SCHEMA = """
    CREATE TABLE events (
        run_id TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)) WITHOUT ROWID"""
_INSERT = "INSERT INTO events (run_id, seq, body) VALUES (?, ?, ?)"


def open_journal(path: Path, synchronous: Synchronous) -> sqlite3.Connection:
    """A fresh events table in WAL mode; the module's implicit transactions per INSERT."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {'FULL' if synchronous == 'FULL' else 'NORMAL'}")
    conn.execute(_SCHEMA)
    conn.commit()
    return conn


def append(conn: sqlite3.Connection, run_id: str, seq: int, hop: Hop | None) -> None:
    """Journal one event: bound INSERT, then COMMIT."""
    conn.execute(_INSERT, (run_id, seq, event_body(run_id, seq, hop)))
    conn.commit()


def floor(workload: Workload, path: Path, synchronous: Synchronous) -> float:
    """Journal the loop's events with nothing else; return µs per event."""
    gc.collect()
    start = time.perf_counter()
    conn = open_journal(path, synchronous)
    append(conn, "floor", 0, None)
    for seq, hop in enumerate(workload.path(), start=1):
        append(conn, "floor", seq, hop)
    conn.close()
    return (time.perf_counter() - start) * 1e6 / workload.events


class NaiveRun:
    """The model object of the naive runtime: the run's facts and its journal."""

    #: Injected by `transitions` (declared here for the type checker only).
    trigger: Callable[[str], bool]
    fsm_state: str

    def __init__(self, workload: Workload, conn: sqlite3.Connection) -> None:
        self.workload, self.conn = workload, conn
        self.seq = 0
        self.step = 0
        self.proposal: dict[str, Any] = {}
        self.result: dict[str, Any] = {}

    def tool_allowed(self, event: EventData) -> bool:
        return bool(self.proposal["tool_call"]["name"] == TOOL)

    def within_budget(self, event: EventData) -> bool:
        return self.step <= self.workload.steps

    def goal_satisfied(self, event: EventData) -> bool:
        return goal_reached(self.result)

    def journal(self, event: EventData) -> None:
        """`after_state_change`: one event per transition, committed before going on."""
        self.seq += 1
        done = event.transition
        if done is None or done.dest is None:
            raise RuntimeError("after_state_change without a transition")
        append(self.conn, "naive", self.seq, (self.step, done.source, done.dest, event.event.name))


_NAIVE_TRANSITIONS: list[TransitionConfigDict] = [
    {
        "trigger": "tool_call",
        "source": "drafting",
        "dest": "tool_pending",
        "conditions": ["tool_allowed", "within_budget"],
    },
    {"trigger": "tool_returned", "source": "tool_pending", "dest": "awaiting_receipts"},
    {
        "trigger": "collected",
        "source": "awaiting_receipts",
        "dest": "done",
        "conditions": ["goal_satisfied"],
    },
    {"trigger": "collected", "source": "awaiting_receipts", "dest": "drafting"},
]


def naive(workload: Workload, path: Path) -> float:
    """Drive the loop on a plain `transitions.Machine`; return µs per event."""
    gc.collect()
    start = time.perf_counter()
    conn = open_journal(path, "NORMAL")
    run = NaiveRun(workload, conn)
    Machine(
        model=run,
        states=list(STATES),
        transitions=_NAIVE_TRANSITIONS,
        initial="drafting",
        auto_transitions=False,
        send_event=True,
        model_attribute="fsm_state",
        after_state_change="journal",
    )
    append(conn, "naive", 0, None)
    for step in range(1, workload.steps + 1):
        run.step = step
        run.proposal = workload.reply(step)
        run.trigger("tool_call")
        run.result = workload.result(**run.proposal["tool_call"]["args"])
        run.trigger("tool_returned")
        run.trigger("collected")
    conn.close()
    elapsed = time.perf_counter() - start
    if run.fsm_state != "done" or run.seq != workload.transitions:
        raise RuntimeError(f"naive run ended in {run.fsm_state!r} after {run.seq} transitions")
    return elapsed * 1e6 / workload.events
