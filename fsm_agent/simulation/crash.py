"""One simulated process's view of the journal: its wall clock and identity are virtual,
and it may die at a chosen journal write.

`SimStore` wraps the simulation's journal for one process (a run, or a resume of it). It
stamps what the runtime would take from the host — the events' and the run's wall times,
the owner's pid and host, the pid in a resume's note, the journal a record names — with the
virtual clock's reading, no owner and a fixed name, so the same tape gives the same journal
byte for byte. A run owned by no pid is one whose process is gone
(`fsm_agent.runtime.run_status.liveness`), as after a real kill.

`crash_at=N`: the process dies just before its Nth write (1 = the run's first). The write
raises `SimulatedCrash`, and so does every later call on this store: nothing more reaches
the journal, not the halt the worker tries to journal on its way out, exactly as a SIGKILL
leaves it. A write is one commit (`start_run`, `append`, `append_many`, `finish_run`,
`mark_run`, `claim_run`), and the runtime commits what it defers before every call it makes
(`fsm_agent.runtime.journaling`): so the journal after the crash is a prefix of commits,
the events still waiting in memory are lost with the process, and a tool called after the
last commit has its side effect in the world's ledger but not in the journal — what a kill
between a call and its result's commit leaves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import attrs

from fsm_agent.journal.store import Event, RunRow, RunStatus, Store
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.simulation.clock import VirtualClock

#: The note a simulated resume journals (a real one names its pid and host).
RESUMED_NOTE = "resumed by the simulation"
#: The journal a simulated run's record names (a real one names the file or DSN).
LOCATION = "simulation"


class SimulatedCrash(BaseException):
    """The simulated process died at a journal write. A BaseException: no handler of the
    runtime's may take it for a failure to journal and go on."""


class SimStore:
    """`journal` as one simulated process sees it (see the module docstring). Reads and
    anything not listed pass through until the process dies."""

    def __init__(self, journal: Store, clock: VirtualClock, crash_at: int | None = None) -> None:
        self._journal = journal
        self._clock = clock
        self._crash_at = crash_at
        self.writes = 0
        self.dead = False
        self._started: dict[str, str] = {}  # run id -> its virtual start, once written here

    @property
    def location(self) -> str:
        return LOCATION

    def as_store(self) -> Store:
        """This view, typed as the journal it stands for."""
        return cast(Store, self)

    def _write(self) -> None:
        if self.dead:
            raise SimulatedCrash("the simulated process is dead")
        self.writes += 1
        if self._crash_at is not None and self.writes >= self._crash_at:
            self.dead = True
            raise SimulatedCrash(f"simulated crash at journal write {self.writes}")

    def _stamp(self, event: Event) -> Event:
        note = RESUMED_NOTE if event.kind == "resumed" else event.note
        return attrs.evolve(event, wall_time=self._clock.wall_iso(), note=note)

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._journal, name)
        if not callable(found):
            return found

        def passed(*args: Any, **kwargs: Any) -> Any:
            if self.dead:
                raise SimulatedCrash("the simulated process is dead")
            return found(*args, **kwargs)

        return passed

    def start_run(self, run: RunRow, first: Event) -> str:
        self._write()
        run = attrs.evolve(run, started_at=self._clock.wall_iso(), pid=None, host=None)
        self._started[run.run_id] = run.started_at
        return self._journal.start_run(run, self._stamp(first))

    def append(self, event: Event) -> str:
        self._write()
        return self._journal.append(self._stamp(event))

    def append_many(self, events: Sequence[Event]) -> str:
        self._write()
        return self._journal.append_many([self._stamp(e) for e in events])

    def finish_run(self, record: HaltRecord) -> None:
        self._write()
        started = (
            self._started.get(record.run_id) or self._journal.get_run(record.run_id).started_at
        )
        record = attrs.evolve(record, started_at=started, ended_at=self._clock.wall_iso())
        self._journal.finish_run(record)

    def mark_run(self, run_id: str, status: RunStatus, pid: int | None, host: str | None) -> None:
        self._write()
        self._journal.mark_run(run_id, status, None, None)

    def claim_run(self, run_id: str, **kwargs: Any) -> bool:
        self._write()
        claim: Callable[..., bool] = self._journal.claim_run
        return claim(run_id, **{**kwargs, "pid": None, "host": None})
