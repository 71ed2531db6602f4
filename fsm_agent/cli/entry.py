"""The `fsm-agent` process: SIGTERM and SIGINT are answered from its first moment.

Loading the command (click, the library, a tools module) takes a few hundred milliseconds;
a signal in that time used to print a `KeyboardInterrupt` traceback or exit 1. So the
handlers go in before anything else is imported (this module and the package's `__init__`
load nothing new): until a run installs its own (which make the signal a journaled
`interrupted` halt) and after it removes them, a signal ends the process with 128+N and one
line on stderr, no traceback. While the command's own modules are being imported, a signal
is only marked and taken the moment that import is done (an exception thrown into the
import system's own code can break its module locks or be lost); from then on it is raised
at once. While these handlers are in place a real signal is
`Interrupted`, never `KeyboardInterrupt`, so a `KeyboardInterrupt` can only come from user
code (see `fsm_agent.runtime.interrupts.raised_by_user_code`).

A handler's exception can land where Python ignores exceptions (a weakref callback, a
`__del__`; the import system runs such callbacks all the time): the stop would be lost and
the command would go on. `sys.unraisablehook` sees that happen, prints nothing, and sends
the same signal again a moment later, from a thread, so that it lands in ordinary code (the
run's own handler, if a run has started meanwhile).

What no program can answer: a signal in the interpreter's own start, before the first line
of this package runs (~10 ms), gets Python's default (killed by the signal; or, for SIGINT,
a `KeyboardInterrupt` traceback from Python's start-up code, or one Python itself ignores in
a callback of its import system, "Exception ignored in …", so the command runs on as if
never signalled).
"""

from __future__ import annotations

import _thread
import sys
import time

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    import signal as _signal
    from types import FrameType
else:  # the C module Python loaded at its own start (`signal` would add enum: ~4 ms more)
    import _signal

#: The last signal this module's handler took (None: none yet).
_stopping: int | None = None
#: Set once the process is on its way out: a signal then changes nothing.
_exiting = False
#: True while the command's own modules are imported: a signal then only marks the stop,
#: and it is acted on the moment the import is done (see `main`).
_loading = False


def _said() -> bool:
    """The command said itself how a signal stopped it (`fsm_agent.cli.stopped`)."""
    return bool(getattr(sys.modules.get("fsm_agent.cli.stopped"), "said", False))


def _interrupted_type() -> type[BaseException] | None:
    errors = sys.modules.get("fsm_agent.errors")
    found = getattr(errors, "Interrupted", None)
    return found if isinstance(found, type) and issubclass(found, BaseException) else None


def _handler(signum: int, frame: FrameType | None) -> None:
    global _stopping
    _stopping = signum
    if _exiting or _loading:
        return
    interrupted = _interrupted_type()
    if interrupted is None:  # so early that nothing is loaded that would need to unwind
        raise SystemExit(128 + signum)
    raise interrupted(signum)


def _signal_of(exc: BaseException) -> int | None:
    """The signal a stop exception stands for, or None for any other exception."""
    interrupted = _interrupted_type()
    if interrupted is not None and isinstance(exc, interrupted):
        return int(getattr(exc, "signum", 0)) or None
    if isinstance(exc, SystemExit) and _stopping is not None and exc.code == 128 + _stopping:
        return _stopping
    return None


def _send_again(signum: int) -> None:
    time.sleep(0.01)  # let the callback that swallowed the stop return first
    _signal.raise_signal(signum)


def _lost_stop(unraisable: sys.UnraisableHookArgs) -> None:
    signum = None if unraisable.exc_value is None else _signal_of(unraisable.exc_value)
    if signum is None:
        sys.__unraisablehook__(unraisable)
        return
    _thread.start_new_thread(_send_again, (signum,))


def _say_stopped(signum: int) -> None:
    import signal

    name = signal.Signals(signum).name
    try:
        print(f"fsm-agent: stopped by {name}, outside a run", file=sys.stderr)
    except (OSError, ValueError):  # a closed stderr: no traceback either
        return


def _exit_now(code: object) -> None:
    """Exit with `code` without the interpreter's finalization: a Temporal client's threads
    (its Rust core's) can abort it ("PyGILState_Release: thread state … must be current",
    SIGABRT; temporalio/sdk-python#300), which would turn a command that succeeded into
    exit 134. Everything the command wrote is flushed first."""
    import os

    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 - contextlib is not loaded this early
            stream.flush()
        except (OSError, ValueError):  # a reader gone: what it missed is gone either way
            pass
    os._exit(status)


def main() -> None:
    """`fsm-agent`: the CLI, with the signal handlers installed before it is imported."""
    global _exiting, _loading
    for sig in (_signal.SIGTERM, _signal.SIGINT):
        _signal.signal(sig, _handler)
    sys.unraisablehook = _lost_stop
    try:
        # An exception raised by a handler in the middle of the import system's own code
        # can leave its module locks broken (a KeyError traceback) or be lost altogether
        # (the command went on and ran): while fsm-agent's own modules load (bounded, no
        # user code), a signal only marks the stop, and the stop is taken right after.
        _loading = True
        try:
            from fsm_agent.cli.main import main as cli_main
        finally:
            _loading = False
        if _stopping is not None:
            raise SystemExit(128 + _stopping)
        cli_main()
    except BaseException as exc:
        _exiting = True
        signum = _signal_of(exc)
        if signum is None:
            if isinstance(exc, SystemExit) and "temporalio" in sys.modules:
                _exit_now(exc.code)
            raise
        if not _said():
            _say_stopped(signum)
        sys.exit(128 + signum)
