"""The reply parser: a model reply becomes exactly one proposal, or a rejection.

Model output is data. A `done: true` flag is recorded as ignored and never votes; a chatty
paragraph is `schema_fail`; nothing at all is `empty_response`; a final answer is accepted
only in the declared schema `{"answer": "<non-empty string>"}`.

Hostile input is bounded before anything walks it: a reply is read only if it is plain JSON
data (objects with string keys, arrays, strings, finite numbers, booleans, null) of at most
`MAX_REPLY_CHARS` characters, nested at most `MAX_REPLY_DEPTH` deep, with integers of at
most 4,300 digits; anything else is `schema_fail` with what was wrong (`json_problem`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any, Literal

import attrs

#: The largest reply read: characters of text, or the size of a Python value (one per value,
#: plus the characters of its strings and keys, which is never more than its JSON text).
MAX_REPLY_CHARS = 1_000_000
#: A UTF-8 reply longer than this many bytes is over `MAX_REPLY_CHARS` without decoding it.
MAX_REPLY_BYTES = 4 * MAX_REPLY_CHARS
#: How deep objects and arrays may nest: far below Python's recursion limit, so nothing that
#: walks an accepted reply (the encoder, the converter, the journal) can overflow.
MAX_REPLY_DEPTH = 64
#: Integers up to 2**14284 (under 10**4300, Python's int-to-text limit) can be journaled.
MAX_INT_BITS = 14_284
#: A rejection's detail is cut to this length (it is journaled with every later snapshot).
MAX_DETAIL_CHARS = 300
#: Keys a reply may carry beside its one proposal; recorded, never obeyed.
IGNORED_KEYS = frozenset({"done"})
_PROPOSAL_KEYS = ("tool_call", "answer", "handoff")
_TOOL_CALL_KEYS = frozenset({"name", "args"})


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
    if len(detail) > MAX_DETAIL_CHARS:
        detail = detail[: MAX_DETAIL_CHARS - 1] + "…"
    return Rejection(kind="schema_fail", detail=detail)


def _reject_constant(token: str) -> Any:
    raise ValueError(f"non-finite number {token} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key[:80]!r}")
        out[key] = value
    return out


def _decode(text: str) -> Any:
    return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)


def json_problem(value: Any) -> str | None:
    """Why `value` is not plain, bounded JSON data, as a phrase ("has a non-finite number");
    None when it is. Iterative and bounded: it stops at the first problem, visits at most
    `MAX_REPLY_CHARS` values and holds one iterator per level, so a deep, huge or cyclic
    value can neither overflow the stack nor hang it.

    What passes is exactly what the journal keeps as is, and encodes without an error."""
    if 0 <= _plain_size(value, 0) <= MAX_REPLY_CHARS:
        return None  # plainly JSON data: the walk below finds no problem in it
    return _walk_problem(value)


#: How deep `_plain_size` looks (far below MAX_REPLY_DEPTH); deeper values are walked.
_PLAIN_DEPTH = 16


def _plain_size(value: Any, depth: int) -> int:
    """The size `json_problem` counts for `value` (one per value, plus the characters of
    its strings and keys) when it is plainly JSON data: exact built-in types only (no code
    of the value's runs), nested at most `_PLAIN_DEPTH` deep, finite floats, integers of at
    most `MAX_INT_BITS`, string keys. -1 for anything else, and once it is over
    `MAX_REPLY_CHARS`: `_walk_problem` then says what is wrong, or that nothing is."""
    cls = type(value)
    if cls is str:
        return 1 + len(value)
    if value is None or cls is bool:
        return 1
    if cls is int:
        return 1 if value.bit_length() <= MAX_INT_BITS else -1
    if cls is float:
        return 1 if math.isfinite(value) else -1
    if depth >= _PLAIN_DEPTH or (cls is not dict and cls is not list and cls is not tuple):
        return -1
    if len(value) > MAX_REPLY_CHARS:
        return -1
    size = 1
    if cls is dict:
        for key, item in value.items():
            inner = _plain_size(item, depth + 1)
            if type(key) is not str or inner < 0:
                return -1
            size += len(key) + inner
            if size > MAX_REPLY_CHARS:
                return -1
        return size
    for item in value:
        inner = _plain_size(item, depth + 1)
        if inner < 0:
            return -1
        size += inner
        if size > MAX_REPLY_CHARS:
            return -1
    return size


def _walk_problem(value: Any) -> str | None:
    """`json_problem`'s exact walk, for any value."""
    too_large = f"is larger than {MAX_REPLY_CHARS} characters"
    budget = MAX_REPLY_CHARS
    levels: list[Iterator[Any]] = [iter((value,))]
    while levels:
        item = next(levels[-1], _END)
        if item is _END:
            levels.pop()
            continue
        budget -= 1
        if isinstance(item, str):
            budget -= len(item)
        elif item is None or isinstance(item, bool):
            pass
        elif isinstance(item, int):
            if item.bit_length() > MAX_INT_BITS:
                return "has an integer of more than 4300 digits"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return "has a non-finite number (NaN or infinity)"
        elif isinstance(item, _CONTAINERS):
            if len(levels) > MAX_REPLY_DEPTH:  # levels holds this item's parents, and the top
                return f"is nested more than {MAX_REPLY_DEPTH} levels deep"
            if len(item) > budget:  # each member costs at least one: refuse before walking
                return too_large
            if isinstance(item, dict):
                for key in item:
                    if not isinstance(key, str):
                        return "has a non-string key (keys must be strings)"
                    budget -= len(key)
                levels.append(iter(item.values()))
            else:
                levels.append(iter(item))
        else:
            verb = "is" if item is value else "has"
            return f"{verb} a {type(item).__name__}, which is not JSON data"
        if budget < 0:
            return too_large
    return None


_END = object()
_CONTAINERS = (dict, list, tuple)


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


def parse_reply(raw: Any, *, step: int, max_steps: int, plain: bool = False) -> Proposal:
    """Turn one raw model reply into exactly one `Proposal`. Pure; never raises. `plain`:
    the caller has already found `raw` to be plain JSON data (`json_problem` is None), so an
    object reply is not walked a second time."""
    try:
        return _parse(raw, step=step, max_steps=max_steps, plain=plain)
    except Exception as exc:  # a hostile Python value (a raising __eq__, __len__ …)
        return _schema(f"reply cannot be read: {type(exc).__name__}")


def _parse(raw: Any, *, step: int, max_steps: int, plain: bool = False) -> Proposal:
    if isinstance(raw, bytes | str):
        plain = False  # an object decoded from text is checked here
    if isinstance(raw, bytes):
        if len(raw) > MAX_REPLY_BYTES:
            return _schema(f"reply is {len(raw)} bytes; the limit is {MAX_REPLY_CHARS} characters")
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
    if raw is None or (isinstance(raw, dict | list | tuple) and len(raw) == 0):
        return Rejection(kind="empty_response", detail="the model returned nothing")
    if isinstance(raw, str):
        return _schema("prose is not a proposal; expected a JSON object")
    if not isinstance(raw, dict):
        return _schema(f"expected a JSON object, got {type(raw).__name__}")
    problem = None if plain else json_problem(raw)
    if problem is not None:
        return _schema(f"reply {problem}")
    return _from_object(raw, step=step, max_steps=max_steps)


def _from_object(reply: dict[str, Any], *, step: int, max_steps: int) -> Proposal:
    if len(reply) == 1 and "tool_call" in reply:  # the common reply: nothing else to sort out
        return _tool_call(reply["tool_call"], (), step=step, max_steps=max_steps)
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
    extra = () if body.keys() <= _TOOL_CALL_KEYS else sorted(set(body) - _TOOL_CALL_KEYS)
    if extra:
        return _schema(f"unknown key(s) in tool_call: {', '.join(map(repr, extra))}")
    if step > max_steps:
        return _schema(f"tool call on step {step} is past the step cap of {max_steps}")
    return ToolCall(name=body["name"], args=args, ignored=ignored)
