"""A live run as the console shows it, and the stream that pushes it (Server-Sent Events).

The server polls the journal, cheaply: SQLite's `data_version` (one pragma, no read) says
whether any process committed since the last look; only then are the run's row and its
newest event read (two indexed rows). Any process or worker that journals the run is seen.
The stream ends after the run's halt (or pause) is sent.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

import anyio

from fsm_agent.journal.store import Store
from fsm_agent.runtime.resume import shown_status

T = TypeVar("T")
#: How often the server looks at the journal for a live run (seconds).
POLL_S = 0.25
#: A comment line this often keeps the connection open through idle proxies (seconds).
HEARTBEAT_S = 10.0


class Reader(Protocol):
    """Runs `fn(store)` on the console's journal in a worker thread, one reader at a time."""

    def __call__(self, fn: Callable[[Store], T], /) -> Awaitable[T]: ...


def _since_ms(wall_time: str, now: datetime.datetime) -> int:
    try:
        at = datetime.datetime.fromisoformat(wall_time)
    except ValueError:
        return 0
    if at.tzinfo is None:
        at = at.replace(tzinfo=datetime.UTC)
    return max(0, int((now - at).total_seconds() * 1000))


def live_state(store: Store, run_id: str) -> dict[str, Any]:
    """The run now: its state and status, `step n/max`, every meter against its budget,
    the wall clock left (counted on from its newest event while it runs) and its halt."""
    run = store.get_run(run_id)
    last = store.last_event(run_id)
    m, b = last.snapshot.meters, last.snapshot.budgets
    status = shown_status(run)
    elapsed = m.elapsed_ms
    if run.status == "running":
        elapsed += _since_ms(last.wall_time, datetime.datetime.now(datetime.UTC))
    if run.record is not None:
        m, b = run.record.meters, run.record.budgets
        elapsed = m.elapsed_ms
    return {
        "run_id": run.run_id,
        "seq": last.seq,
        "state": run.state if run.status == "halted" else last.dest,
        "status": status,
        "halt_reason": run.halt_reason.value if run.halt_reason else None,
        "steps_used": m.steps_used,
        "max_steps": b.max_steps,
        "meters": [
            {"name": "steps", "used": m.steps_used, "budget": b.max_steps},
            {"name": "retries", "used": m.retries_used, "budget": b.max_retries},
            {"name": "cost ($)", "used": round(m.cost, 6), "budget": b.max_cost},
            {"name": "wall clock (ms)", "used": elapsed, "budget": b.wall_clock_ms},
        ],
        "tool_calls": m.tool_calls,
        "wall_clock_left_ms": max(0, b.wall_clock_ms - elapsed),
        "last": {
            "seq": last.seq,
            "source": last.source,
            "dest": last.dest,
            "trigger": last.trigger,
            "kind": last.kind,
            "note": last.note,
        },
        "ended": run.status != "running",
    }


def sse(data: dict[str, Any], event: str = "state") -> bytes:
    """One Server-Sent Event. JSON is one line; `<`, `>` and `&` are escaped as \\u003c …
    so the text is safe wherever it lands (the page reads it with JSON.parse)."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f"event: {event}\ndata: {text}\n\n".encode()


async def stream(read: Reader, run_id: str, poll_s: float = POLL_S) -> AsyncIterator[bytes]:
    """The run's state whenever it changes, until it has ended (or the client goes)."""
    sent: tuple[Any, ...] | None = None
    seen: object = object()
    quiet = 0.0
    while True:
        version = await read(lambda s: s.control_version())
        if version is None or version != seen:
            seen = version
            state = await read(lambda s: live_state(s, run_id))
            key = (state["seq"], state["status"], state["state"])
            if key != sent:
                sent, quiet = key, 0.0
                yield sse(state)
            if state["ended"]:
                yield sse(state, "ended")
                return
        await anyio.sleep(poll_s)
        quiet += poll_s
        if quiet >= HEARTBEAT_S:
            quiet = 0.0
            yield b": alive\n\n"
