"""What an action produced, made safe to journal and to decide on.

A tool's return value is checked as strictly as the converter checks JSON (a receipt status
of "200" is not a receipt), a deadline-bound call becomes a `ToolOutcome`, and a receipted
result contributes the values a final answer may be grounded in.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from fsm_agent import serde
from fsm_agent.deadline import CallResult, ChildError
from fsm_agent.receipts import Receipt
from fsm_agent.snapshot import ToolOutcome
from fsm_agent.tools import ToolError, ToolResult


def jsonable(value: Any) -> Any:
    """A raw value as JSON-able data for the journal (repr for anything else).

    UTF-8 bytes are kept as their text, so a replay parses what the live run parsed."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return repr(value)
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def check_result(result: ToolResult) -> None:
    """Type-check a ToolResult built in Python as strictly as the converter checks a dict
    (attrs does not check types: a receipt status of "200" would pass construction)."""

    def bad(path: str, want: str, got: Any) -> TypeError:
        return TypeError(f"expected {want}, got {got!r} @ $.{path}")

    if not isinstance(result.receipts, tuple):
        raise bad("receipts", "a tuple of Receipt", result.receipts)
    for i, r in enumerate(result.receipts):
        if not isinstance(r, Receipt):
            raise bad(f"receipts[{i}]", "a Receipt", r)
        if isinstance(r.status, bool) or not isinstance(r.status, int):
            raise bad(f"receipts[{i}].status", "an integer", r.status)
        for name in ("id", "idempotency_key", "checksum"):
            value = getattr(r, name)
            if not isinstance(value, str) and not (value is None and name != "id"):
                raise bad(f"receipts[{i}].{name}", "a string", value)
    if result.final is not None and not isinstance(result.final, str):
        raise bad("final", "a string or null", result.final)


def to_result(value: Any) -> ToolResult:
    """A tool's return value, checked strictly whether it came as a ToolResult or a dict."""
    if isinstance(value, ToolResult):
        check_result(value)
        return value
    if isinstance(value, dict):
        return serde.structure(value, ToolResult)
    raise TypeError(
        f"a tool returns ToolResult or a dict of its fields, got {type(value).__name__}"
    )


def outcome_from_call(name: str, args: dict[str, Any], call: CallResult) -> ToolOutcome:
    ms = call.elapsed_ms
    if call.status == "timeout":
        late = call.fate == "late (inline)"
        return ToolOutcome(
            name=name,
            args=args,
            duration_ms=ms,
            status="timed_out",
            outcome_unknown=not late,
            error=f"finished after {ms} ms, past its deadline (inline: it could not be"
            " interrupted); its result is refused"
            if late
            else f"no result within {ms} ms; {call.fate} at the deadline; its side effect"
            " is unknown",
        )
    if call.status == "error":
        err = call.error
        retryable = isinstance(err, ToolError | ChildError) and err.retryable
        return ToolOutcome(
            name=name,
            args=args,
            duration_ms=ms,
            status="failed",
            retryable=retryable,
            error=f"{type(err).__name__}: {err}",
        )
    try:
        result = to_result(call.value)
    except Exception as exc:
        return ToolOutcome(
            name=name,
            args=args,
            duration_ms=ms,
            status="failed",
            retryable=False,
            error=f"tool returned a malformed result: {serde.error_path(exc)}",
        )
    return ToolOutcome(
        status="returned",
        receipts=result.receipts,
        observation=jsonable(result.observation),
        final=result.final,
        cost=result.cost,
        name=name,
        args=args,
        duration_ms=ms,
    )


MAX_GROUNDED = 256


def _leaves(value: Any, depth: int = 0) -> Iterator[str]:
    if depth > 8:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield str(value)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v, depth + 1)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _leaves(v, depth + 1)


def grounded_values(known: tuple[str, ...], outcome: ToolOutcome) -> tuple[str, ...]:
    """Add what a receipted result returned: its final, its receipt ids, its observation."""
    found = [outcome.final] if outcome.final else []
    found += [r.id for r in outcome.receipts]
    found += [v[:4096] for v in _leaves(outcome.observation)]
    merged = list(known)
    for value in found:
        if value and value not in merged:
            merged.append(value)
    return tuple(merged[:MAX_GROUNDED])
