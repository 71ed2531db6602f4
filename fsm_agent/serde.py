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

import cattrs
from cattrs.strategies import configure_tagged_union

from fsm_agent.halt import HaltReason
from fsm_agent.proposals import Proposal

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


def unstructure(value: Any) -> Any:
    """A journal value as plain JSON-able data."""
    return converter.unstructure(value)


def structure(data: Any, cls: type[T]) -> T:
    """Plain data back into a journal type; raises `cattrs` errors that carry the path."""
    return converter.structure(data, cls)


def dumps(value: Any) -> str:
    """Canonical JSON text of a journal value (sorted keys, no NaN)."""
    return json.dumps(
        unstructure(value), sort_keys=True, separators=(",", ":"), allow_nan=False, default=repr
    )


# One encoder for the hot path: json.dumps with non-default options builds a new one a call.
_encode_compact = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def dumps_compact(value: Any) -> str:
    """The journal's JSON of a value: defaults left out, field order as declared, no NaN."""
    hook = _compact_hooks.get(type(value))
    if hook is None:
        hook = _compact_hooks[type(value)] = _compact.get_unstructure_hook(type(value))
    return _encode_compact(hook(value))


_compact_hooks: dict[type, Callable[[Any], Any]] = {}


def error_path(exc: BaseException) -> str:
    """A one-line description of a cattrs structuring error, with the path to the bad value."""
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc))
    return str(exc)
