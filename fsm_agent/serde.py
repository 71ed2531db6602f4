"""The one converter: the only way journal types go to and come from JSON.

Strict on the way in: extra keys are refused, and primitives are not coerced (a receipt
status of "200" is not the integer 200).
"""

from __future__ import annotations

import enum
import json
from typing import Any, TypeVar

import cattrs
from cattrs.strategies import configure_tagged_union

from fsm_agent.halt import HaltReason
from fsm_agent.proposals import Proposal

T = TypeVar("T")

converter = cattrs.Converter(forbid_extra_keys=True)


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


converter.register_structure_hook(int, _strict_int)
converter.register_structure_hook(float, _strict_float)
converter.register_structure_hook(str, _strict_str)
converter.register_structure_hook(bool, _strict_bool)


def _enum(value: Any, cls: type[enum.Enum]) -> enum.Enum:
    return cls(value)


# A StrEnum is a str subclass: without this the strict `str` hook would return a plain str.
converter.register_structure_hook(HaltReason, _enum)
configure_tagged_union(Proposal, converter, tag_name="type")
converter.register_unstructure_hook(
    Proposal | None,
    lambda v: None if v is None else converter.unstructure(v, unstructure_as=Proposal),
)
converter.register_structure_hook(
    Proposal | None,
    lambda v, _: None if v is None else converter.structure(v, Proposal),  # type: ignore[arg-type]
)


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


def error_path(exc: BaseException) -> str:
    """A one-line description of a cattrs structuring error, with the path to the bad value."""
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc))
    return str(exc)
