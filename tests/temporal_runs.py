"""Running a run on a real Temporal development server, for the tests and the benchmark: a
worker served in this process for one model and tools module, the run submitted and awaited
as `fsm-agent submit --temporal` would."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from fsm_agent.adapters.models import ModelAdapter
from fsm_agent.runtime.lanes import LOCAL, Lane
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.runtime.tools import ToolRegistry
from fsm_agent.stores import open_store
from fsm_agent.submission import frozen_job
from fsm_agent.temporal.service import connect, record_of, result, serve, start
from fsm_agent.temporal.setup import Setup, submission
from fsm_agent.temporal.workflow import Outcome


async def _run(
    address: str,
    db: str,
    machine: str,
    task: str,
    setup: Setup,
    budgets: Mapping[str, Any],
    halt_lane: Lane,
    thrash_limit: int | None,
) -> tuple[Outcome, int]:
    store = open_store(db)
    stop = asyncio.Event()
    serving = asyncio.create_task(serve(address, setup, store, stop=stop))
    try:
        client = await connect(address, db)
        job = frozen_job(machine, task, budgets)
        await start(client, submission(job, halt_lane=halt_lane, thrash_limit=thrash_limit))
        outcome = await result(client, job.run_id)
        history = await client.get_workflow_handle(job.run_id).fetch_history()
        size = sum(event.ByteSize() for event in history.events)
        return outcome, size
    finally:
        stop.set()
        await serving
        store.close()


def run_on_temporal(
    address: str,
    db: str,
    machine: str,
    task: str,
    *,
    model: ModelAdapter,
    tools: ToolRegistry,
    allow: tuple[str, ...] | None = None,
    budgets: Mapping[str, Any] | None = None,
    halt_lane: Lane = LOCAL,
    thrash_limit: int | None = None,
) -> tuple[HaltRecord, int]:
    """Run `task` on `machine` as a Temporal workflow journaled in `db`; return its halt
    record and the size in bytes of its workflow history."""
    setup = Setup(journal=db, model=model, tools=tools, allow=allow)
    outcome, size = asyncio.run(
        _run(address, db, machine, task, setup, budgets or {}, halt_lane, thrash_limit)
    )
    record = record_of(outcome)
    assert record is not None, outcome
    return record, size
