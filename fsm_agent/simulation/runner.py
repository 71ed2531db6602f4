"""Simulating one run, and many: each run drawn from its tape, on its own virtual clock,
through the real runtime (`fsm_agent.run`, `fsm_agent.runtime.worker.resume_run`), into a
real journal, then checked (`fsm_agent.simulation.invariants`).

Run `i` of a simulation with seed `s` is `sim-s-i`; its tape is seeded with `s:i` alone, so
a run is reproduced without the runs before it. With crashes, the tape's first choice is
the journal write the process dies at (0: none); with `crash_at=N`, every run dies at its
Nth write. A run that died is resumed by a fresh process (a new `SimStore`, the same
journal, the same virtual clock going on), as `fsm-agent resume` would after a kill.
"""

from __future__ import annotations

import functools
import random
import signal
from collections.abc import Callable
from typing import Literal

import attrs

from fsm_agent.declaration.spec import ACTION_OUTCOMES, MachineSpec
from fsm_agent.errors import Interrupted
from fsm_agent.halt import HaltReason
from fsm_agent.journal.store import Store
from fsm_agent.run_ids import RunNotFound
from fsm_agent.runtime.budgets import make_budgets
from fsm_agent.runtime.decided import Act
from fsm_agent.runtime.decisions import decide_run
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.runtime.run_status import waiting_for
from fsm_agent.runtime.tools import ToolRegistry
from fsm_agent.runtime.worker import resume_run, run
from fsm_agent.simulation.clock import VirtualClock
from fsm_agent.simulation.crash import SimStore, SimulatedCrash
from fsm_agent.simulation.invariants import Violation, check_run
from fsm_agent.simulation.tape import Tape
from fsm_agent.simulation.world import SimModel, Stage, World, simulated_tools

#: Where runs crash: nowhere, at a write drawn per run, or at the Nth write of every run.
Crash = None | Literal["random"] | int
#: The task every simulated run is given.
TASK = "simulated task"
#: The outcome named for a run whose process died before its first write reached the
#: journal: there is no run to resume or check (what a kill that early leaves).
NEVER_STARTED = "never_started"
#: The most decisions a person makes on one simulated run (each goes on for a step or more,
#: so the step budget ends a run long before).
MAX_DECISIONS = 64
#: Told (runs done, runs in all) after each run.
ProgressFn = Callable[[int, int], None]


@attrs.frozen
class RunOutcome:
    """One simulated run: its id, the choices it was made of, how it ended, where its
    process died (None: it did not) and what it broke."""

    index: int
    run_id: str
    tape: tuple[int, ...]
    halt: str
    crashed_at: int | None
    violations: tuple[Violation, ...]


def run_tape(seed: int, index: int) -> Tape:
    """The tape of run `index` of a simulation seeded `seed`."""
    return Tape(rng=random.Random(f"{seed}:{index}"))  # noqa: S311 - a simulation


class Simulator:
    """Simulates runs of `spec` with `tools`' names and declarations into `journal`."""

    def __init__(
        self, spec: MachineSpec, tools: ToolRegistry, journal: Store, crash: Crash = None
    ) -> None:
        self.spec = spec
        self.journal = journal
        self.crash = crash
        self.stage = Stage()
        self.model = SimModel(self.stage)
        self.tools = simulated_tools(self.stage, tools)
        #: a declaration that lists no tools allows none: the simulation grants every tool
        #: of the module, as the widest `--allow` an operator could give (`check` alike)
        self.allow = None if spec.tools is not None else self.tools.names()
        self.budgets = make_budgets(spec.budgets)
        #: the states whose action is a user action: entering one takes virtual time
        self.waits = frozenset(
            st.name for st in spec.states
            if st.action is not None and st.action not in ACTION_OUTCOMES
        )  # fmt: skip
        #: the writes a drawn crash may land on: 1 .. this (a run commits once or twice a
        #: step, so most drawn crashes land inside the run)
        self.crash_span = 2 * self.budgets.max_steps
        #: the calls the world saw in the last run simulated (its ledger)
        self.last_ledger: tuple[tuple[str, str], ...] = ()

    def simulate(self, run_id: str, tape: Tape, index: int = 0) -> RunOutcome:
        """Simulate one run from `tape`, resume it if it crashed, check it. Anything the
        runtime raises out of a run or a resume (instead of halting it) is a `named_halt`
        violation, not the end of the simulation."""
        clock = VirtualClock()
        world = World(tape, clock, self.budgets.tool_timeout_ms, self.waits)
        self.stage.world = world
        crash_at = self._crash_point(tape)
        view = SimStore(self.journal, clock, crash_at)
        try:
            problems = self._start(run_id, view, world)
            if view.dead and view.writes > 1:  # its first write landed: there is a run
                problems += self._resume(run_id, world)
            if not view.dead or view.writes > 1:
                problems += self._decide(run_id, world)
        finally:
            self.stage.world = None
            self.last_ledger = tuple(world.ledger)
        crashed = crash_at if view.dead else None
        if view.dead and view.writes <= 1:  # nothing reached the journal
            return RunOutcome(index, run_id, tuple(tape.used), NEVER_STARTED, crashed, ())
        try:
            row, broken = check_run(self.journal, run_id, self.spec, world.ledger, self.tools)
        except RunNotFound:
            broken, halt = [Violation("named_halt", "the run is not in the journal")], "missing"
        else:
            halt = row.halt_reason.value if row.halt_reason is not None else row.status
        return RunOutcome(index, run_id, tuple(tape.used), halt, crashed, (*problems, *broken))

    def _crash_point(self, tape: Tape) -> int | None:
        if self.crash is None:
            return None
        if self.crash == "random":
            point = tape.choose(self.crash_span + 1)
            return point or None
        return self.crash

    def _start(self, run_id: str, view: SimStore, world: World) -> list[Violation]:
        """The run, in a process that may die at a journal write."""
        store = view.as_store()
        return _raised("run", lambda: run(
            self.spec, task=TASK, model=self.model, tools=self.tools, store=store,
            clock=world.clock, on_transition=world.entered, handle_signals=False,
            run_id=run_id, allow=self.allow))  # fmt: skip

    def _resume(self, run_id: str, world: World) -> list[Violation]:
        """A fresh process resumes the run that died."""
        store = SimStore(self.journal, world.clock).as_store()
        return _raised("resume", lambda: resume_run(
            run_id, model=self.model, tools=self.tools, store=store, clock=world.clock,
            on_transition=world.entered, handle_signals=False))  # fmt: skip

    def _decide(self, run_id: str, world: World) -> list[Violation]:
        """While the run waits for a person, a drawn decision (draw 0: approve, or answer;
        then deny; last: nobody decides, and the run stays waiting), each taken by a
        fresh process through the real `decide_run`, as `fsm-agent approve` would."""
        problems: list[Violation] = []
        for _ in range(MAX_DECISIONS):
            try:
                awaits = waiting_for(self.journal.get_run(run_id))
            except RunNotFound:
                break
            if awaits is None:
                break
            acts: tuple[Act | None, ...] = (
                ("approve", "deny", None) if awaits == "approval" else ("answer", None)
            )
            act = acts[world.tape.choose(len(acts))]
            if act is None:
                break
            problems += _raised("decision", functools.partial(self._decision, run_id, act, world))
        return problems

    def _decision(self, run_id: str, act: Act, world: World) -> HaltRecord | None:
        store = SimStore(self.journal, world.clock).as_store()
        text = "a simulated answer" if act == "answer" else None
        return decide_run(
            run_id, act, why="simulated", by="simulator", text=text, model=self.model,
            tools=self.tools, store=store, clock=world.clock, on_transition=world.entered,
            handle_signals=False)  # fmt: skip


def _raised(what: str, drive: Callable[[], object]) -> list[Violation]:
    """Drive a run (or a resume) to its end: nothing, a simulated crash (the process is
    gone), or else the violation of whatever it raised instead of halting. A run a real
    signal halted (`interrupted`: the simulated world sends none) stops the simulation:
    `Interrupted` goes on to the caller, as it would from any other command."""
    try:
        record = drive()
    except SimulatedCrash:
        pass
    except Exception as exc:
        return [Violation("named_halt", f"the {what} raised {type(exc).__name__}: {exc}")]
    else:
        if isinstance(record, HaltRecord) and record.halt_reason is HaltReason.INTERRUPTED:
            raise Interrupted(record.signal or signal.SIGTERM)
    return []


def simulate_many(
    simulator: Simulator, seed: int, runs: int, progress: ProgressFn | None = None
) -> list[RunOutcome]:
    """Runs 0 .. runs-1 of the simulation seeded `seed`, in order."""
    outcomes = []
    for index in range(runs):
        tape = run_tape(seed, index)
        outcomes.append(simulator.simulate(f"sim-{seed}-{index}", tape, index))
        if progress is not None:
            progress(index + 1, runs)
    return outcomes
