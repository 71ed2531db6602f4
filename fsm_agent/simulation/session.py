"""A whole simulation: N runs of a machine into one journal, each checked; every failing run
shrunk (`fsm_agent.simulation.shrink`) and written as a run file; a summary of how the runs
halted, what they broke and how fast they went."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.errors import InvalidInputError
from fsm_agent.journal.runfile import export_run, write_run_file
from fsm_agent.runtime.tools import ToolRegistry
from fsm_agent.simulation.invariants import INVARIANTS
from fsm_agent.simulation.runner import Crash, ProgressFn, RunOutcome, Simulator, simulate_many
from fsm_agent.simulation.shrink import normal, shrink
from fsm_agent.stores.sqlite import SqliteStore

#: How many failing runs a simulation shrinks (each costs up to `shrink.MAX_TRIES` runs).
MAX_SHRUNK = 5


@attrs.frozen
class Failure:
    """A run that broke an invariant: what it broke, and its minimal version's run file
    (None when it was not shrunk — past `MAX_SHRUNK` — or could not be: the failure did
    not happen again from its tape)."""

    run: RunOutcome
    shrunk: RunOutcome | None
    run_file: str | None
    shrink_tries: int


@attrs.frozen
class Summary:
    """What a simulation found."""

    machine: str
    seed: int
    runs: int
    crash: Crash
    halts: dict[str, int]
    crashed: int
    failures: tuple[Failure, ...]
    seconds: float

    @property
    def runs_per_s(self) -> float:
        return self.runs / self.seconds if self.seconds > 0 else float("inf")

    @property
    def violations(self) -> dict[str, int]:
        """Violations per invariant (every invariant listed, 0 included)."""
        found = Counter(v.invariant for f in self.failures for v in f.run.violations)
        return {name: found.get(name, 0) for name in INVARIANTS}

    def as_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "seed": self.seed,
            "runs": self.runs,
            "crash": self.crash,
            "halts": self.halts,
            "crashed": self.crashed,
            "violations": self.violations,
            "failures": [_failure_json(f) for f in self.failures],
            "seconds": round(self.seconds, 3),
            "runs_per_s": round(self.runs_per_s, 1),
            "ok": not self.failures,
        }


def _failure_json(failure: Failure) -> dict[str, Any]:
    shrunk = failure.shrunk
    return {
        "run_id": failure.run.run_id,
        "violations": [attrs.asdict(v) for v in failure.run.violations],
        "shrunk_run_id": None if shrunk is None else shrunk.run_id,
        "shrunk_tape": None if shrunk is None else list(normal(shrunk.tape)),
        "shrunk_violations": [] if shrunk is None else [attrs.asdict(v) for v in shrunk.violations],
        "run_file": failure.run_file,
        "shrink_tries": failure.shrink_tries,
        "shrunk": failure.shrink_tries > 0,
    }


@contextlib.contextmanager
def journal_at(path: str | None) -> Iterator[SqliteStore]:
    """The simulation's journal: a SQLite file at `path`, or else a temporary one (in
    memory-backed /dev/shm where there is one), removed after."""
    if path is not None:
        store = SqliteStore(path)
        try:
            if store.latest_run_id() is not None:  # simulated run ids would collide
                raise InvalidInputError(
                    f"{path} already holds runs: give --db a new file for a simulation"
                )
            yield store
        finally:
            store.close()
        return
    shm = "/dev/shm"  # noqa: S108 - a private temporary directory inside it
    base = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="fsm-agent-simulate-", dir=base) as tmp:
        store = SqliteStore(Path(tmp) / "journal.db")
        try:
            yield store
        finally:
            store.close()


def simulate(
    spec: MachineSpec,
    tools: ToolRegistry,
    *,
    runs: int,
    seed: int,
    crash: Crash = None,
    out_dir: str | os.PathLike[str] | None = None,
    db: str | None = None,
    progress: ProgressFn | None = None,
) -> Summary:
    """Simulate `runs` runs of `spec` (see `fsm_agent.simulation.runner`), then shrink each
    failing one and write its minimal run as `<out_dir>/<run id>.json`."""
    with journal_at(db) as journal:
        simulator = Simulator(spec, tools, journal, crash)
        started = time.perf_counter()
        outcomes = simulate_many(simulator, seed, runs, progress)
        seconds = time.perf_counter() - started
    failed = [o for o in outcomes if o.violations]
    chosen = {o.run_id for o in to_shrink(failed)}
    failures = tuple(
        _shrunk(spec, tools, crash, o, out_dir) if o.run_id in chosen else Failure(o, None, None, 0)
        for o in failed
    )
    return Summary(
        machine=spec.name,
        seed=seed,
        runs=runs,
        crash=crash,
        halts=dict(Counter(o.halt for o in outcomes).most_common()),
        crashed=sum(o.crashed_at is not None for o in outcomes),
        failures=failures,
        seconds=seconds,
    )


def to_shrink(failed: list[RunOutcome], limit: int = MAX_SHRUNK) -> list[RunOutcome]:
    """The failing runs worth shrinking: the first to break each invariant, then the next
    ones in order, `limit` in all."""
    firsts: dict[str, RunOutcome] = {}
    for outcome in failed:
        for v in outcome.violations:
            firsts.setdefault(v.invariant, outcome)
    chosen = list(dict.fromkeys(firsts.values()))
    chosen += [o for o in failed if o not in chosen]
    return chosen[:limit]


def _shrunk(
    spec: MachineSpec,
    tools: ToolRegistry,
    crash: Crash,
    failed: RunOutcome,
    out_dir: str | os.PathLike[str] | None,
) -> Failure:
    """Shrink one failing run in a scratch journal and write its minimal run."""
    scratch = SqliteStore(":memory:")
    try:
        found = shrink(Simulator(spec, tools, scratch, crash), failed)
        path = None
        if found.outcome is not None and out_dir is not None:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            target = Path(out_dir) / f"{found.outcome.run_id}.json"
            path = str(write_run_file(export_run(scratch, found.outcome.run_id), target))
        return Failure(failed, found.outcome, path, found.tries)
    finally:
        scratch.close()
