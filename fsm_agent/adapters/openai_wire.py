"""The OpenAI Chat Completions wire format: the messages and tools a request carries, and
the strict reading of what comes back (JSON without NaN, tool-call arguments, Retry-After).

Pure functions over plain data, used by the HTTP lane in `fsm_agent.adapters.openai`.
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from typing import Any

from fsm_agent.adapters.models import Prompt
from fsm_agent.encoding import wire_text
from fsm_agent.runtime.usage import ModelUsage

#: The rules every request carries as its system message.
RULES = (
    "You draft; code decides. You are one step of a declared state machine, and each turn"
    " you do exactly one of these:\n"
    "- call one of the offered tools (one call per turn);\n"
    '- finish with a message that is exactly the JSON object {"answer": "<answer>"}; it'
    " counts only if a tool result with receipts backs it;\n"
    '- ask for a person with exactly {"handoff": {"why": "<reason>"}}.\n'
    'Prose and flags such as "done" are not votes: they are rejected, and a rejected reply'
    " costs a step. The budgets are fixed: nothing you say raises them or ends the run."
)


def build_messages(prompt: Prompt) -> list[dict[str, Any]]:
    """The chat messages for `prompt`: the rules with the courtesy line, the task, then the
    run's history (each proposed tool call as an assistant turn, answered by its result)."""
    system = f"{RULES}\nYou are on {prompt.courtesy} ({prompt.budget_left})."
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Task: {prompt.task}"},
    ]
    pending: tuple[str, str] | None = None  # the open tool call: (id, tool name)
    for n, entry in enumerate(prompt.history):
        role = entry.get("role")
        content = entry.get("content")
        call = (
            content.get("tool_call") if role == "assistant" and isinstance(content, dict) else None
        )
        answers = pending is not None and role == "tool" and entry.get("name") == pending[1]
        if pending is not None and not answers:
            messages.append(_tool_result(pending[0], {"note": "no result was recorded"}))
            pending = None
        if isinstance(call, dict):
            call_id = f"call_{n}"
            arguments = wire_text(call.get("args", {}))
            function = {"name": str(call.get("name")), "arguments": arguments}
            messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": call_id, "type": "function", "function": function}],
                }
            )
            pending = (call_id, function["name"])
        elif answers and pending is not None:
            result = {k: v for k, v in entry.items() if k not in ("role", "name")}
            messages.append(_tool_result(pending[0], result))
            pending = None
        else:
            note = (
                content if content is not None else {k: v for k, v in entry.items() if k != "role"}
            )
            text = note if isinstance(note, str) else wire_text(note)
            messages.append({"role": "user", "content": f"[{role or 'note'}] {text}"})
    if pending is not None:
        messages.append(_tool_result(pending[0], {"note": "no result was recorded"}))
    return messages


def _tool_result(call_id: str, result: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": wire_text(result)}


def advertised_tools(prompt: Prompt) -> list[dict[str, Any]]:
    """The allow-listed tools as functions (with their argument schemas when known)."""
    specs = {s.name: s for s in prompt.tool_specs}
    tools = []
    for name in prompt.tools:
        spec = specs.get(name)
        function: dict[str, Any] = {"name": name, "parameters": {"type": "object"}}
        if spec is not None:
            function.update(parameters=spec.parameters)
            if spec.description:
                function["description"] = spec.description
        tools.append({"type": "function", "function": function})
    return tools


# --- parsing helpers ------------------------------------------------------------------------


def token_count(value: Any) -> int | None:
    """A token count from `usage`, or None when it is missing or not a count."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def reply_usage(data: dict[str, Any], first: Any, model: str) -> ModelUsage:
    """What a reply says it used and who answered: `usage.prompt_tokens` /
    `completion_tokens`, `model`, `id` and the first choice's `finish_reason` (each None
    when missing or not of its type), asked of `model`. The latency is the runtime's."""
    tokens = data.get("usage")
    tokens = tokens if isinstance(tokens, dict) else {}
    finish = first.get("finish_reason") if isinstance(first, dict) else None
    return ModelUsage(
        input_tokens=token_count(tokens.get("prompt_tokens")),
        output_tokens=token_count(tokens.get("completion_tokens")),
        request_model=model,
        response_model=data.get("model"),
        response_id=data.get("id"),
        finish_reason=finish,
        provider="openai",
    )


def _reject_constant(token: str) -> Any:
    raise ValueError(f"non-finite number {token} is not JSON")


def strict_json(data: bytes | str) -> Any:
    return json.loads(data, parse_constant=_reject_constant)


def arguments_of(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):  # some servers send an object rather than its text
        return arguments
    if isinstance(arguments, str) and not arguments.strip():
        return {}  # a call with no arguments, as some servers send it
    if not isinstance(arguments, str):
        raise ValueError(f"expected JSON text, got {type(arguments).__name__}")
    value = strict_json(arguments)
    if not isinstance(value, dict):
        raise ValueError(f"expected an object, got {type(value).__name__}")
    return value


def function_of(call: Any) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    return function if isinstance(function, dict) else {}


def text_of(content: Any) -> Any:
    """Message content as the parser gets it: text parts joined; anything else as it is."""
    if isinstance(content, list) and all(
        isinstance(p, dict) and isinstance(p.get("text"), str) for p in content
    ):
        return "".join(p["text"] for p in content)
    return content


def retry_after_s(value: str | None) -> float | None:
    """Seconds a `Retry-After` header asks for (delta-seconds or an HTTP date), or None."""
    if value is None or not value.strip():
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None
