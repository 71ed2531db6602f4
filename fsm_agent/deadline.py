"""Calls that cannot outlive their deadline.

Python threads cannot be killed, and `concurrent.futures` workers are joined at exit (a hung
tool there blocks the process from ever exiting). So each call runs in a *daemon* thread that
is abandoned at the deadline — its outcome is then unknown — or, when the tool opts in, in a
child process that is killed at the deadline, which stops the side effect.
"""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any, Literal

import attrs

CallStatus = Literal["ok", "error", "timeout"]


@attrs.frozen
class CallResult:
    """How a deadline-bound call ended."""

    status: CallStatus
    value: Any = None
    error: BaseException | None = None
    elapsed_ms: int = 0
    #: "abandoned" (daemon thread left running) or "killed" (child process) at a timeout.
    fate: str | None = None


class ChildError(Exception):
    """An exception raised in a child process, carried back by type name and message."""

    def __init__(self, type_name: str, message: str, *, retryable: bool) -> None:
        self.type_name = type_name
        self.retryable = retryable
        super().__init__(f"{type_name}: {message}")


def _invoke(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    value = fn(*args, **kwargs)
    if inspect.isawaitable(value):

        async def wait() -> Any:
            return await value

        value = asyncio.run(wait())
    return value


def _ms_since(start: float) -> int:
    return int((time.monotonic() - start) * 1000)


def call_with_deadline(
    fn: Callable[..., Any],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    timeout_s: float,
    isolation: Literal["thread", "process"] = "thread",
    name: str = "call",
) -> CallResult:
    """Run `fn(*args, **kwargs)` (sync or async) and return within `timeout_s` whatever it does."""
    kwargs = kwargs or {}
    if isolation == "process":
        return _in_child(fn, args, kwargs, timeout_s, name)
    start = time.monotonic()
    box: dict[str, Any] = {}
    finished = threading.Event()

    def target() -> None:
        try:
            box["value"] = _invoke(fn, args, kwargs)
        except BaseException as exc:
            box["error"] = exc
        finally:
            finished.set()

    threading.Thread(target=target, name=f"fsm-agent:{name}", daemon=True).start()
    if not finished.wait(max(timeout_s, 0.0)):
        return CallResult(status="timeout", elapsed_ms=_ms_since(start), fate="abandoned")
    if "error" in box:
        return CallResult(status="error", error=box["error"], elapsed_ms=_ms_since(start))
    return CallResult(status="ok", value=box.get("value"), elapsed_ms=_ms_since(start))


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
