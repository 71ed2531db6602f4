"""What an action produced, made safe to journal and to decide on.

A tool's return value is checked as strictly as the converter checks JSON (a receipt status
of "200" is not a receipt), a deadline-bound call becomes a `ToolOutcome`, and a receipted
result contributes what a final answer may be grounded in.
"""

from __future__ import annotations

import builtins
import contextlib
import reprlib
from collections.abc import Iterator
from typing import Any

import attrs

from fsm_agent.encoding import joined
from fsm_agent.journal import serde
from fsm_agent.redaction import NO_SECRETS, Redactor
from fsm_agent.runtime.deadline import CallResult, ChildError, error_text
from fsm_agent.runtime.proposals import MAX_REPLY_BYTES, MAX_REPLY_CHARS, json_problem
from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.snapshot import Receipted, ToolOutcome
from fsm_agent.runtime.tools import ToolError, ToolResult

#: How a value the journal cannot keep as is starts; the marker is text, so a replay parses
#: it as prose (`schema_fail`), as the live run rejected the value itself.
NOT_KEPT = "<not journaled as is: "
#: The most of such a value the marker keeps, for the person reading the journal.
PREVIEW_CHARS = 200


class _Preview(reprlib.Repr):
    """A bounded repr whose every piece has the run's secrets redacted before it is cut:
    reprlib cuts each string and each object's repr to a few dozen characters, and a piece
    of a secret left at a cut would no longer match."""

    def __init__(self, secrets: Redactor) -> None:
        super().__init__()
        self.secrets = secrets
        self.maxlevel = 3
        self.maxstring = self.maxother = 80

    def repr_str(self, x: str, level: int) -> str:
        return super().repr_str(self.secrets.text(x), level)

    def repr_int(self, x: int, level: int) -> str:
        return self._cut(builtins.repr(x), self.maxlong)

    def repr_instance(self, x: Any, level: int) -> str:  # bytes and any other object
        return self._cut(builtins.repr(x), self.maxother)

    def _cut(self, text: str, limit: int) -> str:
        """`text` redacted, then cut in the middle to `limit` characters, as reprlib does."""
        text = self.secrets.text(text)
        if len(text) <= limit:
            return text
        keep = max(0, (limit - 3) // 2)
        return text[:keep] + self.fillvalue + text[len(text) - (limit - 3 - keep) :]


def admit(value: Any, secrets: Redactor = NO_SECRETS) -> tuple[Any, Any]:
    """A raw value (a model reply, an observation) as the run may decide on it — `secrets`
    redacted from it (`Redactor.value`) — and as the journal keeps it (`jsonable`)."""
    with contextlib.suppress(Exception):  # a hostile Python value (a raising __iter__ …)
        value = joined(value)  # is left as it is: the reply's own checks refuse it
    value = secrets.value(value)
    return value, _kept(value, secrets)


def jsonable(value: Any, secrets: Redactor = NO_SECRETS) -> Any:
    """A raw value (a model reply, an observation) as the journal keeps it, `secrets`
    redacted from it first: from the value itself and from any preview of it, before the
    preview is cut or encoded.

    Plain, bounded JSON data (what `proposals.json_problem` passes, and any string of at most
    `MAX_REPLY_CHARS` characters) is kept as is; UTF-8 bytes are kept as their text, so a
    replay parses what the live run parsed. Anything else (NaN, a Python object, a reply
    over the size or depth limit, bytes that are not UTF-8) becomes a marker string
    `<not journaled as is: the value …; preview: …>` of a few hundred characters at most. Never
    raises."""
    return admit(value, secrets)[1]


def _kept(value: Any, secrets: Redactor) -> Any:
    if isinstance(value, bytes):
        if len(value) > MAX_REPLY_BYTES:
            why = f"is {len(value)} bytes, over the limit of {MAX_REPLY_BYTES}"
            return _not_kept(why, value, secrets)
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return _not_kept("is bytes that are not UTF-8", value, secrets)
    if isinstance(value, str):
        if len(value) <= MAX_REPLY_CHARS:
            return value
        why = f"is {len(value)} characters, over the limit of {MAX_REPLY_CHARS}"
        return _not_kept(why, value, secrets)
    try:
        problem = json_problem(value)
    except Exception as exc:  # a hostile Python value (a raising __len__, __iter__ …)
        problem = f"cannot be read ({type(exc).__name__})"
    if problem is None:
        return value
    return _not_kept(problem, value, secrets)


def _not_kept(why: str, value: Any, secrets: Redactor) -> str:
    """The marker for a value the journal does not keep as is. A string or bytes value was
    redacted whole (`admit`); the preview is made of it, and redacted once more as a whole
    (a secret may span the pieces reprlib joins), before it is cut."""
    if isinstance(value, str | bytes):
        preview = repr(value[:PREVIEW_CHARS])
    else:
        try:
            preview = _Preview(secrets).repr(value)
        except Exception:  # a raising __repr__, an int too long to print …
            preview = f"a {type(value).__name__}"
    return f"{NOT_KEPT}the value {why}; preview: {secrets.text(preview)[:PREVIEW_CHARS]}>"


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


def outcome_from_call(
    name: str,
    args: dict[str, Any],
    call: CallResult,
    *,
    side_effect: bool = True,
    secrets: Redactor = NO_SECRETS,
) -> ToolOutcome:
    """What a deadline-bound call of a tool (or user action) produced, `secrets` redacted
    from all it returned or raised before anything of it is previewed or cut (this and
    `returned` are the one way a result enters a run); `side_effect=False` for a tool
    declared as a read."""
    outcome = _outcome(name, args, call, secrets)
    return outcome if side_effect else attrs.evolve(outcome, side_effect=False)


def returned(
    name: str, args: dict[str, Any], result: ToolResult, ms: int, secrets: Redactor
) -> ToolOutcome:
    """A tool's (or user action's) result as the run keeps it: `secrets` redacted from its
    observation, final and receipts, the observation as the journal keeps it (`jsonable`)."""
    receipts = result.receipts
    if secrets:
        receipts = tuple(
            attrs.evolve(
                r,
                id=secrets.text(r.id),
                idempotency_key=_text(r.idempotency_key, secrets),
                checksum=_text(r.checksum, secrets),
            )
            for r in receipts
        )
    return ToolOutcome(
        status="returned",
        receipts=receipts,
        observation=jsonable(result.observation, secrets),
        final=_text(result.final, secrets),
        cost=result.cost,
        name=name,
        args=args,
        duration_ms=ms,
    )


def _text(text: str | None, secrets: Redactor) -> str | None:
    return None if text is None else secrets.text(text)


def _outcome(name: str, args: dict[str, Any], call: CallResult, secrets: Redactor) -> ToolOutcome:
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
            else f"no result within {ms} ms; {call.fate}"
            + (" at the deadline" if call.fate in ("abandoned", "killed") else "")
            + "; its side effect is unknown",
        )
    if call.status == "error":
        err = call.error
        retryable = isinstance(err, ToolError | ChildError) and err.retryable
        said = isinstance(err, ToolError) or (
            isinstance(err, ChildError) and err.type_name == "ToolError"
        )
        return ToolOutcome(
            name=name,
            args=args,
            duration_ms=ms,
            status="failed",
            retryable=retryable,
            error=secrets.text(error_text(err)),
            outcome_unknown=not said,  # it raised without saying what happened
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
            error=secrets.text(f"tool returned a malformed result: {serde.error_path(exc)}"),
        )
    return returned(name, args, result, ms, secrets)


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


def add_receipted(
    known: tuple[Receipted, ...], step: int, outcome: ToolOutcome
) -> tuple[Receipted, ...]:
    """`known` and what one receipted call returned: its final, its observation values (each
    cut to 4,096 characters), its receipt ids. The run keeps at most MAX_GROUNDED values in
    all (a long run's snapshot stays bounded; later values are not kept)."""
    room = MAX_GROUNDED - sum(len(c.values) for c in known)
    found = [outcome.final] if outcome.final else []
    found += [v[:4096] for v in _leaves(outcome.observation)]
    values = tuple(dict.fromkeys(v for v in found if v))[: max(0, room)]
    ids = tuple(dict.fromkeys(r.id for r in outcome.receipts if r.id))
    return (*known, Receipted(step=step, name=outcome.name, values=values, ids=ids))
