"""How a queue worker drives one leased job: run it or take it over, keep the lease
before each side effect, and give the job back (halted, paused, held or abandoned).

Mixed into `fsm_agent.queue.worker.QueueWorker`, which owns the threads, the heartbeat and
the log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

from fsm_agent.adapters.models import ModelAdapter
from fsm_agent.errors import InvalidInputError, JournalError, RunAbandoned, RunPaused
from fsm_agent.journal.store import Control, Event, Job, RunRow, Store
from fsm_agent.queue.submission import WORKER_WHO, queued_spec
from fsm_agent.run_ids import RunNotFound, record_stem
from fsm_agent.runtime.actions import has_side_effect
from fsm_agent.runtime.journaling import now_iso
from fsm_agent.runtime.record import HaltRecord, write_record
from fsm_agent.runtime.tools import ToolRegistry
from fsm_agent.runtime.worker import resume_run, run


@attrs.define
class Slot:
    """One leased job in flight on one of the worker's threads."""

    job: Job
    thread: str
    owner: str
    #: why the run must stop at its next model call (lease lost, shutting down)
    stop: str | None = None
    pause_queued: bool = False
    #: set before the thread releases the job: the heartbeat leaves it alone
    released: bool = False


Outcome = Literal["halted", "paused", "held", "released", "failed", "abandoned"]


class JobDriving:
    """The per-job half of a queue worker."""

    records: Path
    model: Callable[[], ModelAdapter]
    tools: Callable[[], ToolRegistry]
    #: the tools every run may call (`--allow`): narrows a machine's `tools:`, or is the
    #: whole allow-list of a machine that lists none (None: the declaration's own)
    allow: tuple[str, ...] | None
    lease_s: float
    secret_env: tuple[str, ...]
    on_transition: Callable[[Event], None] | None
    on_halt: Callable[[HaltRecord], None] | None
    _lock: threading.Lock

    if TYPE_CHECKING:

        def _log(self, line: str) -> None: ...

        def _count(self, outcome: Outcome) -> None: ...

    def _drive(self, store: Store, slot: Slot) -> None:
        job = slot.job
        if slot.stop is not None:
            self._release(store, slot, "queued", "released unstarted (stopping)", "released")
            return
        row = self._journaled(store, job.run_id)
        if row is not None and row.status == "halted":  # its worker died before releasing it
            self._already_halted(store, slot, row)
            return
        # Each attempt writes its own record file: a stale owner's cannot overwrite it. The
        # names come from `record_stem`: no run id puts a file outside the directory.
        stem = record_stem(job.run_id)
        attempt = self.records / f".{stem}.attempt{job.attempts}.json"
        try:
            # Leasing and starting are two steps: a worker that stalled in between (and
            # whose job was dequeued or taken over meanwhile) must not start the run.
            self._hold_lease(store, slot, "before the run started")
            record = self._execute(store, slot, row is not None, attempt)
        except RunPaused as exc:
            self._paused(store, slot, exc)
            return
        except RunAbandoned as exc:  # not released: the job is (or will be) another's
            self._count("abandoned")
            self._log(f"worker {slot.thread}: {exc}; left to the queue")
            return
        except JournalError as exc:
            if attempt.exists():
                attempt.replace(self.records / f"{stem}.attempt{job.attempts}.failed.json")
            self._count("abandoned")
            self._log(
                f"worker {slot.thread}: run {job.run_id} stopped: {exc}; its lease is left to"
                " expire (another worker continues it)"
            )
            return
        except InvalidInputError as exc:  # it cannot be run or resumed: a person looks at it
            row = self._journaled(store, job.run_id)
            if row is not None and row.status == "halted":  # a stale owner finished it
                self._already_halted(store, slot, row)
                return
            self._release(store, slot, "done", f"failed: {exc}", "failed")
            return
        attempt.replace(self.records / f"{stem}.json")
        if self.on_halt is not None:
            self.on_halt(record)
        what = f"halted {record.halt_reason.value} ({record.steps_used} steps)"
        if record.handoff is not None and record.handoff.awaits is not None:
            what += f", waiting for a person's {record.handoff.awaits}"
        self._release(store, slot, "done", what, "halted")

    @staticmethod
    def _journaled(store: Store, run_id: str) -> RunRow | None:
        try:
            return store.get_run(run_id)
        except RunNotFound:
            return None

    def _already_halted(self, store: Store, slot: Slot, row: RunRow) -> None:
        """Another worker finished the run but did not release the job: write the record
        file if it is missing, and release the job as done."""
        final = self.records / f"{record_stem(row.run_id)}.json"
        if row.record is not None and not final.exists():
            write_record(row.record, final)
        reason = row.halt_reason.value if row.halt_reason else "?"
        self._release(store, slot, "done", f"had already halted {reason}", "halted")

    def _execute(self, store: Store, slot: Slot, journaled: bool, path: Path) -> HaltRecord:
        job = slot.job
        common: dict[str, Any] = {
            "model": self.model(),
            "tools": self.tools(),
            "store": store,
            "record_path": path,
            "handle_signals": False,
            "on_transition": self._watch(store, slot),
            "secret_env": self.secret_env,
        }
        if journaled:
            return resume_run(job.run_id, lease_held=True, **common)
        budgets = attrs.asdict(job.budgets)
        return run(queued_spec(job), task=job.task, budgets=budgets, run_id=job.run_id,
                   allow=self.allow, **common)  # fmt: skip

    def _watch(self, store: Store, slot: Slot) -> Callable[[Event], None]:
        """After each committed event (handed first to the worker's `on_transition`):
        before a side effect (a tool call or a user action), make sure the lease is still
        this worker's — renewed now, or the run is abandoned without the call; then queue
        the pause the worker asked for, once (the run applies it before its next model
        call)."""
        spec = queued_spec(slot.job)
        also = self.on_transition

        def on_transition(event: Event) -> None:
            if also is not None:
                also(event)
            if event.halt is not None:
                return
            if has_side_effect(spec.state(event.dest).action):
                self._hold_lease(store, slot, "before a side effect")
            if slot.stop is None or slot.pause_queued:
                return
            slot.pause_queued = True
            store.add_control(
                Control(id=0, run_id=event.run_id, kind="pause", payload={},
                        who=f"{WORKER_WHO} {slot.owner}", why=slot.stop, at=now_iso())
            )  # fmt: skip

        return on_transition

    def _hold_lease(self, store: Store, slot: Slot, when: str) -> None:
        """Renew the lease, or raise `RunAbandoned`: a worker that stalled past its lease
        (another may have taken the run over) must not start the run or make its next
        call. A journal
        that does not answer is asked again for up to a third of the lease (a blip should
        not cost the run), never past that: only a renewal that succeeds lets the call go."""
        run_id = slot.job.run_id
        give_up = time.monotonic() + self.lease_s / 3
        pause = 0.05
        while True:
            try:
                held = store.renew_lease(run_id, slot.owner, self.lease_s)
            except JournalError as exc:
                if time.monotonic() + pause < give_up:
                    time.sleep(pause)
                    pause *= 2
                    continue
                why = f"its lease could not be confirmed {when} ({exc})"
            else:
                if held:
                    return
                why = f"its lease was lost {when} (the job is another's, or out of the queue)"
            with self._lock:
                slot.stop = slot.stop or why
            raise RunAbandoned(run_id, f"{why}; nothing more was done")

    def _paused(self, store: Store, slot: Slot, exc: RunPaused) -> None:
        """A worker's pause gives the job back to the queue; a person's takes it out: the
        run waits for `fsm-agent resume`, as any paused run does."""
        last = store.last_event(slot.job.run_id)
        by_worker = (last.note or "").startswith(f"paused by {WORKER_WHO} ")
        if by_worker:
            self._release(store, slot, "queued", f"paused at step {exc.step}", "paused")
        else:
            what = f"paused by a person at step {exc.step} ({last.note}); resume it by hand"
            self._release(store, slot, "done", what, "held")

    def _release(
        self,
        store: Store,
        slot: Slot,
        status: Literal["queued", "done"],
        what: str,
        outcome: Outcome,
    ) -> None:
        slot.released = True
        held = store.release_job(slot.job.run_id, slot.owner, status)
        self._count(outcome)
        lost = "" if held else " (its lease had been lost: the job is another worker's now)"
        self._log(f"worker {slot.thread}: run {slot.job.run_id} {what}{lost}")
