"""The queue's worker: it leases submitted runs (`fsm_agent.queue.submission.submit`) and drives
them.

A `QueueWorker` runs `concurrency` threads; each opens its own store, leases the oldest job
that is queued or whose lease expired, and drives it to a halt: `run` for a run the journal
does not hold yet, `resume_run` (under the resume rules, the lease standing in for "its
process is gone") for one a previous worker left, and nothing for one that has already
halted (its worker died before releasing it). Each thread builds the model and the tools
afresh for each job: adapters may keep state, and no two runs share one.

Leases: a heartbeat renews every held lease each `lease_s / 3`, and the lease is renewed
once more right before each side effect (a tool call, a user action). A renewal refused
means the lease was lost (it expired, and another worker took the job over): the run is
abandoned before that call, writing nothing more (`RunAbandoned`), or, noticed by the
heartbeat, paused at its next model call. The journal refuses a second writer anyway: an
event is appended only onto the run's head, so once the new owner has journaled its
`resumed` event, the old owner's next write fails and its thread stops.

Shutdown (SIGTERM or SIGINT, or `stop()`): no more leases; every run in flight is paused at
its next model call and its job released back to the queue for another worker; after
`drain_s` the worker exits anyway (exit 128+N) and the leases of the runs still in flight
expire, so another worker takes them over.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from fsm_agent.adapters.models import ModelAdapter
from fsm_agent.errors import (
    FsmAgentError,
    InvalidInputError,
    JournalError,
)
from fsm_agent.halt import EXIT_INTERNAL_ERROR
from fsm_agent.journal.store import Event, Store
from fsm_agent.queue.job import JobDriving, Outcome, Slot
from fsm_agent.queue.submission import (
    DEFAULT_DRAIN_S,
    DEFAULT_LEASE_S,
    DEFAULT_RECORDS,
)
from fsm_agent.runtime.journaling import now_iso
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.runtime.tools import ToolRegistry
from fsm_agent.stores import open_store
from fsm_agent.stores.dsn import redact_dsn

#: The longest wait between two leasing tries while the journal keeps failing.
MAX_BACKOFF_S = 5.0


def backoff_s(failures: int, poll_s: float) -> float:
    """How long a worker thread waits before its next lease: `poll_s`, doubled for each
    leasing failure in a row, up to `MAX_BACKOFF_S` (a journal that is down is not
    hammered, nor its log flooded)."""
    if failures <= 0:
        return poll_s
    return min(MAX_BACKOFF_S, poll_s * 2.0 ** min(failures, 32))


class QueueWorker(JobDriving):
    """Leases jobs from the queue at `location` and runs them, `concurrency` at a time.

    `model` and `tools` build a fresh adapter and registry for each job, `allow` is every
    run's grant (`fsm_agent.runtime.worker.run`); `on_transition`
    is handed every event the runs journal (on their threads, after the worker's own
    checks), and `on_halt` each halt record (a traces sender: neither may block). `serve()` runs
    until the queue is empty (`idle_exit`), `max_jobs` jobs were taken, or `stop()` (SIGTERM
    and SIGINT in the main thread); it returns the exit code: 0, 128+N when runs were still
    in flight at the drain deadline, 70 when the journal could not be opened.
    """

    def __init__(
        self,
        location: str,
        *,
        model: Callable[[], ModelAdapter],
        tools: Callable[[], ToolRegistry],
        allow: Sequence[str] | None = None,
        concurrency: int = 1,
        lease_s: float = DEFAULT_LEASE_S,
        drain_s: float = DEFAULT_DRAIN_S,
        records: str | os.PathLike[str] = DEFAULT_RECORDS,
        max_jobs: int | None = None,
        idle_exit: bool = False,
        poll_s: float = 0.2,
        heartbeat_s: float | None = None,
        log: Callable[[str], None] | None = None,
        secret_env: Sequence[str] = (),
        on_transition: Callable[[Event], None] | None = None,
        on_halt: Callable[[HaltRecord], None] | None = None,
    ) -> None:
        if concurrency < 1:
            raise InvalidInputError(f"concurrency must be >= 1, got {concurrency}")
        if not lease_s > 0 or drain_s < 0 or not poll_s > 0:
            raise InvalidInputError("lease_s and poll_s must be > 0, drain_s >= 0")
        if max_jobs is not None and max_jobs < 1:
            raise InvalidInputError(f"max_jobs must be >= 1, got {max_jobs}")
        self.location, self.model, self.tools = location, model, tools
        self.allow = None if allow is None else tuple(allow)
        #: environment variables whose values every run redacts (see fsm_agent.redaction)
        self.secret_env = tuple(secret_env)
        #: handed every event each run journals, and each record a run halts with (traces)
        self.on_transition, self.on_halt = on_transition, on_halt
        self.concurrency, self.lease_s, self.drain_s = concurrency, lease_s, drain_s
        self.records = Path(records)
        self.max_jobs, self.idle_exit, self.poll_s = max_jobs, idle_exit, poll_s
        self.heartbeat_s = lease_s / 3 if heartbeat_s is None else heartbeat_s
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.outcomes: Counter[Outcome] = Counter()
        self._log_fn = log
        self._lock = threading.Lock()
        self._slots: dict[str, Slot] = {}
        self._taken = 0
        self._stopping = threading.Event()
        self._beat_stop = threading.Event()
        #: the signal (or `stop()`) that asked the worker to stop; a second one hurries it
        self._requested: int | None = None
        self._hurry = False
        self._broken = False  # a thread could not open the journal

    # --- the process ------------------------------------------------------------------------

    def serve(self) -> int:
        """Run until done; return the exit code (0, or 128+N past the drain deadline)."""
        self.records.mkdir(parents=True, exist_ok=True)
        threads = [
            threading.Thread(target=self._thread, args=(f"w{i}",), name=f"w{i}", daemon=True)
            for i in range(1, self.concurrency + 1)
        ]
        beat = threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True)
        previous = self._install_signals()
        self._log(
            f"worker {self.name}: {self.concurrency} thread(s), lease {self.lease_s:g} s,"
            f" journal {redact_dsn(self.location)}"
        )
        deadline: float | None = None
        try:
            beat.start()
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):
                if self._requested is not None and deadline is None:
                    deadline = time.monotonic() + self.drain_s
                    self._drain(self._requested)
                if deadline is not None and (self._hurry or time.monotonic() >= deadline):
                    break
                time.sleep(0.02)
        finally:
            self._beat_stop.set()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        with self._lock:
            left = sorted(self._slots)
        done = ", ".join(f"{n} {what}" for what, n in sorted(self.outcomes.items()))
        if left:
            self._log(
                f"worker {self.name}: drain deadline passed with {len(left)} run(s) in flight"
                f" ({', '.join(left)}); their leases expire within {self.lease_s:g} s and"
                " another worker takes them over"
            )
            return 128 + (self._requested or signal.SIGTERM)
        self._log(f"worker {self.name}: exiting; jobs: {done or 'none'}")
        return EXIT_INTERNAL_ERROR if self._broken else 0

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Stop as on `signum`: no more leases, every run in flight paused and released
        (callable from any thread; a second call stops waiting for the runs)."""
        if self._requested is not None:
            self._hurry = True
        self._requested = signum

    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[int(sig)] = signal.signal(sig, self._on_signal)
        return previous

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop(signum)  # only flags: the main loop does the work

    def _drain(self, signum: int) -> None:
        self._stopping.set()
        why = f"the queue worker {self.name} is shutting down ({signal.Signals(signum).name})"
        with self._lock:
            for slot in self._slots.values():
                slot.stop = slot.stop or why
            count = len(self._slots)
        self._log(
            f"worker {self.name}: {signal.Signals(signum).name}: no more leases; pausing"
            f" {count} run(s) in flight (drain deadline {self.drain_s:g} s)"
        )

    def _log(self, line: str) -> None:
        if self._log_fn is not None:
            self._log_fn(line)
            return
        with contextlib.suppress(OSError):  # a closed terminal does not stop the worker
            print(f"{now_iso()} {line}", file=sys.stderr, flush=True)

    # --- threads ---------------------------------------------------------------------------

    def _thread(self, name: str) -> None:
        owner = f"{name}@{self.name}"
        try:
            store = open_store(self.location)
        except FsmAgentError as exc:
            self._log(f"worker {name}: cannot open the journal: {exc}")
            self._count("failed")
            self._broken = True
            return
        failures = 0  # leasing failures in a row: the wait between tries grows
        try:
            while not self._stopping.is_set() and self._ticket():
                try:
                    job = store.lease_job(owner, self.lease_s)
                except JournalError as exc:
                    job, failures = None, failures + 1
                    wait = backoff_s(failures, self.poll_s)
                    self._log(f"worker {name}: leasing failed: {exc}; trying again in {wait:g} s")
                else:
                    failures = 0
                if job is not None:
                    self._work(store, Slot(job, name, owner))
                    continue
                self._untake()
                if not failures and self.idle_exit and self._queue_empty(store):
                    return
                self._stopping.wait(backoff_s(failures, self.poll_s))
        finally:
            store.close()

    def _ticket(self) -> bool:
        with self._lock:
            if self.max_jobs is not None and self._taken >= self.max_jobs:
                return False
            self._taken += 1
            return True

    def _untake(self) -> None:
        with self._lock:
            self._taken -= 1

    @staticmethod
    def _queue_empty(store: Store) -> bool:
        """No job queued or leased (leased first: a job moves queued → leased → queued,
        so this order never misses one that is waiting)."""
        try:
            return not store.jobs("leased", limit=1) and not store.jobs("queued", limit=1)
        except JournalError:
            return False

    def _heartbeat(self) -> None:
        """Renew every held lease each `heartbeat_s`, for as long as the worker runs: a
        journal that cannot be reached for a while costs renewals, not the heartbeat."""
        store: Store | None = None
        try:
            while not self._beat_stop.wait(self.heartbeat_s):
                with self._lock:
                    held = [s for s in self._slots.values() if not s.released]
                if not held:
                    continue
                if store is None:
                    try:
                        store = open_store(self.location)
                    except FsmAgentError as exc:
                        self._log(f"worker {self.name}: heartbeat: {exc}; trying again")
                        continue
                for slot in held:
                    self._renew(store, slot)
        finally:
            if store is not None:
                store.close()

    def _renew(self, store: Store, slot: Slot) -> None:
        run_id = slot.job.run_id
        try:
            held = store.renew_lease(run_id, slot.owner, self.lease_s)
        except JournalError as exc:
            self._log(f"worker {slot.thread}: run {run_id}: lease renewal failed: {exc}")
            return
        with self._lock:
            if held or slot.released or slot.stop is not None:
                return
            slot.stop = f"the queue lease of {slot.owner} was lost (taken over, or dequeued)"
        self._log(
            f"worker {slot.thread}: run {run_id} lost its lease; stopping it before its next call"
        )

    # --- one job ---------------------------------------------------------------------------

    def _work(self, store: Store, slot: Slot) -> None:
        job = slot.job
        with self._lock:
            self._slots[job.run_id] = slot
            if self._stopping.is_set():
                slot.stop = f"the queue worker {self.name} is shutting down"
        self._log(f"worker {slot.thread}: run {job.run_id} leased (attempt {job.attempts})")
        try:
            self._drive(store, slot)
        except Exception as exc:  # the store failed under us: the lease runs out
            self._count("abandoned")
            self._log(
                f"worker {slot.thread}: run {job.run_id}: {type(exc).__name__}: {exc}; its"
                " lease is left to expire (another worker retries it)"
            )
        finally:
            with self._lock:
                self._slots.pop(job.run_id, None)

    def _count(self, outcome: Outcome) -> None:
        with self._lock:
            self.outcomes[outcome] += 1
