"""Replay as an operator reads it: one step of a `ReplayReport` as text."""

from __future__ import annotations

import json
from typing import Any

from fsm_agent.replay import StepReport


def _abridge(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _flag(value: bool | None) -> str:
    return "-" if value is None else ("T" if value else "F")


def format_step(step: StepReport) -> str:
    """A step as an operator reads it: the transition, its verdict, guards, meters, facts."""
    head = f"step {step.step}/{step.max_steps}  "
    head += f"{step.source or 'start'} → {step.dest}  [{step.trigger or 'start'}]"
    if step.recorded_halt is not None:
        head += f"  halt: {step.recorded_halt}"
    head += "  ok" if step.verdict in ("match", "external") else f"  {step.verdict.upper()}"
    lines = [head]
    if step.guards:
        shown = ", ".join(
            f"{g.guard} {_flag(g.recorded)}→{_flag(g.recomputed)}" for g in step.guards
        )
        lines.append(f"    guards (recorded→now): {shown}")
    if step.meters is not None:
        m = step.meters
        lines.append(
            f"    meters: steps {m.steps_used}, tool calls {m.tool_calls},"
            f" retries {m.retries_used}, cost ${m.cost:.4f}, {m.elapsed_ms} ms"
        )
    if step.reply is not None:
        lines.append(f"    reply: {_abridge(step.reply)}")
    if step.receipts:
        lines.append(
            "    receipts: " + ", ".join(f"{r.status} {r.id or '(no id)'}" for r in step.receipts)
        )
    if step.note and step.note not in (step.detail or ""):
        lines.append(f"    note: {step.note}")
    if step.verdict not in ("match",) and step.detail:
        lines.append(f"    {step.detail}")
    return "\n".join(lines)
