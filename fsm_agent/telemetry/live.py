"""Traces sent while runs go on, never on their halt path.

A run's `on_transition` hands each journaled event to `LiveTracer.on_transition`, which only
puts it into a bounded in-memory queue (`put_nowait`: when the queue is full the event is
dropped and counted); `on_halt` does the same with a halted run's id. One daemon thread
takes them off the queue, builds the spans (`fsm_agent.telemetry.steps`, the same builder
`export-traces` uses, so the ids and times are the same) and exports them: a step's spans as
soon as its event is journaled, the root span once the run has halted (read back from the
journal, with its halt record). The run never waits on the thread: an exporter that is down,
slow or hanging delays, fails and changes nothing. `close` gives the thread a bounded time
(`FLUSH_S`) to send what is left, then lets the process exit without it.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, Final, Literal

import attrs

from fsm_agent.journal.store import Event, Store
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.telemetry.content import TraceOptions
from fsm_agent.telemetry.otlp import Sender
from fsm_agent.telemetry.root import root_span
from fsm_agent.telemetry.spans import Span
from fsm_agent.telemetry.steps import RunSpans

#: How many events (and halts) may wait for the thread; past that they are dropped.
QUEUE_SIZE: Final = 10_000
#: How long `close` waits, at most, for what is still to send (seconds).
FLUSH_S: Final = 2.0
#: The most spans sent in one request.
BATCH: Final = 512

Item = tuple[Literal["event", "halt"], Any]


@attrs.define
class LiveCounts:
    """What a live tracer did: spans sent and not taken, events dropped (queue full), the
    last failure's text."""

    sent: int = 0
    failed: int = 0
    dropped: int = 0
    error: str | None = None


class LiveTracer:
    """Sends the spans of the runs whose events it is handed (see the module's doc).

    `journal` opens a read-only view of the runs' journal (the thread reads a run's row
    when it first sees it, and its halt record when it halts); `sender` makes the exporter,
    on the thread (`Sender`: the standard OTLP exporter)."""

    def __init__(
        self,
        journal: Callable[[], Store],
        options: TraceOptions,
        *,
        sender: Callable[[], Sender] = Sender,
        queue_size: int = QUEUE_SIZE,
    ) -> None:
        self.options = options
        self.counts = LiveCounts()
        self._journal, self._sender = journal, sender
        self._queue: queue.Queue[Item] = queue.Queue(maxsize=queue_size)
        self._stop = threading.Event()
        self._lock = threading.Lock()  # runs on many threads may hand events at once
        self._runs: dict[str, RunSpans] = {}
        self._store: Store | None = None
        self._thread = threading.Thread(target=self._consume, name="fsm-agent-traces", daemon=True)
        self._thread.start()

    def on_transition(self, event: Event) -> None:
        """Queue a journaled event (never blocks, never raises)."""
        self._put(("event", event))

    def on_halt(self, record: HaltRecord) -> None:
        """Queue a halted run's root span (never blocks, never raises)."""
        self._put(("halt", record.run_id))

    def _put(self, item: Item) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            with self._lock:
                self.counts.dropped += 1

    def close(self, timeout_s: float = FLUSH_S) -> int:
        """Let the thread send what waits, for at most `timeout_s`; return how many items
        were still waiting when it gave up (0: everything was handled)."""
        self._stop.set()
        self._thread.join(timeout_s)
        return self._queue.qsize() + (1 if self._thread.is_alive() else 0)

    # --- the thread -----------------------------------------------------------------------

    def _consume(self) -> None:
        try:
            sender = self._sender()
        except Exception as exc:  # not sendable: the queue is still drained, never sent
            self.counts.error = f"{type(exc).__name__}: {exc}"
            sender = None
        try:
            while not (self._stop.is_set() and self._queue.empty()):
                batch = self._take()
                if batch and sender is not None:
                    self._send(sender, batch)
                elif batch:
                    self.counts.failed += len(batch)
        finally:
            with contextlib.suppress(Exception):
                if sender is not None:
                    sender.close()
            with contextlib.suppress(Exception):
                if self._store is not None:
                    self._store.close()

    def _take(self) -> list[Item]:
        """What waits: the next item (waiting up to 0.1 s), and whatever is behind it."""
        try:
            batch = [self._queue.get(timeout=0.1)]
        except queue.Empty:
            return []
        while len(batch) < BATCH:
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def _send(self, sender: Sender, batch: list[Item]) -> None:
        spans: list[Span] = []
        try:
            for kind, value in batch:
                spans += self._spans(value) if kind == "event" else self._root(value)
            taken = sender.send(spans)
        except Exception as exc:  # a journal read or an export that raised
            self.counts.failed += max(1, len(spans))
            self.counts.error = f"{type(exc).__name__}: {exc}"
            return
        if taken:
            self.counts.sent += len(spans)
        else:
            self.counts.failed += len(spans)
            self.counts.error = sender.error or "the OTLP endpoint did not take them"

    def _journal_store(self) -> Store:
        if self._store is None:
            self._store = self._journal()
        return self._store

    def _spans(self, event: Event) -> list[Span]:
        steps = self._runs.get(event.run_id)
        if steps is None:  # first seen: its row, and any events before this one (a take-over)
            store = self._journal_store()
            steps = self._runs[event.run_id] = RunSpans(store.get_run(event.run_id), self.options)
            if event.seq > 0:
                for earlier in store.events(event.run_id):
                    if earlier.seq < event.seq:
                        steps.spans(earlier)
        return steps.spans(event)

    def _root(self, run_id: str) -> list[Span]:
        self._runs.pop(run_id, None)
        store = self._journal_store()
        root = root_span(store.get_run(run_id), store.events(run_id), self.options)
        return [] if root is None else [root]
