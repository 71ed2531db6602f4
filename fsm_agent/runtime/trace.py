"""Trace shipping: a copy of the whole run leaves the box before the loop may exit.

The halt-path review's rule: traces are stored on a host the team controls, and a copy is
shipped before the loop is allowed to exit. The copy is a run file (`fsm-agent export`'s
format), so it replays anywhere.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from fsm_agent.errors import FsmAgentError
from fsm_agent.journal.chain_hash import (
    base_of,
    chain_version,
    event_columns,
    link_for,
    record_link,
    run_key,
)
from fsm_agent.journal.runfile import (
    RUN_FILE_FORMAT,
    RUN_FILE_FORMAT_3,
    EventHash,
    RunFile,
    write_run_file,
)
from fsm_agent.journal.store import Event, Store
from fsm_agent.runtime.record import HaltRecord


def ship_trace(store: Store, final: Event, record: HaltRecord, path: Path) -> str | None:
    """Write the run — its journaled events, the halting `final` event not yet committed,
    and its record — to `path`. Returns why the copy failed, or None."""
    try:
        run = attrs.evolve(
            store.get_run(final.run_id),
            status="halted",
            state=final.dest,
            halt_reason=record.halt_reason,
            steps_used=record.steps_used,
            ended_at=record.ended_at,
            record=record,
        )
        events = (*store.events(final.run_id), final)
        _, links, head = store.chain(final.run_id)
        if head is None:
            return f"the trace copy to {path} failed (the journal has no head hash)"
        key, version = run_key(run.chain, store.chain_key), chain_version(run.chain)
        chain = [EventHash(x.prev_hash, x.hash) for x in links[: len(events) - 1]]
        columns = event_columns(final, version, base_of(events, version))
        final_hash = link_for(version)(head, columns, key)
        chain.append(EventHash(None if version >= 3 else head, final_hash))
        run = attrs.evolve(run, record_hash=record_link(chain[-1].hash or "", record, key))
        run_file = RunFile(
            format=RUN_FILE_FORMAT if version >= 3 else RUN_FILE_FORMAT_3,
            run=run,
            events=events,
            record=record,
            machine_sha256=run.machine_sha256,
            machine_text=run.machine_text,
            chain=tuple(chain),
            head_hash=chain[-1].hash,
        )
        write_run_file(run_file, path)
    except (OSError, FsmAgentError) as exc:
        return f"the trace copy to {path} failed ({exc})"
    return None


def next_hash(store: Store, prev: str, event: Event) -> str:
    """The hash `event` will have once chained onto `prev`, in its run's chain mode (what
    the record shipped before the halting event is committed names as the journal's head)."""
    run = store.get_run(event.run_id)
    key, version = run_key(run.chain, store.chain_key), chain_version(run.chain)
    base = base_of(store.events(event.run_id), version) if version >= 4 else None
    return link_for(version)(prev, event_columns(event, version, base), key)
