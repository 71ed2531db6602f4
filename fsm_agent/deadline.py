"""Calls that cannot outlive their deadline.

Python threads cannot be killed, and `concurrent.futures` workers are joined at exit (a hung
tool there blocks the process from ever exiting). So each call runs in a *daemon* thread that
is abandoned at the deadline — its outcome is then unknown — or, when the tool opts in, in a
child process that is killed at the deadline, which stops the side effect.
"""

from __future__ import annotations

import inspect
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import attrs

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


def _ms_since(start: float) -> int:
    return int((time.monotonic() - start) * 1000)


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
) -> CallResult:
    try:
        value = _invoke(fn, args, kwargs)
    except Exception as exc:
        return CallResult(status="error", error=exc, elapsed_ms=_ms_since(start))
    if time.monotonic() - start > timeout_s:
        return CallResult(status="timeout", elapsed_ms=_ms_since(start), fate="late (inline)")
    return CallResult(status="ok", value=value, elapsed_ms=_ms_since(start))


def _child_main(
    conn: Connection, fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> None:
    try:
        conn.send(("ok", _invoke(fn, args, kwargs)))
    except BaseException as exc:
        conn.send(("error", (type(exc).__name__, str(exc), getattr(exc, "retryable", False))))
    finally:
        conn.close()


def _in_child(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    timeout_s: float,
    name: str,
) -> CallResult:
    start = time.monotonic()
    import multiprocessing  # only tools that opt into isolation="process" pay for it

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_child_main, args=(child, fn, args, kwargs), name=f"fsm-agent:{name}", daemon=True
    )
    proc.start()
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
