"""The halt lab run most worker-level tests start from: agent_loop, the lab's lookup tool,
a real SQLite journal and record under tmp_path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from fsm_agent import HaltRecord, ScriptedModel, ToolRegistry, load_tools, run
from fsm_agent.journal.chain import event_columns, genesis
from fsm_agent.journal.chain_hash import base_of, chain_version, link_for, record_link
from fsm_agent.journal.runfile import EventHash, RunFile
from fsm_agent.review.replay import replay_events
from fsm_agent.stores.sqlite import SqliteStore

LOOKUP = {"tool_call": {"name": "lookup", "args": {"q": "lab password"}}}  # a receipted hit
MISS = {"tool_call": {"name": "lookup", "args": {"q": "again"}}}  # "refine your query"
LAB_TOOLS = "fsm_agent.examples.halt_lab.tools"
# agent_loop lists no tools: a run of it may call only what the operator allows (--allow)
LAB_ALLOW = ("lookup", "slow_lookup", "hang")
LAB_ALLOW_ARG = ",".join(LAB_ALLOW)  # the same, as `--allow` takes it


def granted(tools: ToolRegistry) -> dict[str, Any]:
    """`run` options that hand the run `tools` and allow every tool they register: what an
    operator does with `--tools MODULE --allow A,B,…` for a machine that lists no tools."""
    return {"tools": tools, "allow": tools.names()}


def lab_run(tmp_path: Path, model: list[Any] | Any, **options: Any) -> HaltRecord:
    """Run the lab task with scripted replies (a list) or a model adapter; `options` go to
    `run` (`store` defaults to tmp_path/j.db, the record to tmp_path/r.json)."""
    options.setdefault("store", tmp_path / "j.db")
    options.setdefault("allow", LAB_ALLOW)
    return run(
        "agent_loop",
        task="Find the lab password",
        model=ScriptedModel(model) if isinstance(model, list) else model,
        tools=load_tools(LAB_TOOLS),
        record_path=tmp_path / "r.json",
        **options,
    )


def rechained(run_file: RunFile) -> RunFile:
    """A run file made up by a test (ids and times changed), with its hash chain and its
    record's seal recomputed (unkeyed) so that it imports like a real run."""
    prev, chain = genesis(run_file.run), []
    version = chain_version(run_file.run.chain)
    base = base_of(run_file.events, version)
    for event in run_file.events:
        h = link_for(version)(prev, event_columns(event, version, base), None)
        chain.append(EventHash(None if version >= 3 else prev, h))
        prev = h
    record = None if run_file.record is None else attrs.evolve(run_file.record, journal_head=prev)
    seal = None if record is None else record_link(prev, record)  # resealed, as the store does
    run = attrs.evolve(run_file.run, record=record, record_hash=seal)
    return attrs.evolve(run_file, run=run, record=record, chain=tuple(chain), head_hash=prev)


def replays(db: Path, run_id: str) -> bool:
    """Whether the run in the journal at `db` replays clean."""
    store = SqliteStore(db)
    try:
        return replay_events(store.get_run(run_id), store.events(run_id)).ok
    finally:
        store.close()
