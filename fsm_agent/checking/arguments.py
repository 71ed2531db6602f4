"""Arguments that fit a tool's signature, for the calls of a counterexample run.

A tool's parameters are described by `fsm_agent.runtime.tool_schema` as a JSON Schema; the
values here are built from it: each required parameter gets a value of its declared type
(a string, an integer within its bounds, one of a `Literal`'s values, an object with its
required fields …), different for each call `n` where the type allows, so two calls of one
tool are two calls, not a repeat. A type the schema says too little about (a `datetime` is a
plain string in it) is tried with a few values of the usual formats; every value is then
held to the tool's own strict check, so what is returned is what the runtime accepts.
"""

from __future__ import annotations

import base64
import itertools
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from fsm_agent.runtime.tool_schema import (
    ArgumentSchema,
    ArgumentsRefused,
    argument_schema,
    checked_arguments,
)

#: How deep a nested type is followed (a recursive type stops here), and how many
#: candidate values of one parameter are tried against its check.
_DEPTH, _TRIES = 8, 24


def fitting_arguments(
    fn: Callable[..., Any], name: str, n: int, *, distinct: bool
) -> dict[str, Any]:
    """Arguments for call `n` of the tool `name` (function `fn`): a value of its declared
    type for each required parameter; with `distinct`, when the required ones (or none)
    would be the same for every call, also the first optional parameter whose value differs
    per call. Raises `ArgumentsRefused` when no value that fits is found for a parameter."""
    schema = argument_schema(fn, name)
    props: Mapping[str, Any] = schema.parameters.get("properties", {})
    defs: Mapping[str, Any] = schema.parameters.get("$defs", {})
    required = list(schema.parameters.get("required", ()))
    args = {key: _fitting(schema, key, props.get(key, {}), defs, n) for key in required}
    if distinct and args == {k: _fitting(schema, k, props.get(k, {}), defs, n + 1) for k in args}:
        for key in props:
            if key in args:
                continue
            try:
                here, there = (_fitting(schema, key, props[key], defs, m) for m in (n, n + 1))
            except ArgumentsRefused:
                continue
            if here != there:
                args[key] = here
                break
    checked_arguments(fn, name, args)  # what the runtime will check, checked now
    return args


def _fitting(schema: ArgumentSchema, key: str, prop: Any, defs: Mapping[str, Any], n: int) -> Any:
    check = schema.checks.get(key)
    tried = []
    for value in itertools.islice(_candidates(prop, defs, n, 0), _TRIES):
        if check is None:
            return value
        try:
            check(value, key)
        except Exception:  # Misfit, or a check that cannot take the value: the next one
            tried.append(value)
            continue
        return value
    shown = ", ".join(repr(v)[:40] for v in tried[:3]) or "none"
    raise ArgumentsRefused(
        f"no value the checker tried fits parameter {key!r} of {schema.shown} (tried {shown});"
        " give the parameter a default, or a type the JSON Schema describes"
    )


def _candidates(s: Any, defs: Mapping[str, Any], n: int, depth: int) -> Iterator[Any]:
    """Values for call `n` that may fit schema `s`, most likely first."""
    if not isinstance(s, Mapping) or depth > _DEPTH:
        yield None
        return
    if "$ref" in s:
        target = defs.get(str(s["$ref"]).rsplit("/", 1)[-1], {})
        yield from _candidates(target, defs, n, depth + 1)
        return
    if "const" in s:
        yield s["const"]
        return
    if "enum" in s:
        values = list(s["enum"])
        yield from values[n % len(values) :] + values[: n % len(values)]
        return
    for key in ("anyOf", "oneOf", "allOf"):
        if key in s:
            alternatives = sorted(s[key], key=lambda a: a.get("type") == "null")
            for alternative in alternatives:
                yield from _candidates(alternative, defs, n, depth + 1)
            return
    kind = s.get("type")
    if isinstance(kind, list):
        for one in sorted(kind, key=lambda k: k == "null"):
            yield from _candidates({**s, "type": one}, defs, n, depth)
        return
    maker = _MAKERS.get(kind) if isinstance(kind, str) else None
    if maker is None:  # no type said: anything goes
        yield f"cx-{n}"
        return
    yield from maker(s, defs, n, depth)


def _strings(s: Mapping[str, Any], defs: Mapping[str, Any], n: int, depth: int) -> Iterator[Any]:
    day = f"2024-01-{1 + n % 28:02d}"
    formats = {
        "date": day,
        "date-time": f"{day}T00:00:00Z",
        "time": f"00:00:{n % 60:02d}",
        "duration": f"P{n + 1}D",
        "uuid": str(uuid.UUID(int=n + 1)),
        "decimal": str(n),
        "email": f"cx{n}@example.com",
        "uri": f"https://example.com/cx-{n}",
    }
    if s.get("contentEncoding") == "base64":
        yield base64.b64encode(f"cx-{n}".encode()).decode()
        return
    low, high = int(s.get("minLength", 0)), s.get("maxLength")
    first = formats.get(str(s.get("format")), f"cx-{n}")
    for text in dict.fromkeys([first, *formats.values(), str(n)]):
        text = text + "x" * max(0, low - len(text))
        yield text if high is None else text[: int(high)]


def _integers(s: Mapping[str, Any], defs: Mapping[str, Any], n: int, depth: int) -> Iterator[Any]:
    low = s.get("minimum", s["exclusiveMinimum"] + 1 if "exclusiveMinimum" in s else None)
    high = s.get("maximum", s["exclusiveMaximum"] - 1 if "exclusiveMaximum" in s else None)
    step = int(s.get("multipleOf", 1))
    value = (0 if low is None else int(low)) + n * step
    value = -(-value // step) * step  # up to a multiple
    if high is not None and value > high:
        value = int(high) // step * step
    yield value


def _numbers(s: Mapping[str, Any], defs: Mapping[str, Any], n: int, depth: int) -> Iterator[Any]:
    low = s.get("minimum", s.get("exclusiveMinimum"))
    high = s.get("maximum", s.get("exclusiveMaximum"))
    if low is not None and high is not None:
        yield low + (high - low) * (n + 1) / (n + 2)
    elif high is not None:
        yield float(high) - 1 - n
    else:
        yield (0.0 if low is None else float(low)) + n + 0.5
    yield from _integers(s, defs, n, depth)


def _booleans(s: Mapping[str, Any], defs: Mapping[str, Any], n: int, depth: int) -> Iterator[Any]:
    yield n % 2 == 0
    yield n % 2 == 1


def _nulls(s: Mapping[str, Any], defs: Mapping[str, Any], n: int, depth: int) -> Iterator[Any]:
    yield None


def _arrays(s: Mapping[str, Any], defs: Mapping[str, Any], n: int, depth: int) -> Iterator[Any]:
    if "prefixItems" in s:
        yield [_first(item, defs, n, depth + 1) for item in s["prefixItems"]]
        return
    items = s.get("items", {})
    count = int(s.get("minItems", 0))
    yield [_first(items, defs, n + i, depth + 1) for i in range(count)]
    if count == 0 and s.get("maxItems", 1):
        yield [_first(items, defs, n, depth + 1)]


def _objects(s: Mapping[str, Any], defs: Mapping[str, Any], n: int, depth: int) -> Iterator[Any]:
    props = s.get("properties", {})
    value = {k: _first(props.get(k, {}), defs, n, depth + 1) for k in s.get("required", ())}
    extra = s.get("additionalProperties")
    for i in range(max(0, int(s.get("minProperties", 0)) - len(value))):
        value[f"k{i}"] = _first(extra if isinstance(extra, Mapping) else {}, defs, n, depth + 1)
    yield value


def _first(s: Any, defs: Mapping[str, Any], n: int, depth: int) -> Any:
    return next(_candidates(s, defs, n, depth), None)


_MAKERS: Mapping[str, Callable[[Mapping[str, Any], Mapping[str, Any], int, int], Iterator[Any]]]
_MAKERS = {
    "string": _strings,
    "integer": _integers,
    "number": _numbers,
    "boolean": _booleans,
    "null": _nulls,
    "array": _arrays,
    "object": _objects,
}
