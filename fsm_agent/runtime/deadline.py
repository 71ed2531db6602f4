"""Calls that cannot outlive their deadline.

Python threads cannot be killed, and `concurrent.futures` workers are joined at exit (a hung
tool there blocks the process from ever exiting). So each call runs in a *daemon* thread that
is abandoned at the deadline — its outcome is then unknown — or, when the tool opts in, in a
child process that is killed at the deadline, which stops the side effect.

In a run, a call is a `Call` the run's loop yields: `run_call` makes it inline on the loop's
daemon driver thread, which `fsm_agent.runtime.driver` abandons at the deadline (no hand-off per
call). `call_with_deadline` hands one call to a pooled daemon thread, for callers outside a
run.

Such a child cannot outlive the run's process either, whatever kills that process (SIGKILL
included): on Linux the kernel kills it when its parent dies (`prctl(PR_SET_PDEATHSIG)`, set
before any of the user's code runs in it, then a check that the parent is still the one that
started it, for a parent that died in between); where prctl does not exist, a thread in the
child sees it re-parented within `PARENT_POLL_S` and ends it (that needs no descriptor
handed across the spawn, unlike a pipe the child would watch; either way a thread of the
child must get to run, where the kernel's signal needs nothing from the child). The death
signal follows the parent *thread* that started the child, which waits for the call; a
tool's own subprocesses are not covered.
"""

from __future__ import annotations

import inspect
import os
import pickle
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import attrs

from fsm_agent.runtime.interrupts import raised_by_user_code

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

CallStatus = Literal["ok", "error", "timeout"]
#: thread: a daemon thread, abandoned at the deadline; process: a child process, killed at
#: the deadline; inline: the caller's thread, cannot be interrupted — only for calls that
#: cannot block (a result that comes back late is refused as a timeout).
Isolation = Literal["thread", "process", "inline"]


@attrs.frozen
class CallResult:
    """How a deadline-bound call ended."""

    status: CallStatus
    value: Any = None
    error: BaseException | None = None
    elapsed_ms: int = 0
    #: "abandoned" (daemon thread left running) or "killed" (child process) at a timeout.
    fate: str | None = None


def error_text(exc: BaseException | None) -> str:
    """`Type: message` for an exception an adapter raised, even one whose message cannot be
    made (a raising `__str__`): how a failed call reads must not fail in turn."""
    try:
        message = str(exc)
    except Exception as inner:
        message = f"<its message cannot be read: {type(inner).__name__}>"
    return f"{type(exc).__name__}: {message}"


class ChildError(Exception):
    """An exception raised in a child process, carried back by type name and message."""

    def __init__(self, type_name: str, message: str, *, retryable: bool) -> None:
        self.type_name = type_name
        self.retryable = retryable
        super().__init__(f"{type_name}: {message}")


def _invoke(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value):
        import asyncio  # only async adapters pay for it (it pulls in ssl: ~10 MiB, ~20 ms)

        async def wait() -> Any:
            return await value

        value = asyncio.run(wait())
    return value


class _CallThread:
    """A reusable daemon thread for deadline-bound calls.

    Starting a thread per call costs ~100 µs; handing a call to an idle one costs about
    half. A thread whose call outlives its deadline is never given back: it is abandoned,
    still a daemon, so it cannot keep the process from exiting.
    """

    _idle: ClassVar[list[_CallThread]] = []
    _lock: ClassVar[threading.Lock] = threading.Lock()
    MAX_IDLE: ClassVar[int] = 8

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="fsm-agent:idle", daemon=True).start()

    def _loop(self) -> None:
        while True:
            self._jobs.get()()
            threading.current_thread().name = "fsm-agent:idle"

    @classmethod
    def take(cls) -> _CallThread:
        with cls._lock:
            return cls._idle.pop() if cls._idle else cls()

    def give_back(self) -> None:
        with self._lock:
            if len(self._idle) < self.MAX_IDLE:
                self._idle.append(self)

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)


def _forget_threads_after_fork() -> None:
    """A forked child has none of its parent's threads: an idle one inherited in the list
    would take a call and never run it (the call would hang until its deadline)."""
    _CallThread._idle = []
    _CallThread._lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_threads_after_fork)


def _ms_since(start: float, clock: Callable[[], float] = time.monotonic) -> int:
    return int((clock() - start) * 1000)


def call_with_deadline(
    fn: Callable[..., Any],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    timeout_s: float,
    isolation: Isolation = "thread",
    name: str = "call",
) -> CallResult:
    """Run `fn(*args, **kwargs)` (sync or async) and return within `timeout_s` whatever it does."""
    kwargs = kwargs or {}
    if isolation == "process":
        return _in_child(fn, args, kwargs, timeout_s, name)
    start = time.monotonic()
    if isolation == "inline":
        return _inline(fn, args, kwargs, timeout_s, start)
    box: dict[str, Any] = {}
    finished = threading.Lock()
    finished.acquire()

    def target() -> None:
        threading.current_thread().name = f"fsm-agent:{name}"
        try:
            box["value"] = _invoke(fn, args, kwargs)
        except BaseException as exc:
            box["error"] = exc
        finally:
            finished.release()

    runner = _CallThread.take()
    runner.submit(target)
    if not finished.acquire(timeout=max(timeout_s, 0.0)):
        return CallResult(status="timeout", elapsed_ms=_ms_since(start), fate="abandoned")
    runner.give_back()
    if "error" in box:
        return CallResult(status="error", error=box["error"], elapsed_ms=_ms_since(start))
    return CallResult(status="ok", value=box.get("value"), elapsed_ms=_ms_since(start))


def _inline(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    timeout_s: float,
    start: float,
    clock: Callable[[], float] = time.monotonic,
) -> CallResult:
    try:
        value = _invoke(fn, args, kwargs)
    except BaseException as exc:  # sys.exit in a call fails that call, as in a thread
        if not raised_by_user_code(exc):
            raise
        return CallResult(status="error", error=exc, elapsed_ms=_ms_since(start, clock))
    if clock() - start > timeout_s:
        return CallResult(
            status="timeout", elapsed_ms=_ms_since(start, clock), fate="late (inline)"
        )
    return CallResult(status="ok", value=value, elapsed_ms=_ms_since(start, clock))


@attrs.define(eq=False)
class Call:
    """One deadline-bound call a run's loop asks for (see `fsm_agent.runtime.driver`): made inline
    in
    the loop's driver thread, its deadline watched by the thread that supervises the loop."""

    fn: Callable[..., Any]
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = attrs.field(factory=dict)
    timeout_s: float = 0.0
    isolation: Isolation = "thread"
    name: str = "call"
    #: set by the driver: the call was begun (monotonic time), and its deadline (None: the
    #: supervisor does not stop it: an inline call, or a child process killed at its own)
    begun: float | None = None
    deadline: float | None = None
    #: kills a child process (set once one is started): the supervisor stops it with the run
    cancel: Callable[[], None] | None = None
    #: the run's clock (monotonic seconds; the supervisor sets it from the run): what
    #: `run_call` measures the call's time on, and an inline call's lateness against
    #: `timeout_s` (a virtual clock in a simulation: `fsm_agent.simulation.clock`); the
    #: supervisor's deadline is always the real clock's
    clock: Callable[[], float] = time.monotonic

    def arm(self, cancel: Callable[[], None]) -> None:
        self.cancel = cancel


def run_call(call: Call) -> CallResult:
    """Make `call` in this thread, as its isolation says: a "thread" call inline (the
    supervisor abandons this thread at the deadline), an inline one refused when late, a
    process one in a child killed at the deadline. Any exception is the call's error.
    Its time is measured on the call's `clock` (the run's), and so is an inline call's
    lateness: on a virtual clock, a call during which the clock jumped past its timeout (a
    simulated hang) is refused as late."""
    if call.isolation == "process":
        return _in_child(call.fn, call.args, call.kwargs, call.timeout_s, call.name, call.arm)
    clock = call.clock
    start = clock()
    if call.isolation == "inline":
        return _inline(call.fn, call.args, call.kwargs, call.timeout_s, start, clock)
    try:
        value = _invoke(call.fn, call.args, call.kwargs)
    except BaseException as exc:  # sys.exit in a call fails that call, as in a pool thread
        return CallResult(status="error", error=exc, elapsed_ms=_ms_since(start, clock))
    return CallResult(status="ok", value=value, elapsed_ms=_ms_since(start, clock))


#: prctl(2) option: the signal the kernel sends this process when its parent thread dies.
_PR_SET_PDEATHSIG = 1
#: How often a child without prctl looks whether its parent is still there.
PARENT_POLL_S = 0.05
#: The exit code of a child that stopped because its parent had died (nobody reads it).
_ORPHANED = 70


def _arm_parent_death_signal() -> bool:
    """Linux: have the kernel SIGKILL this process the moment its parent dies (at once, and
    whatever kills the parent, SIGKILL included). False where prctl does not exist."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def watch_parent(parent_pid: int, poll_s: float = PARENT_POLL_S) -> None:
    """End this process as soon as its parent is gone (it was re-parented): the fallback
    where prctl does not exist (macOS, the BSDs), checked every `poll_s`."""
    while os.getppid() == parent_pid:
        time.sleep(poll_s)
    os._exit(_ORPHANED)


def _die_with_parent(parent_pid: int) -> None:
    """The child cannot outlive the run's process: on Linux the kernel kills it when the
    parent dies; elsewhere a daemon thread watches the parent. The parent may have died
    before either was in place: then the child is already re-parented, and stops now."""
    if not _arm_parent_death_signal():
        threading.Thread(
            target=watch_parent, args=(parent_pid,), name="fsm-agent:parent", daemon=True
        ).start()
    if os.getppid() != parent_pid:
        os._exit(_ORPHANED)


def _child_main(
    conn: Connection, parent_pid: int, payload: bytes, found: Mapping[str, str]
) -> None:
    """Run one call in the child. Before anything of the user's runs (even the import of its
    module, which unpickling the call does), the child is bound to its parent. The modules
    the parent imported from a search directory (a tools module in the working directory,
    see `fsm_agent.declaration.refs`) are imported the same way first, so the call unpickles.
    SIGINT is the
    parent's to handle (Ctrl-C reaches the whole process group): the parent kills the child
    when it stops the call. A parent that is gone gets no answer and no traceback."""
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        try:
            from fsm_agent.declaration.refs import adopt

            adopt(found)
            fn, args, kwargs = pickle.loads(payload)  # noqa: S301 - our own parent's bytes
            message: tuple[str, Any] = ("ok", _invoke(fn, args, kwargs))
        except BaseException as exc:
            message = ("error", (type(exc).__name__, str(exc), getattr(exc, "retryable", False)))
        try:
            conn.send(message)
        except BaseException as exc:  # a value that does not pickle: say so instead
            conn.send(("error", (type(exc).__name__, str(exc), False)))
    except OSError:  # the parent closed its end (it stopped the call, or it is gone)
        os._exit(_ORPHANED)
    finally:
        conn.close()


def _in_child(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    timeout_s: float,
    name: str,
    on_start: Callable[[Callable[[], None]], None] | None = None,
) -> CallResult:
    start = time.monotonic()
    import multiprocessing  # only tools that opt into isolation="process" pay for it
    from multiprocessing.reduction import ForkingPickler

    from fsm_agent.declaration.refs import found_in

    ctx = multiprocessing.get_context("spawn")
    # Pickled here, unpickled by the child once it is bound to this process (_child_main).
    payload = bytes(ForkingPickler.dumps((fn, args, kwargs)))
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_child_main,
        args=(child, os.getpid(), payload, found_in()),
        name=f"fsm-agent:{name}",
        daemon=True,
    )
    proc.start()
    if on_start is not None:  # who may have to stop the call early: how to kill the child
        on_start(proc.kill)
    child.close()
    try:
        try:
            ready = parent.poll(max(timeout_s, 0.0))
        except BaseException:
            proc.kill()  # interrupted while waiting: the child must not outlive the run
            raise
        if not ready:
            proc.kill()
            proc.join(5)
            return CallResult(status="timeout", elapsed_ms=_ms_since(start), fate="killed")
        try:
            kind, payload = parent.recv()
        except EOFError:
            proc.join(5)
            err = ChildError("ChildDied", f"exit code {proc.exitcode}", retryable=False)
            return CallResult(status="error", error=err, elapsed_ms=_ms_since(start))
    finally:
        parent.close()
    proc.join(5)
    if kind == "ok":
        return CallResult(status="ok", value=payload, elapsed_ms=_ms_since(start))
    type_name, message, retryable = payload
    err = ChildError(type_name, message, retryable=bool(retryable))
    return CallResult(status="error", error=err, elapsed_ms=_ms_since(start))
