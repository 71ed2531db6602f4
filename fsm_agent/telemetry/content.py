"""What a trace may say of a run's content — the task, the model's input and output, a tool's
arguments and result — and how it is bounded and redacted.

Nothing of it is captured unless asked (`TraceOptions.content`): by the conventions'
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` (`true`, `span_only` or
`span_and_event`), or by a command's flag. Captured content is what the journal holds, which
was redacted when the run journaled it; the trace's own `Redactor` (the values of the
environment variables a command names with `--secret-env`, and a live run's API key) is
applied again over every value. Each text is cut to `PART_CHARS` characters and a model
call's input keeps the task and its newest messages within `MAX_CONTENT_CHARS`, so no
captured attribute is longer than that (JSON text, in the conventions' message shapes).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from fsm_agent.redaction import NO_SECRETS, Redactor
from fsm_agent.runtime.proposals import FinalAnswer, Proposal, ToolCall

#: The environment variable the OpenTelemetry GenAI instrumentations read, and the values
#: of it that turn content capture on (case-insensitive).
CAPTURE_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
CAPTURE_ON: Final = frozenset({"true", "span_only", "span_and_event"})
#: The longest captured attribute value (characters of JSON text).
MAX_CONTENT_CHARS: Final = 4000
#: The longest single text, argument object or result inside one (characters).
PART_CHARS: Final = 1000
#: How a cut text ends.
CUT_MARKER: Final = "…[{n} more characters]"

Message = dict[str, Any]


def capture_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for content capture."""
    value = (os.environ if environ is None else environ).get(CAPTURE_ENV, "")
    return value.strip().lower() in CAPTURE_ON


@attrs.frozen
class TraceOptions:
    """How spans are built: `content` captures the run's content (bounded and redacted by
    `redactor`); without it no task, prompt, reply, argument or result is in any span."""

    content: bool = False
    redactor: Redactor = NO_SECRETS


def cut(text: str, limit: int = PART_CHARS) -> str:
    """`text` if it has at most `limit` characters, else its start and a marker saying how
    many were left out, `limit` characters in all."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - 40)  # room for the marker (40 characters hold any count)
    return text[:keep] + CUT_MARKER.format(n=len(text) - keep)


def as_text(value: Any) -> str:
    """A journaled value as text: a string as it is, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=repr)


def bounded(value: Any, options: TraceOptions, limit: int = MAX_CONTENT_CHARS) -> str:
    """A captured value as one attribute: redacted, as text, cut to `limit`."""
    return cut(options.redactor.text(as_text(value)), limit)


def text_value(prefix: str, value: Any, options: TraceOptions) -> dict[str, str]:
    """OpenInference's `input.value` / `output.value` (`prefix`) of a captured value, with
    its `….mime_type`: a string as `text/plain`, anything else as `application/json`."""
    mime = "text/plain" if isinstance(value, str) else "application/json"
    return {f"{prefix}.value": bounded(value, options), f"{prefix}.mime_type": mime}


def json_value(prefix: str, text: str) -> dict[str, str]:
    """`input.value` / `output.value` (`prefix`) of JSON text already bounded (a model
    call's messages)."""
    return {f"{prefix}.value": text, f"{prefix}.mime_type": "application/json"}


def _part_value(value: Any, options: TraceOptions) -> Any:
    """A structured value inside a message part: kept as it is when its JSON is short, else
    its text cut (a string in place of the object)."""
    value = options.redactor.value(value)
    text = as_text(value)
    return value if len(text) <= PART_CHARS else cut(text)


def text_part(text: Any, options: TraceOptions) -> dict[str, Any]:
    return {"type": "text", "content": cut(options.redactor.text(as_text(text)))}


def tool_call_part(call: ToolCall, options: TraceOptions) -> dict[str, Any]:
    return {"type": "tool_call", "name": call.name, "arguments": _part_value(call.args, options)}


def reply_parts(proposal: Proposal | None, reply: Any, options: TraceOptions) -> list[Any]:
    """The parts of a model's output: its tool call, its answer, or the reply as journaled."""
    if isinstance(proposal, ToolCall):
        return [tool_call_part(proposal, options)]
    if isinstance(proposal, FinalAnswer):
        return [text_part(proposal.text, options)]
    return [] if reply is None else [text_part(reply, options)]


def note_message(note: Mapping[str, Any], options: TraceOptions) -> Message:
    """A history note (what the runtime tells the model of a past step) as a chat message."""
    role = note.get("role")
    content = note.get("content")
    if role == "assistant" and isinstance(content, Mapping) and "tool_call" in content:
        call = content["tool_call"]
        part = {"type": "tool_call", "name": str(call.get("name")),
                "arguments": _part_value(call.get("args"), options)}  # fmt: skip
        return {"role": "assistant", "parts": [part]}
    if role == "tool":
        response = {k: v for k, v in note.items() if k not in ("role", "name")}
        part = {"type": "tool_call_response", "response": _part_value(response, options)}
        return {"role": "tool", "name": str(note.get("name")), "parts": [part]}
    return {"role": "user", "parts": [text_part(f"[{role}] {as_text(content)}", options)]}


def fitted(messages: Sequence[Message]) -> str:
    """A model call's input messages as JSON within MAX_CONTENT_CHARS: the first (the task)
    and the newest that fit, a note in between saying how many were left out."""
    texts = [json.dumps(m, ensure_ascii=False, default=repr) for m in messages]
    if sum(len(t) + 1 for t in texts) + 1 <= MAX_CONTENT_CHARS:
        return "[" + ",".join(texts) + "]"
    head, tail = texts[:1], texts[1:]
    kept: list[str] = []
    room = MAX_CONTENT_CHARS - len(head[0]) - 200 if head else MAX_CONTENT_CHARS - 200
    for text in reversed(tail):
        if len(text) + 1 > room:
            break
        kept.insert(0, text)
        room -= len(text) + 1
    left_out = len(tail) - len(kept)
    note = {"role": "user", "parts": [{"type": "text",
            "content": f"[{left_out} earlier message(s) left out]"}]}  # fmt: skip
    text = "[" + ",".join([*head, json.dumps(note), *kept]) + "]"
    if len(text) <= MAX_CONTENT_CHARS:
        return text
    whole = f"[{len(texts)} message(s) left out: too long]"
    return json.dumps([{"role": "user", "parts": [{"type": "text", "content": whole}]}])
