"""The reply parser: a model reply becomes exactly one proposal, or a rejection.

Model output is data. A `done: true` flag is recorded as ignored and never votes; a chatty
paragraph is `schema_fail`; nothing at all is `empty_response`; a final answer is accepted
only in the declared schema `{"answer": "<non-empty string>"}`.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

import attrs

MAX_REPLY_CHARS = 1_000_000
#: Keys a reply may carry beside its one proposal; recorded, never obeyed.
IGNORED_KEYS = frozenset({"done"})
_PROPOSAL_KEYS = ("tool_call", "answer", "handoff")


@attrs.frozen
class ToolCall:
    """The model proposes one tool call. Proposing is not permission: guards decide."""

    name: str
    args: dict[str, Any]
    ignored: tuple[str, ...] = ()


@attrs.frozen
class FinalAnswer:
    """The model proposes a final answer. It halts as success only with receipts behind it."""

    text: str
    ignored: tuple[str, ...] = ()


@attrs.frozen
class HandoffRequest:
    """The model asks for a human, optionally with the arguments it wants reviewed."""

    why: str
    args: dict[str, Any] | None = None
    ignored: tuple[str, ...] = ()


@attrs.frozen
class Rejection:
    """The reply is unusable: `schema_fail` or `empty_response`, with what was wrong."""

    kind: Literal["schema_fail", "empty_response"]
    detail: str


Proposal = ToolCall | FinalAnswer | HandoffRequest | Rejection


def _schema(detail: str) -> Rejection:
    return Rejection(kind="schema_fail", detail=detail)


def _reject_constant(token: str) -> Any:
    raise ValueError(f"non-finite number {token} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _decode(text: str) -> Any:
    return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(_finite(v) for v in value)
    return True


def _nonempty_str(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _from_text(raw: str) -> Any:
    """Decode a text reply: a JSON object, or the text itself (which is then prose)."""
    text = raw.strip()
    if not text:
        return None
    if not text.startswith("{"):
        return text
    try:
        return _decode(text)
    except RecursionError:
        return _schema("reply JSON is nested too deeply")
    except ValueError as exc:
        return _schema(f"reply looks like JSON but does not parse (truncated?): {exc}")


def parse_reply(raw: Any, *, step: int, max_steps: int) -> Proposal:
    """Turn one raw model reply into exactly one `Proposal`. Pure; never raises."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return _schema(f"reply is not valid UTF-8: {exc}")
    if isinstance(raw, str):
        if len(raw) > MAX_REPLY_CHARS:
            return _schema(f"reply is {len(raw)} characters; the limit is {MAX_REPLY_CHARS}")
        raw = _from_text(raw)
        if isinstance(raw, Rejection):
            return raw
    if raw is None or raw == {} or raw == []:
        return Rejection(kind="empty_response", detail="the model returned nothing")
    if isinstance(raw, str):
        return _schema("prose is not a proposal; expected a JSON object")
    if not isinstance(raw, dict):
        return _schema(f"expected a JSON object, got {type(raw).__name__}")
    try:
        return _from_object(raw, step=step, max_steps=max_steps)
    except RecursionError:
        return _schema("reply is nested too deeply")


def _from_object(reply: dict[Any, Any], *, step: int, max_steps: int) -> Proposal:
    if not all(isinstance(k, str) for k in reply):
        return _schema("reply keys must be strings")
    if not _finite(reply):
        return _schema("reply contains a non-finite number")
    ignored = tuple(sorted(k for k in reply if k in IGNORED_KEYS))
    present = [k for k in _PROPOSAL_KEYS if k in reply]
    unknown = sorted(set(reply) - set(_PROPOSAL_KEYS) - IGNORED_KEYS)
    if unknown:
        return _schema(f"unknown key(s) {', '.join(map(repr, unknown))}")
    if len(present) != 1:
        if not present:
            return _schema("no proposal: expected one of tool_call, answer, handoff")
        return _schema(f"more than one proposal: {', '.join(present)}")
    key = present[0]
    body = reply[key]
    if key == "answer":
        if not _nonempty_str(body):
            return _schema('a final answer must be {"answer": "<non-empty string>"}')
        return FinalAnswer(text=body, ignored=ignored)
    if key == "handoff":
        shape = 'a handoff must be {"handoff": {"why": "<reason>", "args": {...}}} (args optional)'
        if not isinstance(body, dict) or not _nonempty_str(body.get("why")):
            return _schema(shape)
        if set(body) - {"why", "args"} or not isinstance(body.get("args", {}), dict):
            return _schema(shape)
        return HandoffRequest(why=body["why"], args=body.get("args"), ignored=ignored)
    return _tool_call(body, ignored, step=step, max_steps=max_steps)


def _tool_call(body: Any, ignored: tuple[str, ...], *, step: int, max_steps: int) -> Proposal:
    if not isinstance(body, dict) or not _nonempty_str(body.get("name")):
        return _schema('a tool call must be {"tool_call": {"name": "<tool>", "args": {...}}}')
    args = body.get("args", {})
    if not isinstance(args, dict):
        return _schema("tool_call.args must be a JSON object")
    extra = sorted(set(body) - {"name", "args"})
    if extra:
        return _schema(f"unknown key(s) in tool_call: {', '.join(map(repr, extra))}")
    if step > max_steps:
        return _schema(f"tool call on step {step} is past the step cap of {max_steps}")
    return ToolCall(name=body["name"], args=args, ignored=ignored)
