"""A live run as the console shows it, and the stream that pushes it (Server-Sent Events).

The server polls the journal, cheaply: SQLite's `data_version` (one pragma, no read) says
whether any process committed since the last look; only then are the run's row and its
newest event read (two indexed rows). Any process or worker that journals the run is seen.
The stream ends after the run's halt (or pause) is sent. What it sends is derived from what
verifies, or marked: each state carries the run's truth (`fsm_agent.review.truth.run_now`).
"""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

import anyio

from fsm_agent.journal.store import Event, Store
from fsm_agent.review.truth import run_now
from fsm_agent.review.view import event_lines
from fsm_agent.runtime.run_status import shown_status

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
    the wall clock left (counted on from its newest event while it runs; a run that has
    ended shows what it used) and its halt; `verified` says whether its chain verifies
    (`unverified`: the verdict when it does not). Read with `run_now`: a live run's state,
    steps and meters are its newest chained event's, a halted run's its sealed record's."""
    now = run_now(store, run_id)
    run, last = now.row, now.last
    m, b = last.snapshot.meters, last.snapshot.budgets
    elapsed = m.elapsed_ms
    if run.status == "running":
        elapsed += _since_ms(last.wall_time, datetime.datetime.now(datetime.UTC))
    if run.record is not None:
        m, b = run.record.meters, run.record.budgets
        elapsed = m.elapsed_ms
    return {
        "run_id": run.run_id,
        "seq": last.seq,
        "state": now.state,
        "status": shown_status(run),
        "halt_reason": run.halt_reason.value if run.halt_reason else None,
        "steps_used": now.steps_used,
        "max_steps": b.max_steps,
        "meters": [
            {"name": "steps", "used": now.steps_used, "budget": b.max_steps},
            {"name": "retries", "used": m.retries_used, "budget": b.max_retries},
            {"name": "cost ($)", "used": round(m.cost, 6), "budget": b.max_cost},
            {"name": "wall clock (ms)", "used": elapsed, "budget": b.wall_clock_ms},
        ],
        "tool_calls": m.tool_calls,
        "elapsed_ms": elapsed,
        "wall_clock_ms": b.wall_clock_ms,
        "wall_clock_left_ms": max(0, b.wall_clock_ms - elapsed),
        "clock": clock_text(run.status != "running", elapsed, b.wall_clock_ms),
        "last": {
            "seq": last.seq,
            "source": last.source,
            "dest": last.dest,
            "trigger": last.trigger,
            "kind": last.kind,
            "note": last.note,
        },
        "ended": run.status != "running",
        "verified": now.truth.ok,
        "unverified": now.truth.why,
        "unverified_note": None if now.truth.ok else unverified_note(now.truth.why),
    }


def unverified_note(why: str | None) -> str:
    """What the live panel says of a run whose chain does not verify."""
    return (
        "the lines here are the run's row and newest event as stored, which may have been"
        f" edited: {why}"
    )


def clock_text(ended: bool, elapsed_ms: int, budget_ms: int) -> str:
    """The wall clock as the panel words it: what is left while the run goes on (the page's
    script counts it down between events), what was used once it has ended."""
    if ended:
        return f"wall clock used {elapsed_ms / 1000:.1f} s of {budget_ms // 1000} s"
    return f"wall clock left {max(0, budget_ms - elapsed_ms) // 1000} s"


def sse(data: dict[str, Any], event: str = "state") -> bytes:
    """One Server-Sent Event. JSON is one line; `<`, `>` and `&` are escaped as \\u003c …
    so the text is safe wherever it lands (the page reads it with JSON.parse)."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f"event: {event}\ndata: {text}\n\n".encode()


def transition(ev: Event) -> dict[str, Any]:
    """One journaled transition as the live log lists it: its seq and the lines `fsm-agent
    show` prints for it (the transition and its guards, the model's reply or the tool call
    with its arguments, outcome, receipts and what it returned, the note)."""
    return {"seq": ev.seq, "lines": [" ".join(line.split()) for line in event_lines(ev)]}


def live_update(
    store: Store, run_id: str, after: int | None
) -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
    """The run now, every transition journaled after seq `after` up to the one it stands at
    (none when `after` is None), and whether more were journaled meanwhile. Only those
    events are read (and one past them), however long the run."""
    state = live_state(store, run_id)
    if after is None or after >= state["seq"]:
        return state, [], False
    events = store.events_between(run_id, after + 1, state["seq"] + 1)
    news = [transition(e) for e in events if e.seq <= state["seq"]]
    return state, news, bool(events) and events[-1].seq > state["seq"]


async def stream(
    read: Reader,
    run_id: str,
    after: int | None = None,
    poll_s: float = POLL_S,
    fetch: Reader | None = None,
) -> AsyncIterator[bytes]:
    """The run's state whenever it changes, until it has ended (or the client goes). Given
    `after` (the seq the page shows), each state carries every transition journaled since
    the last one sent (`transitions`, in order): none is skipped, however many are
    journaled between two looks. `read` asks whether the journal changed (on the connection
    whose version it keeps); `fetch` (default `read`) reads what changed."""
    fetch = fetch or read
    sent: tuple[Any, ...] | None = None
    seen: object = object()
    quiet = 0.0
    while True:
        version = await read(lambda s: s.control_version())
        if version is None or version != seen:
            seen = version
            state, news, more = await fetch(functools.partial(live_update, run_id=run_id,
                                                              after=after))  # fmt: skip
            if more:  # journaled while it was read: look again at once
                seen = object()
            if news:
                after = news[-1]["seq"]
            key = (state["seq"], state["status"], state["state"], state["unverified"])
            if key != sent or news:
                sent, quiet = key, 0.0
                yield sse({**state, "transitions": news})
            if state["ended"]:
                yield sse(state, "ended")
                return
        await anyio.sleep(poll_s)
        quiet += poll_s
        if quiet >= HEARTBEAT_S:
            quiet = 0.0
            yield b": alive\n\n"
