"""What a run used, read back from its journal: model calls with their tokens, models and
latency, and tool calls with their latency and outcome. `show` prints it, the report has a
section of it; both come from `run_usage`.

A journal written before usage was kept still reads: its model calls count, with no
tokens, models or latency (`ModelUsage` of every such call is None).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import attrs

from fsm_agent.journal.store import Event
from fsm_agent.runtime.budgets import dollars
from fsm_agent.runtime.usage import ModelUsage, UsageTotals, total


@attrs.frozen
class ToolUsage:
    """The calls of one tool (or user action) in a run: how many, how they ended, how long
    they took."""

    name: str
    calls: int
    outcomes: dict[str, int]
    total_ms: int
    max_ms: int


@attrs.frozen
class RunUsage:
    """What one run used. `model` adds up the calls that journaled their usage;
    `model_calls` counts every model call (older journals kept no usage); `cost` is what
    the model replies cost (tools' costs are in the record's meters)."""

    model_calls: int
    model: UsageTotals
    cost: float
    models: tuple[str, ...]
    tools: tuple[ToolUsage, ...]


def _model_name(u: ModelUsage) -> str | None:
    return u.response_model or u.request_model


def run_usage(events: Sequence[Event]) -> RunUsage:
    """The usage of the run whose journaled events are `events`."""
    usages: list[ModelUsage] = []
    calls, cost = 0, 0.0
    tools: dict[str, list[tuple[str, int]]] = {}
    for e in events:
        f = e.facts
        if f is None:
            continue
        if f.action == "model":
            calls += 1
            cost += f.reply_cost
            if f.usage is not None:
                usages.append(f.usage)
        elif f.tool is not None and e.kind == "transition":
            tools.setdefault(f.tool.name, []).append((f.tool.status, f.tool.duration_ms))
    names = sorted({n for u in usages if (n := _model_name(u)) is not None})
    return RunUsage(
        model_calls=calls,
        model=total(usages),
        cost=cost,
        models=tuple(names),
        tools=tuple(
            ToolUsage(
                name=name,
                calls=len(seen),
                outcomes=dict(Counter(status for status, _ in seen)),
                total_ms=sum(ms for _, ms in seen),
                max_ms=max(ms for _, ms in seen),
            )
            for name, seen in sorted(tools.items(), key=lambda kv: -sum(ms for _, ms in kv[1]))
        ),
    )


def tokens_text(t: UsageTotals) -> str:
    """`1,234 in / 56 out tokens`, with how many calls reported them when not all did."""
    if not t.calls_with_tokens:
        return "no tokens reported"
    text = f"{t.input_tokens:,} in / {t.output_tokens:,} out tokens"
    if t.calls_with_tokens < t.calls:
        text += f" ({t.calls_with_tokens} of {t.calls} calls reported them)"
    return text


def usage_lines(u: RunUsage) -> list[str]:
    """The run's usage as `show` prints it under the halt record."""
    if not u.model_calls and not u.tools:
        return []
    model = f"model calls: {u.model_calls}"
    if u.model.calls:
        model += f", {tokens_text(u.model)}, {u.model.latency_ms} ms"
    elif u.model_calls:
        model += " (journaled before usage was kept)"
    model += f", cost {dollars(u.cost)}"
    if u.models:
        model += f"; model {', '.join(u.models)}"
    lines = [model]
    if u.tools:
        lines.append(
            "tool calls: "
            + "; ".join(
                f"{t.name} {t.calls}x {t.total_ms} ms"
                f" ({', '.join(f'{n} {s}' for s, n in sorted(t.outcomes.items()))})"
                for t in u.tools
            )
        )
    return lines


def call_text(usage: ModelUsage, cost: float) -> str:
    """One model call as `show` lists it under its reply: `gpt-4o → gpt-4o-2024-08-06,
    120 in / 35 out tokens, finish stop, 830 ms, $0.0004`."""
    parts = []
    asked, answered = usage.request_model, usage.response_model
    if asked and answered and asked != answered:
        parts.append(f"{asked} → {answered}")
    elif asked or answered:
        parts.append(asked or answered or "")
    if usage.input_tokens is not None or usage.output_tokens is not None:
        t_in = "?" if usage.input_tokens is None else f"{usage.input_tokens:,}"
        t_out = "?" if usage.output_tokens is None else f"{usage.output_tokens:,}"
        parts.append(f"{t_in} in / {t_out} out tokens")
    if usage.finish_reason:
        parts.append(f"finish {usage.finish_reason}")
    parts.append(f"{usage.latency_ms} ms")
    if cost:
        parts.append(dollars(cost))
    return ", ".join(parts)
