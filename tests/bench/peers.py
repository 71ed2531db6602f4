"""Peers on the same workload, when the `bench` extra is installed: LangGraph and Burr.

Both run the loop as three nodes (drafting, tool_pending, awaiting_receipts) with the same
stub model and tool and a condition deciding whether to go round again, persisting after
every step to a fresh SQLite file in WAL mode with `synchronous=NORMAL` (fsm-agent's
default durability):

- LangGraph: `StateGraph` compiled with `SqliteSaver` (`langgraph-checkpoint-sqlite`),
  invoked with `durability="sync"` (each checkpoint is written before the next step).
- Burr: `ApplicationBuilder` with `SQLitePersister` on a WAL connection (one INSERT and
  COMMIT per step), plus a terminal `done` action to halt after.

The figure is µs per step (one node or action executed); opening the file, building the
application and closing are timed, as for every other case.
"""

from __future__ import annotations

import functools
import gc
import importlib.util
import sqlite3
import time
from pathlib import Path
from typing import Any, TypedDict

from tests.bench.workload import Scratch, Workload, goal_reached

SKIPPED = "skipped (pip install '.[bench]')"


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


def _wal(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False)
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
    conn = _wal(db)
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


def burr(workload: Workload, scratch: Scratch) -> float:
    """µs per step of the loop on Burr with its SQLite persister on a WAL connection."""
    from burr.core import ApplicationBuilder, default, when
    from burr.core.persistence import SQLitePersister

    actions = _burr_actions(workload.steps)
    db = scratch.fresh("burr.db")
    gc.collect()
    start = time.perf_counter()
    conn = _wal(db)
    persister = SQLitePersister(db_path=str(db), connection=conn)
    persister.initialize()  # type: ignore[no-untyped-call]
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
    conn.close()
    elapsed = time.perf_counter() - start
    scratch.discard(db)
    if final["step"] != workload.steps or not final["done"]:
        raise RuntimeError(f"Burr loop ended at step {final['step']}, done={final['done']}")
    return elapsed * 1e6 / (workload.transitions + 1)
