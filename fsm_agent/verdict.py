"""The halt record of a finished run: the answer, the one-line why, the handoff packet.

Pure functions of the run's facts and its halt reason; the answer at a cap is always
`cannot: <meter> budget`, never something the model said.
"""

from __future__ import annotations

import json
from typing import Any

from fsm_agent.context import RunContext
from fsm_agent.halt import HANDOFF, HaltReason, cannot_answer, terminal_state
from fsm_agent.proposals import FinalAnswer, HandoffRequest, Rejection, ToolCall
from fsm_agent.record import HaltRecord, HandoffPacket


def build_record(
    ctx: RunContext,
    reason: HaltReason,
    note: str | None,
    signum: int | None,
    *,
    run_id: str,
    started_at: str,
    ended_at: str,
    journal: str,
    journal_head: str | None = None,
) -> HaltRecord:
    """The record for a run that halted with `reason` (`note` overrides the explanation)."""
    state = terminal_state(reason)
    error = note if note is not None else explain(ctx, reason)
    return HaltRecord(
        task=ctx.task,
        max_steps=ctx.budgets.max_steps,
        wall_clock_ms=ctx.budgets.wall_clock_ms,
        steps_used=ctx.meters.steps_used,
        tool_calls=tuple(ctx.tool_calls),
        tool_calls_omitted=ctx.calls_omitted,
        halt_reason=reason,
        answer=answer(ctx, reason),
        run_id=run_id,
        machine=ctx.spec.name,
        machine_sha256=ctx.spec.sha256,
        terminal_state=state,
        budgets=ctx.budgets,
        meters=ctx.meters,
        started_at=started_at,
        ended_at=ended_at,
        journal=journal,
        handoff=handoff_packet(ctx, reason, error) if state == HANDOFF else None,
        error=None if reason is HaltReason.COMPLETED else error,
        signal=signum,
        journal_head=journal_head,
    )


def answer(ctx: RunContext, reason: HaltReason) -> str | None:
    """The final answer of a completed run, `cannot: <meter> budget` at a cap, else None."""
    if reason is HaltReason.COMPLETED:
        if isinstance(ctx.proposal, FinalAnswer):
            return ctx.proposal.text
        return ctx.tool.final if ctx.tool else None
    return cannot_answer(reason)


def explain(ctx: RunContext, reason: HaltReason) -> str | None:
    """One line saying why, from the recorded facts."""
    proposal, tool = ctx.proposal, ctx.tool
    if reason in (HaltReason.SCHEMA_FAIL, HaltReason.EMPTY_RESPONSE):
        if isinstance(proposal, Rejection):
            return proposal.detail
        if isinstance(proposal, FinalAnswer):
            return "final answer refused: no receipted tool result backs it"
    if reason in (HaltReason.TOOL_ERROR, HaltReason.RETRY_BUDGET, HaltReason.TOOL_TIMEOUT):
        return tool.error if tool else None
    if reason is HaltReason.TOOL_REFUSED and isinstance(proposal, ToolCall):
        return (
            f"tool {proposal.name!r} is not on the allow-list"
            f" ({', '.join(ctx.allowlist) or 'empty'}); nothing was run"
        )
    if reason is HaltReason.HANDOFF_REQUESTED and isinstance(proposal, HandoffRequest):
        return proposal.why
    m, b = ctx.meters, ctx.budgets
    spent = {
        HaltReason.MAX_STEPS: f"step budget spent: {m.steps_used} of {b.max_steps} model calls",
        HaltReason.WALL_CLOCK: f"time budget spent: {m.elapsed_ms} ms of {b.wall_clock_ms} ms",
        HaltReason.COST_CAP: f"money budget spent: ${m.cost:.4f} of ${b.max_cost:.4f}",
        HaltReason.THRASHING: f"the same tool call was proposed {ctx.repeats} times in a row"
        f" (limit {ctx.thrash_limit})",
    }
    return spent.get(reason)


def handoff_packet(ctx: RunContext, reason: HaltReason, why: str | None) -> HandoffPacket:
    """Why a person is needed, what was tried, and the last proposed call's arguments."""
    tried = tuple(
        f"step {c.step}: {c.name}({json.dumps(c.args, sort_keys=True, default=repr)}) -> {c.status}"
        for c in ctx.tool_calls
    )
    if ctx.calls_omitted:  # a long run's packet stays readable; the journal has every call
        tried = (f"({ctx.calls_omitted} earlier calls omitted: see the journal)", *tried)
    proposal = ctx.proposal
    frozen: dict[str, Any] | None = None
    if isinstance(proposal, ToolCall):
        frozen = {"tool": proposal.name, "args": proposal.args}
    elif isinstance(proposal, HandoffRequest) and proposal.args is not None:
        frozen = dict(proposal.args)
    return HandoffPacket(why=why or reason.value, tried=tried, frozen_args=frozen)
