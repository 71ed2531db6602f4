"""Model adapters: the data plane. A model proposes; it never decides when to stop.

An adapter is any callable taking a `Prompt` and returning the raw reply (sync or async),
optionally wrapped in `ModelReply` to report the call's cost. It may declare its `lane`,
and its `isolation` ("thread" by default: made on the run's driver thread, which is
abandoned at the wall-clock deadline (`fsm_agent.runtime.driver`); "inline" for adapters that
cannot block: not stopped at the deadline, a late reply is refused). A call that fails in
a way the adapter can name raises `ModelCallFailed`: the runtime journals the kind and the
raw body, and the failure is a rejection, never a success.
"""

from __future__ import annotations

import json
import math
import typing
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import attrs

from fsm_agent.errors import AdapterError, FsmAgentError
from fsm_agent.runtime.lanes import LOCAL, Lane
from fsm_agent.runtime.receipts import finite_cost
from fsm_agent.runtime.tool_schema import argument_schema
from fsm_agent.runtime.tools import Tool, ToolRegistry
from fsm_agent.runtime.usage import ModelUsage

#: How much of a failed call's raw body is journaled.
MAX_RAW_CHARS = 2000
#: What a failed call is to the parser: no reply at all, or a reply that is not a proposal.
RejectionKind = typing.Literal["schema_fail", "empty_response"]


@attrs.frozen
class ToolSpec:
    """A tool as a model is shown it: its name, its docstring's first paragraph and the JSON
    Schema of its arguments (from the function's signature: `fsm_agent.runtime.tool_schema`)."""

    name: str
    description: str
    parameters: dict[str, Any]


@attrs.frozen
class Prompt:
    """What the model is shown for one step. The courtesy line is the first place the cap
    appears; the parser and the worker enforce it."""

    task: str
    step: int
    max_steps: int
    tools: tuple[str, ...]
    #: the run's notes so far, oldest first: a read-only sequence (a `HistoryView` in a run;
    #: each read gives a fresh copy, and later notes never appear in this prompt's)
    history: Sequence[dict[str, Any]] = ()
    #: the run's wall clock left when the call starts (None outside a run); an adapter that
    #: does I/O sets its own timeouts under it
    time_left_s: float | None = None
    #: the allow-listed tools with their argument schemas, for function-calling adapters
    tool_specs: tuple[ToolSpec, ...] = ()

    @property
    def courtesy(self) -> str:
        return f"step {self.step} of {self.max_steps}"

    @property
    def budget_left(self) -> str:
        """The budget left: model calls after this one, and the run's wall clock when known."""
        left = f"{max(0, self.max_steps - self.step)} more model call(s) after this one"
        if self.time_left_s is not None:
            left += f", {self.time_left_s:.1f} s of wall clock left"
        return left

    def render(self) -> str:
        """The prompt as text, for adapters that send one string."""
        lines = [
            f"Task: {self.task}",
            f"You are on {self.courtesy} ({self.budget_left})."
            f" Tools: {', '.join(self.tools) or 'none'}.",
            'Reply with exactly one JSON object: {"tool_call": {"name": ..., "args": {...}}},'
            ' {"answer": "..."} or {"handoff": {"why": "..."}}.',
        ]
        lines += [f"[{m.get('role', 'note')}] {json.dumps(m.get('content'))}" for m in self.history]
        return "\n".join(lines)


@attrs.frozen
class ModelReply:
    """A raw reply plus the cost the adapter reports for producing it (dollars) and, when it
    knows them, the call's tokens, models and finish reason (`usage`; the runtime adds the
    latency)."""

    content: Any
    cost: float = attrs.field(default=0.0, validator=finite_cost)
    usage: ModelUsage | None = None


class ModelCallFailed(FsmAgentError):
    """A model call failed in a way its adapter can name (a transport fault, a reply that is
    not a usable proposal). The runtime turns it into a `rejection` of that kind, journals
    `kind`, `detail` and the raw body (truncated), and adds `cost` to the meter."""

    def __init__(
        self,
        kind: str,
        detail: str,
        *,
        raw: str | None = None,
        rejection: RejectionKind = "empty_response",
        cost: float = 0.0,
        usage: ModelUsage | None = None,
    ) -> None:
        finite = isinstance(cost, int | float) and not isinstance(cost, bool)
        if not finite or not math.isfinite(cost) or cost < 0:
            raise ValueError(f"cost must be a finite number >= 0, got {cost!r}")
        self.kind = kind
        self.detail = detail
        self.raw = None if raw is None else clip(raw)
        #: the raw body uncut, for the runtime to redact secrets from before cutting it
        self.raw_full = raw
        self.rejection: RejectionKind = rejection
        self.cost = float(cost)
        #: what the failed call used, when the adapter knows (a reply with no usable choice)
        self.usage = usage
        super().__init__(f"{kind}: {detail}")


def clip(text: str, limit: int = MAX_RAW_CHARS) -> str:
    """`text`, cut to `limit` characters with a note of how much was dropped."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit} more characters]"


def _describe(tool: Tool) -> ToolSpec:
    schema = argument_schema(tool.fn, tool.name)
    return ToolSpec(tool.name, schema.description, schema.parameters)


#: Specs per registry and allow-list, computed once: a registry refuses a second tool of the
#: same name, so what a name describes never changes. (No lock: two threads racing here
#: only compute the same specs twice.)
_SPECS: weakref.WeakKeyDictionary[ToolRegistry, dict[tuple[str, ...], tuple[ToolSpec, ...]]] = (
    weakref.WeakKeyDictionary()
)


def describe_tools(registry: ToolRegistry, names: Sequence[str]) -> tuple[ToolSpec, ...]:
    """The specs of the registered tools among `names`, in that order."""
    key = tuple(names)
    known = _SPECS.setdefault(registry, {})
    specs = known.get(key)
    if specs is None:
        tools = (registry.get(name) for name in key)
        specs = known[key] = tuple(_describe(t) for t in tools if t is not None)
    return specs


def _finite_cost(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


@runtime_checkable
class ModelAdapter(Protocol):
    """Anything callable with a `Prompt`."""

    def __call__(self, prompt: Prompt) -> Any: ...


class ScriptedModel:
    """Replays a fixed list of replies, one per step (reply i answers step i+1, so a resumed
    run picks up where it stopped); past the end it replies with nothing.

    Used by tests, the examples and the demo. Each reply reaches the parser as is.
    """

    lane: Lane = LOCAL
    #: A list lookup cannot block, so it runs in the worker's thread (no hand-off cost).
    isolation = "inline"

    def __init__(self, replies: Sequence[Any], *, cost_per_call: float = 0.0) -> None:
        if not _finite_cost(cost_per_call):
            raise AdapterError(
                f"cost_per_call must be a finite number >= 0, not {cost_per_call!r}",
                spec="scripted",
            )
        self.replies = list(replies)
        self.cost_per_call = float(cost_per_call)
        self.calls = 0

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """A JSON list of replies, or `{"replies": [...], "cost_per_call": 0.01}`."""
        spec = f"scripted:{path}"
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise AdapterError(f"cannot read script: {exc.strerror}", spec=spec) from exc
        except ValueError as exc:
            raise AdapterError(f"script is not valid JSON: {exc}", spec=spec) from exc
        except RecursionError as exc:
            raise AdapterError("script is nested too deeply to read", spec=spec) from exc
        cost = 0.0
        if isinstance(data, dict):
            cost = data.get("cost_per_call", 0.0)
            data = data.get("replies")
            if not _finite_cost(cost):  # NaN, ±Infinity: JSON as Python reads it
                raise AdapterError(
                    f"cost_per_call must be a finite number >= 0, not {cost!r}", spec=spec
                )
        if not isinstance(data, list):
            raise AdapterError("a script is a JSON list of replies", spec=spec)
        return cls(data, cost_per_call=float(cost))

    def __call__(self, prompt: Prompt) -> ModelReply:
        index = prompt.step - 1
        reply = self.replies[index] if 0 <= index < len(self.replies) else None
        self.calls += 1
        return ModelReply(content=reply, cost=self.cost_per_call)


def model_lane(model: ModelAdapter) -> Lane | None:
    """The lane an adapter declares (None when it declares none)."""
    lane = getattr(model, "lane", None)
    return lane if isinstance(lane, Lane) else None
