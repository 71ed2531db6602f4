"""Peers on the same workload, when the `bench` extra is installed: LangGraph and Burr.

Both run the loop as three nodes (drafting, tool_pending, awaiting_receipts) with the same
stub model and tool and a condition deciding whether to go round again, persisting after
every step to a fresh SQLite file in WAL mode with `synchronous=NORMAL` (fsm-agent's
default durability):

- LangGraph: `StateGraph` compiled with `SqliteSaver` (`langgraph-checkpoint-sqlite`),
  invoked with `durability="sync"` (each checkpoint is written before the next step).
- Burr: `ApplicationBuilder` with `SQLitePersister` on our WAL + NORMAL connection, plus a
  terminal `done` action to halt after. Its persister writes one row (the state as JSON)
  and commits after every action; the case checks it after each run — the connection is
  still WAL + NORMAL, the file holds one committed row per action executed, and
  `commit()` was called once per row — and fails the benchmark otherwise.

The figure is µs per step, opening the file, building the application and closing
included, as for every other case. How a Burr step pairs with one of our journaled
transitions: each of the loop's three actions does what one transition of ours does
between two journal writes (drafting asks the stub model for its proposal, tool_pending
runs the stub tool, awaiting_receipts checks the receipts and the goal), then Burr picks
the next action from a condition, as our guards pick the transition, and persists one row
with its own commit, as we journal one event. A run of N transitions is N + 1 Burr actions
(the terminal `done` included) writing N + 1 rows; ours journals N + 1 events (the
`started` event included). Both divide the elapsed time by those N + 1 rows, so "µs per
step" and "µs per journaled transition" are the same quantity. What Burr does not do per
step, and we do: a hash chain, guard and check results journaled, budgets, and a wall
clock on every model and tool call (it calls them in the caller's thread).
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import sqlite3
import time
from pathlib import Path
from typing import Any, TypedDict, TypeVar

from tests.bench.workload import Scratch, Workload, goal_reached

SKIPPED = "skipped (pip install '.[bench]')"
C = TypeVar("C", bound=sqlite3.Connection)


class LoopState(TypedDict):
    """LangGraph's state schema (at module level: LangGraph reads its annotations)."""

    step: int
    proposal: dict[str, Any] | None
    result: dict[str, Any] | None
    done: bool


def missing(*modules: str) -> str | None:
    """None when every module imports; else the skip note."""
    for name in modules:
        try:
            if importlib.util.find_spec(name) is None:
                return SKIPPED
        except ModuleNotFoundError:
            return SKIPPED
    return None


def langgraph_missing() -> str | None:
    return missing("langgraph", "langgraph.checkpoint.sqlite")


def burr_missing() -> str | None:
    return missing("burr", "burr.core.persistence")


def _wal(path: Path, factory: type[C]) -> C:
    """A connection of class `factory` to `path` in WAL mode with synchronous=NORMAL."""
    conn = sqlite3.connect(path, check_same_thread=False, factory=factory)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


# --- LangGraph ------------------------------------------------------------------------------


@functools.cache
def _langgraph_builder(steps: int) -> Any:
    from langgraph.graph import END, START, StateGraph

    workload = Workload(steps)

    def drafting(state: LoopState) -> dict[str, Any]:
        step = state["step"] + 1
        return {"step": step, "proposal": workload.reply(step)}

    def tool_pending(state: LoopState) -> dict[str, Any]:
        assert state["proposal"] is not None
        return {"result": workload.result(**state["proposal"]["tool_call"]["args"])}

    def awaiting_receipts(state: LoopState) -> dict[str, Any]:
        assert state["result"] is not None
        return {"done": goal_reached(state["result"])}

    def after_drafting(state: LoopState) -> str:
        return "tool_pending" if state["proposal"] and "tool_call" in state["proposal"] else END

    def after_receipts(state: LoopState) -> str:
        return END if state["done"] else "drafting"

    builder = StateGraph(LoopState)
    builder.add_node("drafting", drafting)
    builder.add_node("tool_pending", tool_pending)
    builder.add_node("awaiting_receipts", awaiting_receipts)
    builder.add_edge(START, "drafting")
    builder.add_conditional_edges("drafting", after_drafting)
    builder.add_edge("tool_pending", "awaiting_receipts")
    builder.add_conditional_edges("awaiting_receipts", after_receipts)
    return builder


def langgraph(workload: Workload, scratch: Scratch) -> float:
    """µs per step of the loop on LangGraph with its SQLite checkpointer, durability sync."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    builder = _langgraph_builder(workload.steps)
    db = scratch.fresh("langgraph.db")
    initial: LoopState = {"step": 0, "proposal": None, "result": None, "done": False}
    config: Any = {
        "configurable": {"thread_id": "bench"},
        "recursion_limit": workload.transitions + 10,
    }
    gc.collect()
    start = time.perf_counter()
    conn = _wal(db, sqlite3.Connection)
    graph = builder.compile(checkpointer=SqliteSaver(conn))
    final = graph.invoke(initial, config=config, durability="sync")
    conn.close()
    elapsed = time.perf_counter() - start
    scratch.discard(db)
    if final["step"] != workload.steps or not final["done"]:
        raise RuntimeError(f"LangGraph loop ended at step {final['step']}, done={final['done']}")
    return elapsed * 1e6 / workload.transitions


# --- Burr -----------------------------------------------------------------------------------


@functools.cache
def _burr_actions(steps: int) -> dict[str, Any]:
    from burr.core import State, action

    workload = Workload(steps)

    @action(reads=["step"], writes=["step", "proposal"])
    def drafting(state: State[Any]) -> State[Any]:
        step = state["step"] + 1
        return state.update(step=step, proposal=workload.reply(step))

    @action(reads=["proposal"], writes=["result"])
    def tool_pending(state: State[Any]) -> State[Any]:
        return state.update(result=workload.result(**state["proposal"]["tool_call"]["args"]))

    @action(reads=["result"], writes=["done"])
    def awaiting_receipts(state: State[Any]) -> State[Any]:
        return state.update(done=goal_reached(state["result"]))

    @action(reads=[], writes=[])
    def done(state: State[Any]) -> State[Any]:
        return state

    return {
        "drafting": drafting,
        "tool_pending": tool_pending,
        "awaiting_receipts": awaiting_receipts,
        "done": done,
    }


class _CountingConnection(sqlite3.Connection):
    """A sqlite3 connection that counts its `commit()` calls (to check Burr's persister)."""

    commits = 0

    def commit(self) -> None:
        self.commits += 1
        super().commit()


def _burr_check(db: Path, synchronous: int, commits: int, actions: int) -> None:
    """Burr persisted each action with its own commit, on a WAL + NORMAL connection."""
    reader = sqlite3.connect(db)  # a second connection sees only what was committed
    try:
        mode = reader.execute("PRAGMA journal_mode").fetchone()[0]  # WAL is kept in the file
        rows = reader.execute("SELECT count(*) FROM burr_state").fetchone()[0]
    finally:
        reader.close()
    if (mode, synchronous, rows, commits) != ("wal", 1, actions, actions):
        raise RuntimeError(
            f"Burr's persister: journal_mode {mode}, synchronous {synchronous}, "
            f"{rows} rows and {commits} commits for {actions} actions"
        )


def burr(workload: Workload, scratch: Scratch) -> float:
    """µs per step of the loop on Burr with its SQLite persister on a WAL connection."""
    from burr.core import ApplicationBuilder, default, when
    from burr.core.persistence import SQLitePersister

    actions = _burr_actions(workload.steps)
    db = scratch.fresh("burr.db")
    gc.collect()
    start = time.perf_counter()
    conn = _wal(db, _CountingConnection)
    persister = SQLitePersister(db_path=str(db), connection=conn, table_name="burr_state")
    persister.initialize()  # type: ignore[no-untyped-call]
    conn.commits = 0
    # Burr's builder and `when` are untyped: hold them as Any.
    builder: Any = ApplicationBuilder()  # type: ignore[no-untyped-call]
    goal: Any = when(done=True)  # type: ignore[no-untyped-call]
    app = (
        builder.with_actions(**actions)
        .with_transitions(
            ("drafting", "tool_pending"),
            ("tool_pending", "awaiting_receipts"),
            ("awaiting_receipts", "done", goal),
            ("awaiting_receipts", "drafting", default),
        )
        .with_state(step=0, proposal=None, result=None, done=False)
        .with_entrypoint("drafting")
        .with_state_persister(persister)
        .with_identifiers(app_id="bench")
        .build()
    )
    _, _, final = app.run(halt_after=["done"])
    synchronous = conn.execute("PRAGMA synchronous").fetchone()[0]  # 1 = NORMAL
    commits = conn.commits
    conn.close()
    elapsed = time.perf_counter() - start
    steps = workload.transitions + 1  # the loop's actions and the terminal `done`
    try:
        _burr_check(db, synchronous, commits, steps)
    finally:
        scratch.discard(db)
    if final["step"] != workload.steps or not final["done"]:
        raise RuntimeError(f"Burr loop ended at step {final['step']}, done={final['done']}")
    return elapsed * 1e6 / steps
