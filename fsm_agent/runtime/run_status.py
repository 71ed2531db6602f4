"""A run's status as people read it, from its row alone: whether the process that owns a
live run is still there, and what a halted run waits for. Light on purpose: `runs`,
`show` and the console's lists ask it of every row they print."""

from __future__ import annotations

import os
import socket
from typing import Any, Literal

from fsm_agent.journal.store import RunRow, Store

Liveness = Literal["live", "gone", "elsewhere"]


def liveness(run: RunRow) -> Liveness:
    """Whether the process that owns a live run is still there: `elsewhere` when it ran on
    another host (this one cannot tell)."""
    if run.host is not None and run.host != socket.gethostname():
        return "elsewhere"
    if run.pid is None or run.pid <= 0:
        return "gone"
    try:
        os.kill(run.pid, 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        return "live"  # a process we may not signal: someone's, so not gone
    return "gone" if _zombie(run.pid) else "live"


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def shown_status(run: RunRow) -> str:
    """A run's status as people read it: a `running` run whose process is gone is
    `interrupted` (resume it); a halted run whose declaration goes on on a person's
    decision is `waiting` (approve, deny or answer it). The journal itself still says
    running, or halted with its record."""
    if run.status == "running" and liveness(run) == "gone":
        return "interrupted"
    if run.status == "halted" and waiting_for(run) is not None:
        return "waiting"
    return run.status


#: Each status as people read it (`shown_status`), and the journal's status it is split from
#: (by the run's process, or by what its sealed record says it waits for).
SHOWN_FROM: dict[str, str] = {
    "running": "running",
    "interrupted": "running",
    "paused": "paused",
    "waiting": "halted",
    "halted": "halted",
}


def shown_runs(store: Store, status: str, wanted: int, **filters: Any) -> list[RunRow]:
    """Up to `wanted` runs whose status as people read it is `status`, newest first (with
    `Store.list_runs`'s `filters`, `before` included): the journal's runs of the status it
    is split from, read a page at a time by key until `wanted` of them are `status`."""
    journal = SHOWN_FROM[status]
    if journal == status == "paused":
        return store.list_runs(wanted, status="paused", **filters)
    found: list[RunRow] = []
    page = max(100, wanted)
    while len(found) < wanted:
        chunk = store.list_runs(page, status=journal, **filters)  # type: ignore[arg-type]
        found += [r for r in chunk if shown_status(r) == status]
        if len(chunk) < page:
            break
        filters = {**filters, "before": (chunk[-1].started_at, chunk[-1].run_id)}
    return found[:wanted]


def waiting_for(run: RunRow) -> str | None:
    """What a halted run waits for — `approval` or `answer` — as its sealed record says
    (None: its stop is final)."""
    packet = None if run.record is None else run.record.handoff
    return None if packet is None else packet.awaits
