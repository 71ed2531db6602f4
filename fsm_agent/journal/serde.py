"""The one converter: the only way journal types go to and come from JSON.

It comes in two forms from one definition: full (every field) and compact (defaults left
out, for the journal's hot path).

Strict on the way in: extra keys are refused, and primitives are not coerced (a receipt
status of "200" is not the integer 200).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import cattrs
import orjson
from cattrs.strategies import configure_tagged_union

from fsm_agent.halt import HaltReason
from fsm_agent.journal import serde_gen
from fsm_agent.runtime.proposals import FinalAnswer, HandoffRequest, Proposal, Rejection, ToolCall

T = TypeVar("T")


def _strict_int(value: Any, _: type) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _strict_float(value: Any, _: type) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)


def _strict_str(value: Any, _: type) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _strict_bool(value: Any, _: type) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {value!r}")
    return value


def _enum(value: Any, cls: type[enum.Enum]) -> enum.Enum:
    return cls(value)


def _make(*, omit_if_default: bool) -> cattrs.Converter:
    c = cattrs.Converter(forbid_extra_keys=True, omit_if_default=omit_if_default)
    c.register_structure_hook(int, _strict_int)
    c.register_structure_hook(float, _strict_float)
    c.register_structure_hook(str, _strict_str)
    c.register_structure_hook(bool, _strict_bool)
    # A StrEnum is a str subclass: without this the strict `str` hook returns a plain str.
    c.register_structure_hook(HaltReason, _enum)
    configure_tagged_union(Proposal, c, tag_name="type")
    c.register_unstructure_hook(
        Proposal | None,
        lambda v: None if v is None else c.unstructure(v, unstructure_as=Proposal),
    )
    c.register_structure_hook(
        Proposal | None,
        lambda v, _: None if v is None else c.structure(v, Proposal),  # type: ignore[arg-type]
    )
    return c


#: The converter: every field written, strict structuring (records, exports, reads).
converter = _make(omit_if_default=False)
#: The same types, fields equal to their defaults left out: the journal's compact form.
#: Structuring it with `converter` restores the defaults, so both forms read the same.
_compact = _make(omit_if_default=True)


#: The tagged unions the converters know (the tag is `type`, the class name).
_UNIONS: dict[Any, tuple[type, ...]] = {
    Proposal: (ToolCall, FinalAnswer, HandoffRequest, Rejection)
}
_fast = serde_gen.generator(converter, _UNIONS)
_fast_compact = serde_gen.generator(_compact, _UNIONS)


def unstructure(value: Any) -> Any:
    """A journal value as plain JSON-able data."""
    return converter.unstructure(value)


def structure(data: Any, cls: type[T]) -> T:
    """Plain data back into a journal type; raises `cattrs` errors that carry the path."""
    return converter.structure(data, cls)


def structure_fast(data: Any, cls: Any) -> Any:
    """`structure` through the generated structurer of `cls` (a hot type: a snapshot, a
    tuple of guard results …): the same value, or the same error, faster."""
    try:
        return _fast.value_structurer(cls)(data)
    except Exception:  # not taken by the fast path: the converter builds it or says why
        return converter.structure(data, cls)


def fast_structurer(cls: Any) -> Callable[[Any], Any]:
    """The generated structurer of `cls` alone: raises `serde_gen.Refused` for what it does
    not take (the caller hands that to the converter)."""
    return _fast.value_structurer(cls)


def dumps(value: Any) -> str:
    """Canonical JSON text of a journal value (sorted keys, no NaN)."""
    return json.dumps(
        unstructure(value), sort_keys=True, separators=(",", ":"), allow_nan=False, default=repr
    )


def _default(value: Any) -> Any:
    """What the encoder makes of a value JSON has no form for, inside a field of type `Any`
    (the generated encoders pass such fields through): as the converter would, an attrs
    value's compact form and an enum's value; anything else is refused as `json` does."""
    if attrs.has(type(value)):
        return _compact_hook(type(value))(value)
    if isinstance(value, enum.Enum):
        return value.value
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# One encoder for the hot path: json.dumps with non-default options builds a new one a call.
_encode_compact = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_default).encode


def dumps_compact(value: Any) -> str:
    """The journal's JSON of a value: defaults left out, field order as declared, no NaN.

    An attrs value (or a tuple of them) goes through its generated encoder, giving the
    text the converter's compact form gives, byte for byte."""
    if value.__class__ is tuple:
        return _encode_compact([_compact_hook(e.__class__)(e) for e in value])
    return _encode_compact(_compact_hook(value.__class__)(value))


def _compact_hook(cls: type) -> Callable[[Any], Any]:
    hook = _compact_hooks.get(cls)
    if hook is None:
        if attrs.has(cls):
            hook = _fast_compact.class_unstructurer(cls)
        else:
            hook = _compact.get_unstructure_hook(cls)
        _compact_hooks[cls] = hook
    return hook


_compact_hooks: dict[type, Callable[[Any], Any]] = {}

#: The compact form of a value of an attrs class (its generated encoder).
compact_hook = _compact_hook
#: What the journal's encoder makes of a value JSON has no form for (see `_default`).
json_default = _default


def encode_compact(data: Any) -> str:
    """The stdlib's compact text of plain data (ASCII, no NaN): the journal's text before
    chain version 4, and its text for what orjson does not take."""
    return _encode_compact(data)


def compact_delta(cls: type, against: dict[str, str], args: str) -> Callable[..., Any]:
    """The compact form of attrs class `cls` with the fields in `against` written when they
    differ from what is given there instead of from their defaults (`serde_gen`)."""
    return _fast_compact.delta_unstructurer(cls, against, args)


def structure_delta(
    cls: type, trusted: dict[str, str], untrusted: dict[str, str], args: str
) -> Callable[..., Any]:
    """A strict structurer of attrs class `cls` that takes a field the data leaves out from
    elsewhere (`serde_gen`); it raises `serde_gen.Refused` for anything it does not take."""
    return _fast.delta_structurer(cls, trusted, untrusted, args)


def loads(text: str) -> Any:
    """A stored JSON text's value, exactly as `json.loads` reads it.

    orjson reads it where that is provably the same value: where orjson writes the value it
    read back to the very same text. Anything else (an integer beyond 64 bits, which orjson
    reads as a float; a lone surrogate escape; NaN; a non-ASCII or exponent spelling that
    orjson writes differently) is read by `json`."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
    if orjson.dumps(value) == text.encode("utf-8", "surrogatepass"):
        return value
    return json.loads(text)


def error_path(exc: BaseException) -> str:
    """A one-line description of a cattrs structuring error, with the path to the bad value."""
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc))
    return str(exc)
