"""The supervised loop: a run's loop runs on one driver thread, its calls made inline there,
while the caller's thread supervises it (the calls' deadlines, signals).

The loop is a *script*: a generator that yields each deadline-bound `Call` it needs and is
sent the call's `CallResult`. While a call runs, the script is suspended at its `yield`, so
whoever holds it may go on with it. A call that returns in time costs no hand-off between
threads: the driver makes it and sends the result on. At a call's deadline the supervisor
*fences* the driver — from then on it can never touch the script again, so the abandoned
call, whenever it wakes, can neither journal anything nor change the run — and goes on with
the script on a fresh driver, sending it the timeout. A signal that reaches the caller's
thread while the driver is in a call fences it the same way and raises the signal's
exception into the script at the call (a child process of the call is killed); one that
arrives while the driver runs the run's own code is raised there at its next safe point:
the end of its current commit (`InterruptGate.critical`) or the start of its next call.
One that arrives while the driver runs an `on_transition` callback (its event committed,
outside any critical section) does not wait for the callback: the driver is fenced (it
raises `Superseded` when the callback returns) and the run ends at once, its halt
journaled from the caller's thread. A guard still runs to its end first: it runs in the
middle of a step, whose action's result is not journaled yet.

The supervisor sleeps until the earliest deadline it knows of; the driver wakes it only for
a call whose deadline is earlier than that (by more than `SLACK_S`), or when the script ends.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Generator
from typing import Any, TypeVar

from fsm_agent.errors import Interrupted
from fsm_agent.runtime.deadline import Call, CallResult, run_call
from fsm_agent.runtime.interrupts import InterruptGate, act_for

T = TypeVar("T")
#: A run's loop: yields the calls it needs, is sent their results, returns its value.
Script = Generator[Call, CallResult, T]
#: How much later than a call's deadline the supervisor may wake (it is not woken for a
#: call whose deadline is within this of the one it already sleeps until).
SLACK_S = 0.002
#: The longest the supervisor sleeps at a time. A signal the kernel hands to another thread
#: (any thread may take a process-directed one) is run by Python in the main thread only
#: once it next runs bytecode: this bounds how late the supervisor sees it.
POLL_S = 0.05


def _ms(since: float | None) -> int:
    return 0 if since is None else int((time.monotonic() - since) * 1000)


class Supervisor:
    """Drives one script on driver threads; the calling thread supervises until it ends."""

    def __init__(
        self,
        script: Script[T],
        gate: InterruptGate,
        name: str = "run",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._script: Script[Any] = script
        self._gate = gate
        self._name = name
        self._clock = clock  # the run's: each call's time is measured on it (`Call.clock`)
        self._lock = threading.Lock()
        self._woken = threading.Event()
        self._generation = 0  # the live driver's; a fenced driver has an older one
        self._call: Call | None = None  # the call the live driver is in
        self._wake_at = math.inf
        self._thrown: BaseException | None = None  # for the driver's next safe point
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._main = threading.current_thread() is threading.main_thread()

    def run(self) -> Any:
        """Drive the script to its end; return its value or raise what it raised."""
        gate = self._gate
        gate.held = True  # signals only noted, except while this thread waits
        try:
            self._spawn(None, None)
            while True:
                try:
                    if self._wait():
                        break
                except BaseException as exc:  # a signal's exception outside the wait
                    self._interrupt(exc)
        finally:
            gate.held = False
            if gate.pending is not None:  # the run is over: raised again after it
                gate.deferred, gate.pending = gate.deferred or gate.pending, None
        error = self._error or self._thrown  # a Ctrl-C no call was left to raise it at
        self._error = self._thrown = None
        if error is not None:
            raise error
        return self._value

    # --- the supervising side --------------------------------------------------------------

    def _wait(self) -> bool:
        """Sleep until woken or the next deadline; act on it. True once the script ended."""
        gate = self._gate
        raised = gate.raised
        try:
            timeout = self._wake_at - time.monotonic()
            gate.held = False
            self._woken.wait(min(max(timeout, 0.0), POLL_S))
        except BaseException as exc:  # a signal's exception in this thread
            gate.held = True
            # The run's handler marked its signal as the one ending the run; here it only
            # reaches the supervisor, which decides that (`_interrupt_locked`). Left marked,
            # a signal merely noted for the driver's next safe point, when the run ends
            # before reaching one, would never be sent again: the command would go on.
            gate.raised = raised
            self._interrupt(exc)
            return False
        gate.held = True
        with self._lock:
            if gate.pending is not None and self._call is None and gate.take_over():
                signum, gate.pending = gate.pending, None  # noted while a callback ran
                self._supersede(Interrupted(signum))
                return False
            if gate.pending is not None and self._call is not None:  # noted while held
                signum, gate.pending = gate.pending, None
                gate.raised = True
                self._interrupt_locked(Interrupted(signum))
                return False
            self._woken.clear()
            if self._done:
                return True
            call, now = self._call, time.monotonic()
            if call is None or call.deadline is None:  # the last deadline stays, unless past
                if self._wake_at <= now:
                    self._wake_at = math.inf
                return False
            if call.deadline > now:
                self._wake_at = call.deadline
                return False
            late = CallResult(status="timeout", elapsed_ms=_ms(call.begun), fate="abandoned")
            self._fence_and_go_on(late, None)
        return False

    def _interrupt(self, exc: BaseException) -> None:
        """What a signal raised in this thread does to the loop (see the module's doc)."""
        with self._lock:
            self._interrupt_locked(exc)

    def _interrupt_locked(self, exc: BaseException) -> None:
        if self._done:  # the run ended meanwhile: raised again for the process, after it
            if isinstance(exc, Interrupted):
                self._gate.deferred = self._gate.deferred or exc.signum
                if not isinstance(self._error, Interrupted):  # it did not end the run
                    self._gate.raised = False
            else:
                self._error = self._error or exc
            return
        call = self._call
        if call is not None:
            if call.cancel is not None:
                call.cancel()
            if isinstance(exc, Interrupted):
                self._gate.raised = True  # raised into the script at its call: it ends the run
            self._fence_and_go_on(None, exc)
        elif isinstance(exc, Interrupted) and self._gate.take_over():
            self._supersede(exc)
        elif isinstance(exc, Interrupted):
            self._gate.pending = self._gate.pending or exc.signum
        else:
            self._thrown = self._thrown or exc

    def _supersede(self, exc: Interrupted) -> None:
        """(Under the lock.) The driver is in an `on_transition` callback, its event
        committed: it is fenced (it raises `Superseded` when the callback returns) and the
        run ends now with `exc`, its halt journaled by this thread."""
        self._generation += 1
        self._gate.raised = True
        self._done, self._error = True, exc
        self._woken.set()

    def _fence_and_go_on(self, result: CallResult | None, exc: BaseException | None) -> None:
        """(Under the lock.) The live driver may never touch the script again; a fresh one
        goes on with it from the call it was in."""
        self._generation += 1
        self._call = None
        self._wake_at = math.inf
        self._spawn(result, exc)

    def _spawn(self, result: CallResult | None, exc: BaseException | None) -> None:
        generation = self._generation
        threading.Thread(
            target=self._drive,
            args=(generation, result, exc),
            name=f"fsm-agent:{self._name}",
            daemon=True,
        ).start()

    # --- the driving side ------------------------------------------------------------------

    def _drive(self, generation: int, result: CallResult | None, exc: BaseException | None) -> None:
        act_for(self._main)
        script = self._script
        try:
            while True:
                call = script.send(result) if exc is None else script.throw(exc)  # type: ignore[arg-type]
                fenced, result, exc = self._make(generation, call)
                if fenced:
                    return  # abandoned at its deadline: nothing more of this thread counts
        except StopIteration as stop:
            self._end(generation, stop.value, None)
        except BaseException as error:
            self._end(generation, None, error)

    def _make(
        self, generation: int, call: Call
    ) -> tuple[bool, CallResult | None, BaseException | None]:
        """Make one call for the script: (fenced meanwhile, its result, or what to raise)."""
        gate = self._gate
        notify = False
        with self._lock:
            if gate.pending is not None:  # a signal came while the loop ran its own code
                signum, gate.pending = gate.pending, None
                gate.raised = True
                return False, None, Interrupted(signum)
            if self._thrown is not None:
                thrown, self._thrown = self._thrown, None
                return False, None, thrown
            call.begun = time.monotonic()
            call.clock = self._clock
            if call.isolation == "thread":
                call.deadline = call.begun + max(call.timeout_s, 0.0)
                if call.deadline < self._wake_at - SLACK_S:
                    self._wake_at, notify = call.deadline, True
            self._call = call
        if notify:
            self._woken.set()
        result: CallResult | None = None
        raised: BaseException | None = None
        if self._generation != generation:  # fenced before it began: never begun at all
            return True, None, None
        try:
            result = run_call(call)
        except BaseException as exc:  # an inline call's real Ctrl-C: raised at the call
            raised = exc
        with self._lock:
            if self._generation != generation:
                return True, None, None
            self._call = None
        return False, result, raised

    def _end(self, generation: int, value: Any, error: BaseException | None) -> None:
        with self._lock:
            if self._generation != generation:
                return
            self._done, self._value, self._error = True, value, error
        self._woken.set()


def supervise(
    script: Script[T],
    gate: InterruptGate,
    name: str = "run",
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Run `script` on a driver thread, supervised from this one; return its value. Each
    call the script yields is measured on `clock` (the run's)."""
    value: T = Supervisor(script, gate, name, clock).run()
    return value
