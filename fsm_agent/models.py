"""Model adapters: the data plane. A model proposes; it never decides when to stop.

An adapter is any callable taking a `Prompt` and returning the raw reply (sync or async),
optionally wrapped in `ModelReply` to report the call's cost. It may declare its `lane`,
and its `isolation` ("thread" by default: a daemon thread abandoned at the wall-clock
deadline; "inline" for adapters that cannot block).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import attrs

from fsm_agent.errors import AdapterError
from fsm_agent.lanes import LOCAL, Lane
from fsm_agent.receipts import finite_cost
from fsm_agent.refs import BadReference, resolve_callable


@attrs.frozen
class Prompt:
    """What the model is shown for one step. The courtesy line is the first place the cap
    appears; the parser and the worker enforce it."""

    task: str
    step: int
    max_steps: int
    tools: tuple[str, ...]
    history: tuple[dict[str, Any], ...] = ()

    @property
    def courtesy(self) -> str:
        return f"step {self.step} of {self.max_steps}"

    def render(self) -> str:
        """The prompt as text, for adapters that send one string."""
        lines = [
            f"Task: {self.task}",
            f"You are on {self.courtesy}. Tools: {', '.join(self.tools) or 'none'}.",
            'Reply with exactly one JSON object: {"tool_call": {"name": ..., "args": {...}}},'
            ' {"answer": "..."} or {"handoff": {"why": "..."}}.',
        ]
        lines += [f"[{m.get('role', 'note')}] {json.dumps(m.get('content'))}" for m in self.history]
        return "\n".join(lines)


@attrs.frozen
class ModelReply:
    """A raw reply plus the cost the adapter reports for producing it (dollars)."""

    content: Any
    cost: float = attrs.field(default=0.0, validator=finite_cost)


@runtime_checkable
class ModelAdapter(Protocol):
    """Anything callable with a `Prompt`."""

    def __call__(self, prompt: Prompt) -> Any: ...


class ScriptedModel:
    """Replays a fixed list of replies, one per call; then replies with nothing.

    Used by tests, the examples and the demo. Each reply reaches the parser as is.
    """

    lane: Lane = LOCAL
    #: A list lookup cannot block, so it runs in the worker's thread (no hand-off cost).
    isolation = "inline"

    def __init__(self, replies: Sequence[Any], *, cost_per_call: float = 0.0) -> None:
        self.replies = list(replies)
        self.cost_per_call = cost_per_call
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
        cost = 0.0
        if isinstance(data, dict):
            cost = data.get("cost_per_call", 0.0)
            data = data.get("replies")
            if isinstance(cost, bool) or not isinstance(cost, int | float) or cost < 0:
                raise AdapterError("cost_per_call must be a number >= 0", spec=spec)
        if not isinstance(data, list):
            raise AdapterError("a script is a JSON list of replies", spec=spec)
        return cls(data, cost_per_call=float(cost))

    def __call__(self, prompt: Prompt) -> ModelReply:
        reply = self.replies[self.calls] if self.calls < len(self.replies) else None
        self.calls += 1
        return ModelReply(content=reply, cost=self.cost_per_call)


def load_model(spec: str) -> ModelAdapter:
    """`scripted:PATH` or `python:package.module:callable`."""
    kind, _, rest = spec.partition(":")
    if kind == "scripted" and rest:
        return ScriptedModel.from_file(rest)
    if kind == "python" and ":" in rest:
        try:
            return resolve_callable(rest)
        except BadReference as exc:
            raise AdapterError(str(exc), spec=spec) from exc
    raise AdapterError("a model spec is scripted:PATH or python:module:callable", spec=spec)


def model_lane(model: ModelAdapter) -> Lane | None:
    """The lane an adapter declares (None when it declares none)."""
    lane = getattr(model, "lane", None)
    return lane if isinstance(lane, Lane) else None
