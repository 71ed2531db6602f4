"""What crosses between a run's workflow and its activities: Python values as restricted
pickles, and each call the run's loop yields described by what it calls, not by a function.

A pickle can name any importable callable, and anyone who can write a payload (Temporal's
history, the journal's payload table) could make a worker run it. So the unpickler here
admits only fsm-agent's own classes, plain containers and exception types, and the
reconstructors pickle needs for them (the standard library's "restricting globals"). A
value outside that (an exception class of a tools module, an object a tool returned) is
carried as what the run can use of it: an exception as its type name, message and
`retryable` (`RemoteError`, which reads as the original does in an outcome's error text),
any other value as what `to_result` makes of it.
"""

from __future__ import annotations

import builtins
import copyreg
import io
import pickle
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from fsm_agent.redaction import Redactor
from fsm_agent.runtime.deadline import Call, CallResult, Isolation

#: Modules whose every class may be unpickled.
_OUR_MODULES = ("fsm_agent.", "fsm_agent")
#: Names of `builtins` that are data, never code.
_BUILTINS = frozenset(
    {"dict", "list", "tuple", "set", "frozenset", "bytes", "bytearray", "str", "int",
     "float", "bool", "complex", "slice", "range", "NoneType", "object"}
)  # fmt: skip
_OTHER = {
    ("copyreg", "_reconstructor"),
    ("copyreg", "__newobj__"),
    ("copyreg", "__newobj_ex__"),
    ("collections", "OrderedDict"),
    ("datetime", "datetime"),
    ("datetime", "date"),
    ("datetime", "timedelta"),
    ("datetime", "timezone"),
    ("decimal", "Decimal"),
}


def _exception_type(name: str) -> bool:
    found = getattr(builtins, name, None)
    return isinstance(found, type) and issubclass(found, BaseException)


class _Restricted(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        ours = module == "fsm_agent" or module.startswith("fsm_agent.")
        plain = module == "builtins" and (name in _BUILTINS or _exception_type(name))
        if ours or plain or (module, name) in _OTHER:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not a value fsm-agent carries")


def dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> Any:
    return _Restricted(io.BytesIO(data)).load()


def carried(value: Any) -> bool:
    """`value` pickles, and the restricted unpickler takes it back."""
    try:
        loads(dumps(value))
    except Exception:
        return False
    return True


class RemoteError(Exception):
    """An exception of a class the wire does not carry, as its type name, message and
    `retryable`. `remote_error` gives it a class of the original's name, so an outcome's
    error text (`Type: message`) reads as it would have in one process."""

    type_name = "RemoteError"
    retryable = False

    def __reduce__(self) -> tuple[Any, ...]:
        return (remote_error, (self.type_name, str(self), self.retryable))


_classes: dict[str, type[RemoteError]] = {}


def remote_error(type_name: str, message: str, retryable: bool) -> RemoteError:
    cls = _classes.get(type_name)
    if cls is None:
        cls = type(type_name, (RemoteError,), {"type_name": type_name, "__module__": __name__})
        _classes[type_name] = cls
    error = cls(message)
    error.retryable = bool(retryable)
    return error


copyreg.pickle(RemoteError, RemoteError.__reduce__)


def portable_error(exc: BaseException | None) -> BaseException | None:
    """`exc` as the wire can carry it."""
    if exc is None or carried(exc):
        return exc
    try:
        message = str(exc)
    except Exception as inner:
        message = f"<its message cannot be read: {type(inner).__name__}>"
    return remote_error(type(exc).__name__, message, bool(getattr(exc, "retryable", False)))


@attrs.frozen
class CallRequest:
    """One call of a run, as an activity makes it: its `name` says what is called
    (`model`, `repair`, `judge`, `tool:NAME`, `action:module:function`), the rest as the
    run's loop gave it."""

    run_id: str
    name: str
    args: Sequence[Any] = ()
    kwargs: Mapping[str, Any] = attrs.field(factory=dict)
    timeout_s: float = 0.0
    isolation: Isolation = "thread"


def request_of(run_id: str, call: Call) -> CallRequest:
    return CallRequest(
        run_id=run_id,
        name=call.name,
        args=tuple(call.args),
        kwargs=dict(call.kwargs),
        timeout_s=call.timeout_s,
        isolation=call.isolation,
    )


def portable_result(result: CallResult) -> CallResult:
    """`result` as the wire can carry it: its error made portable, a value the wire does
    not carry made into what the run would make of it (a tool's result, or its failure)."""
    result = attrs.evolve(result, error=portable_error(result.error))
    if result.status != "ok" or carried(result.value):
        return result
    from fsm_agent.runtime.outcomes import to_result

    try:
        return attrs.evolve(result, value=to_result(result.value))
    except Exception as exc:
        return attrs.evolve(result, status="error", value=None, error=portable_error(exc))


def redacted(value: Any, secrets: Redactor, _depth: int = 0) -> Any:
    """`value` with `secrets` redacted from every string in it, fsm-agent's own attrs
    classes (a `ModelReply`, a `ToolResult`) and containers included, numbers kept: what a
    call returned, before it crosses into Temporal's history or the payload table (the
    run redacts it again on its side, as in one process)."""
    if not secrets or _depth > 200:
        return value
    if isinstance(value, str | bytes):
        return secrets.value(value)
    if isinstance(value, Mapping):
        return {redacted(k, secrets, _depth + 1): redacted(v, secrets, _depth + 1)
                for k, v in value.items()}  # fmt: skip
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        items = [redacted(v, secrets, _depth + 1) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if attrs.has(type(value)):
        changes = {}
        for field in attrs.fields(type(value)):
            if field.init:
                old = getattr(value, field.name)
                new = redacted(old, secrets, _depth + 1)
                if new is not old and new != old:
                    changes[field.name.lstrip("_")] = new
        return attrs.evolve(value, **changes) if changes else value
    return value


def redacted_result(result: CallResult, secrets: Redactor) -> CallResult:
    """A call's result with `secrets` redacted from its value and its error's message."""
    if not secrets:
        return result
    error = result.error
    if error is not None:
        message = str(error)
        said = secrets.text(message)
        if said != message:
            from fsm_agent.runtime.tools import ToolError

            retryable = bool(getattr(error, "retryable", False))
            error = (ToolError(said, retryable=retryable) if isinstance(error, ToolError)
                     else remote_error(type(error).__name__, said, retryable))  # fmt: skip
    return attrs.evolve(result, value=redacted(result.value, secrets), error=error)
