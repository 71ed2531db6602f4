"""Arguments drawn for a tool from the JSON Schema of its signature
(`fsm_agent.runtime.tool_schema`): small pools, so that the same call comes up again (a
retry, thrashing) as it does with a real model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fsm_agent.simulation.tape import Tape

#: The strings an argument is drawn from.
WORDS = ("a", "b", "refund window")
#: How deep a drawn value nests before it is cut short (an empty object or list).
MAX_DEPTH = 4


def draw_arguments(tape: Tape, schema: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments for a tool whose parameters' schema is `schema`: every required one, and
    each optional one or not."""
    defs = schema.get("$defs", {})
    return _object(tape, schema, defs, 0)


def _object(
    tape: Tape, schema: Mapping[str, Any], defs: Mapping[str, Any], depth: int
) -> dict[str, Any]:
    required = set(schema.get("required", ()))
    args: dict[str, Any] = {}
    for name, sub in schema.get("properties", {}).items():
        if name in required or tape.choose(2) == 1:
            args[name] = draw_value(tape, sub, defs, depth + 1)
    return args


def draw_value(tape: Tape, schema: Any, defs: Mapping[str, Any], depth: int = 0) -> Any:
    """One value fitting `schema` (as far as these pools go: a draw the schema refuses is
    a call refused before it is made, which is a path worth taking too)."""
    if not isinstance(schema, Mapping) or depth > MAX_DEPTH:
        return WORDS[0]
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return draw_value(tape, defs.get(ref.rsplit("/", 1)[-1], {}), defs, depth + 1)
    if "enum" in schema:
        options = list(schema["enum"])
        return options[tape.choose(len(options))] if options else None
    choices = schema.get("anyOf")
    if isinstance(choices, list) and choices:
        return draw_value(tape, choices[tape.choose(len(choices))], defs, depth)
    kind = schema.get("type")
    if kind == "string":
        return WORDS[tape.choose(len(WORDS))]
    if kind == "integer":
        return tape.choose(3) + 1
    if kind == "number":
        return float(tape.choose(3) + 1)
    if kind == "boolean":
        return tape.choose(2) == 1
    if kind == "null":
        return None
    if kind == "array":
        return [draw_value(tape, schema.get("items", {}), defs, depth + 1)] * tape.choose(2)
    if kind == "object":
        return _object(tape, schema, defs, depth)
    return WORDS[tape.choose(len(WORDS))]
