"""SIGTERM and SIGINT become a named halt (`interrupted`), never a lost run.

The handler raises `Interrupted` in the main thread — except inside a critical section
(a journal commit, the record write), where it only notes the signal; the section raises it
on exit. So a signal never tears a journal write in half.

A signal that arrives while the run is already halting (a shielded section) does not change
how the run ends, but it is not lost either: once the run's handlers are removed, it is
raised again for the process's own handler — so a worker that runs many runs in one process
still stops when told to.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from fsm_agent.errors import Interrupted

HANDLED = (signal.SIGTERM, signal.SIGINT)


class Superseded(BaseException):
    """Raised in a driver whose run was halted while it ran an `on_transition` callback:
    it unwinds the driver without touching the run (nothing catches it)."""


_acting = threading.local()


def act_for(main: bool) -> None:
    """This thread drives a run for the main thread (`main`) or for another one: a
    `KeyboardInterrupt` here is judged as it would be in the thread it drives for."""
    _acting.main = main


def _main_thread_or_its_driver() -> bool:
    return getattr(_acting, "main", False) or threading.current_thread() is threading.main_thread()


def raised_by_user_code(exc: BaseException) -> bool:
    """Whether a BaseException caught around user code (a guard, an action, a tool, an
    adapter, an import) came from that code, not from a real signal. A SIGTERM or SIGINT
    that fsm-agent handles (a run's handlers, the `fsm-agent` command's) arrives as
    `Interrupted`; a `KeyboardInterrupt` may be a real Ctrl-C only in the main thread (or the
    thread driving its run, `fsm_agent.runtime.driver`) while Python's own SIGINT handler is in
    place
    (nobody else took the signal), and is then treated as one."""
    if isinstance(exc, Interrupted):
        return False
    if isinstance(exc, KeyboardInterrupt) and _main_thread_or_its_driver():
        return signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    return True


class InterruptGate:
    """Owns the signal handlers for one run."""

    def __init__(self) -> None:
        self.pending: int | None = None
        self.received: int | None = None
        self._depth = 0
        self._previous: dict[int, Any] = {}
        self.deferred: int | None = None  # arrived while halting: re-raised after the run
        self.raised = False  # True once a signal has ended (or is ending) the run
        #: True while the thread supervising the run's driver does its own bookkeeping: a
        #: signal is only noted then, and acted on by the supervisor or the driver
        self.held = False
        self._critical = _Critical(self)
        self._lock = threading.Lock()
        #: True while the run's driver runs an `on_transition` callback, outside any critical
        #: or shielded section (its event committed, the run's position whole)
        self.in_callback = False
        #: True once the supervisor halted the run without waiting for that callback
        self.taken_over = False

    def callback_begins(self) -> None:
        """The driver hands an event to `on_transition` (see `take_over`)."""
        with self._lock:
            self.in_callback = self._depth == 0

    def callback_ends(self) -> None:
        """The callback returned (or raised): the driver goes on, unless the run was taken
        over meanwhile: then it raises `Superseded` and touches nothing more."""
        with self._lock:
            self.in_callback = False
            if self.taken_over:
                raise Superseded

    def take_over(self) -> bool:
        """For the supervisor, on a signal: if the driver is in a callback, the run is the
        supervisor's to halt from now on (True, once); else the driver raises it (False)."""
        with self._lock:
            if not self.in_callback or self.taken_over:
                return False
            self.taken_over = True
            return True

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.received = self.received or signum
        if self._depth > 0 or self.held:
            self.pending = self.pending or signum
            return
        self.raised = True
        raise Interrupted(signum)

    def _defer_pending(self) -> None:
        """Outside every deferring block, a held signal becomes the one sent again when the
        run's handlers are gone (`installed`)."""
        if self.pending is not None and self._depth == 0:
            self.deferred = self.deferred or self.pending
        self.pending = None

    @contextmanager
    def installed(self, enabled: bool = True) -> Iterator[InterruptGate]:
        """Install the handlers for the duration (only possible in the main thread).

        Not installed (`enabled` false, or another thread), the caller's own handlers take
        the signals; what their exception became while the run could not raise it (noted
        for the run's next safe point, or after its end) is still sent again after the run,
        never dropped."""
        if not enabled or threading.current_thread() is not threading.main_thread():
            try:
                yield self
            finally:
                self._send_deferred_again()
            return
        # A signal between installing (or restoring) one handler and the next must not raise
        # here, outside the run's own try: it is held, then taken at the run's first commit
        # (`critical`), or, after the run, sent again to the handlers it had before.
        self._depth += 1
        try:
            for sig in HANDLED:
                self._previous[int(sig)] = signal.signal(sig, self._handler)
        finally:
            self._depth -= 1
        try:
            yield self
        finally:
            self._depth += 1
            try:
                for signum, previous in self._previous.items():
                    signal.signal(signum, previous)
            finally:
                self._depth -= 1
            self._send_deferred_again()

    def _send_deferred_again(self) -> None:
        self._defer_pending()
        if self.deferred is not None and not self.raised:
            signum, self.deferred = self.deferred, None
            signal.raise_signal(signum)

    def critical(self) -> _Critical:
        """Defer signals until the block is done; then raise a deferred one (not when the
        block raised: its own exception goes on)."""
        return self._critical

    @contextmanager
    def shielded(self) -> Iterator[None]:
        """Defer signals for the whole block and swallow them (the run is already halting)."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            self._defer_pending()


class _Critical:
    """`InterruptGate.critical` (a class, not a generator: it is entered on every commit)."""

    __slots__ = ("_gate",)

    def __init__(self, gate: InterruptGate) -> None:
        self._gate = gate

    def __enter__(self) -> None:
        self._gate._depth += 1

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        gate = self._gate
        gate._depth -= 1
        if kind is None and gate._depth == 0 and gate.pending is not None:
            signum, gate.pending = gate.pending, None
            gate.raised = True
            raise Interrupted(signum)
