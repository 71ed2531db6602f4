"""How a run ends: the halting transition journaled, the halt record written atomically on
every way out (a declared halt, a halt the runtime imposes, a journal that fails), mixed
into the worker.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from fsm_agent.declaration.spec import MachineSpec, TransitionSpec
from fsm_agent.halt import HaltReason, terminal_state
from fsm_agent.journal.store import Event, Facts, GuardResult
from fsm_agent.runtime.context import RunContext
from fsm_agent.runtime.journaling import Journaling
from fsm_agent.runtime.record import HaltRecord, write_record
from fsm_agent.runtime.snapshot import Snapshot
from fsm_agent.runtime.trace import next_hash, ship_trace
from fsm_agent.runtime.verdict import build_record, explain


class Halting(Journaling):
    """The worker's way out (mixed into the worker)."""

    ctx: RunContext
    spec: MachineSpec
    started_at: str
    record: HaltRecord | None
    record_path: Path | None  # None: no record file (a library call that asked for none)
    trace_copy: Path | None
    journaled: bool
    #: the declared transition that halted the run (None for a halt the runtime imposed)
    edge: TransitionSpec | None = None

    def _halt_on(
        self,
        transition: TransitionSpec,
        snapshot: Snapshot,
        guards: tuple[GuardResult, ...],
        facts: Facts | None,
        reason: HaltReason | None,
        note: str | None = None,
    ) -> None:
        assert reason is not None  # noqa: S101 - the loader requires halt on terminal edges
        self.edge = transition
        with self.gate.shielded():
            event = self._event(
                transition.trigger, transition.dest, snapshot, guards, (), facts, halt=reason,
                note=note,
            )  # fmt: skip
            note, record = None, None
            if self.trace_copy is not None:
                record, failure = self._ship(event, reason, None, None)
                if failure is not None and reason is HaltReason.COMPLETED:
                    self._force(HaltReason.INTERNAL_ERROR, "trace_copy", failure)
                    return
                if failure is not None:  # the copy failed: the record says so
                    note = f"{explain(self.ctx, reason, transition) or reason.value}; {failure}"
                    record = None
            self._commit(event)
            self._finish(reason, note, None, record)

    def _ship(
        self, event: Event, reason: HaltReason, note: str | None, signum: int | None
    ) -> tuple[HaltRecord, str | None]:
        """The run file of the whole run, the halting `event` included, shipped to
        `trace_copy` before that event is committed; the record it carries, and why the
        copy failed (None: it was written)."""
        assert self.trace_copy is not None  # noqa: S101 - only called with one
        self._flush()  # the copy is made from the journal, onto its head
        assert self.head is not None  # noqa: S101 - halts come after the first event
        head = next_hash(self.store, self.head, event)
        record = self._record_for(reason, note, signum, head)
        return record, ship_trace(self.store, event, record, self.trace_copy)

    def _force(
        self,
        reason: HaltReason,
        trigger: str | None,
        note: str,
        *,
        snapshot: Snapshot | None = None,
        guards: tuple[GuardResult, ...] = (),
        facts: Facts | None = None,
        signum: int | None = None,
    ) -> None:
        """A halt the runtime imposes (signal, refusal, error): journaled like any other. Its
        note may quote user code (an exception's message): the run's secrets are redacted."""
        note = self.ctx.secrets.text(note)
        with self.gate.shielded():
            if not self.journaled:  # stopped before the run reached the journal
                self.record = self._record_for(reason, note, signum)
                self._write_record(self.record)
                return
            if self.spec.state(self.state).terminal:
                self._finish(self.record.halt_reason if self.record else reason, note, signum)
                return
            self.edge = None  # imposed: no declared edge made this halt
            snap = snapshot or self.ctx.snapshot(self.state, None, None)
            try:
                event = self._event(
                    trigger, terminal_state(reason), snap, guards, (), facts, halt=reason, note=note
                )
                record = None
                if self.trace_copy is not None:  # imposed halts are shipped too
                    record, failure = self._ship(event, reason, note, signum)
                    if failure is not None:  # the copy failed: the record says so
                        note, record = f"{note}; {failure}", None
                self._commit(event)
            except Exception as exc:
                self._write_file_only(
                    f"{note}; then the journal write failed: {type(exc).__name__}: {exc}",
                    reason=reason,
                    signum=signum,
                )
                raise
            self._finish(reason, note, signum, record)

    def _finish(
        self,
        reason: HaltReason,
        note: str | None,
        signum: int | None,
        record: HaltRecord | None = None,
    ) -> None:
        self.record = record or self._record_for(reason, note, signum)
        self._write_record(self.record)
        self.store.finish_run(self.record)

    def _write_record(self, record: HaltRecord) -> None:
        """The record file, where one was asked for."""
        if self.record_path is not None:
            write_record(record, self.record_path)

    def _write_file_only(
        self, note: str, *, reason: HaltReason | None = None, signum: int | None = None
    ) -> str | None:
        """The journal failed: still leave a record on disk that says so, where a record
        file was asked for (the journal's failure stays the error; None, or why the record
        file could not be written)."""
        note = self.ctx.secrets.text(note)
        with self.gate.shielded():
            if reason is None:
                reason = self.record.halt_reason if self.record else HaltReason.JOURNAL_FAILED
            record = self._record_for(reason, note, signum)
            if record.error is None:  # a completed run's record says why the journal lacks it
                record = attrs.evolve(record, error=note)
            self.record = record
            try:
                self._write_record(record)
            except OSError as exc:
                return f"the halt record {self.record_path} could not be written either ({exc})"
            return None

    def _record_for(
        self, reason: HaltReason, note: str | None, signum: int | None, head: str | None = None
    ) -> HaltRecord:
        return build_record(
            self.ctx,
            reason,
            note,
            signum,
            run_id=self.run_id,
            started_at=self.started_at,
            ended_at=self.wall(),
            journal=self.store.location,
            journal_head=head or self.head,
            edge=self.edge,
        )
