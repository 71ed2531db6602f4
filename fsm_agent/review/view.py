"""Runs as an operator reads them in a terminal: one journaled event (`show`) or one
replayed step (`replay`) as text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fsm_agent.journal.store import Event
from fsm_agent.review.usage import call_text
from fsm_agent.runtime.budgets import dollars
from fsm_agent.runtime.receipts import Receipt

if TYPE_CHECKING:  # `show` prints events: the replay is for `replay --step` only
    from fsm_agent.review.replay import StepReport


def abridge(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _flag(value: bool | None) -> str:
    return "-" if value is None else ("T" if value else "F")


def receipts_text(receipts: Sequence[Receipt]) -> str:
    """`200 T-200, 206 (no id)`, or `no receipts`."""
    if not receipts:
        return "no receipts"
    return ", ".join(f"{r.status} {r.id or '(no id)'}" for r in receipts)


#: How the runtime words a call it refused before making it (`runtime.actions._run_tool`).
_NOT_CALLED = ("was not called", "no registered tool")


def call_kind(side_effect: bool, status: str, error: str | None) -> str:
    """What a journaled call is, as a label after its name: nothing for a call with a side
    effect, ` (not called)` for one refused before it was made (no side effect because
    nothing ran), ` (read)` for a call of a tool declared a read."""
    if side_effect:
        return ""
    if status == "failed" and error is not None and any(w in error for w in _NOT_CALLED):
        return " (not called)"
    return " (read)"


def event_lines(e: Event) -> list[str]:
    """One journaled event as `show` lists it: the transition, its guards and note, then
    what the action produced — the model's reply, or the tool call with its arguments,
    outcome, receipts and what it returned."""
    step = f"{e.snapshot.meters.steps_used}/{e.snapshot.budgets.max_steps}"
    pad = " " * 13
    if e.kind == "started":
        return [f"{e.seq:>4}  {step:>5}  start → {e.dest}"]
    if e.kind in ("resumed", "forked"):  # a take-over, a fork's lineage (`show` prints it)
        return [f"{e.seq:>4}  {step:>5}  {e.note}"]
    line = f"{e.seq:>4}  {step:>5}  {e.source} → {e.dest}  [{e.trigger}]"
    if e.halt is not None:
        line += f"  halt: {e.halt.value}"
    if e.guards:
        line += "  guards: " + ", ".join(f"{g.guard}={'T' if g.result else 'F'}" for g in e.guards)
    lines = [line]
    facts = e.facts
    if facts is not None and facts.action == "model":
        lines.append(f"{pad}reply: {abridge(facts.reply, 160)}")
        if facts.usage is not None:
            lines.append(f"{pad}model: {call_text(facts.usage, facts.reply_cost)}")
    if facts is not None and facts.tool is not None:
        t = facts.tool
        kind = call_kind(t.side_effect, t.status, t.error)
        lines.append(
            f"{pad}call: {t.name}({abridge(t.args, 100)}){kind} -> {t.status}, {t.duration_ms} ms;"
            f" receipts: {receipts_text(t.receipts)}"
        )
        if t.observation is not None:
            lines.append(f"{pad}returned: {abridge(t.observation, 160)}")
    error = facts and (facts.error or (facts.tool.error if facts.tool else None))
    if error:
        lines.append(f"{pad}error: {abridge(error, 160)}")
    if e.note:  # an operator's act, why the runtime halted, a refused or grounded answer
        lines.append(pad + e.note)
    return lines


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
            f" retries {m.retries_used}, cost {dollars(m.cost)}, {m.elapsed_ms} ms"
        )
    if step.reply is not None:
        lines.append(f"    reply: {abridge(step.reply)}")
    if step.receipts:
        lines.append(f"    receipts: {receipts_text(step.receipts)}")
    if step.note and step.note not in (step.detail or ""):
        lines.append(f"    note: {step.note}")
    if step.verdict not in ("match",) and step.detail:
        lines.append(f"    {step.detail}")
    return "\n".join(lines)
