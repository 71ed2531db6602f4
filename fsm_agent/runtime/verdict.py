"""The halt record of a finished run: the answer, the one-line why, the handoff packet.

Pure functions of the run's facts and its halt reason; the answer at a cap is always
`cannot: <meter> budget`, never something the model said.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from fsm_agent.declaration.spec import MachineSpec, TransitionSpec
from fsm_agent.halt import AWAITS, HANDOFF, HaltReason, cannot_answer, terminal_state
from fsm_agent.runtime.budgets import dollars
from fsm_agent.runtime.context import RunContext
from fsm_agent.runtime.effects import pending_lines, pending_summary, receipt_problem
from fsm_agent.runtime.grounding import ground
from fsm_agent.runtime.proposals import FinalAnswer, HandoffRequest, Rejection, ToolCall
from fsm_agent.runtime.receipts import receipts_complete
from fsm_agent.runtime.record import HaltRecord, HandoffPacket, ToolCallEntry
from fsm_agent.runtime.snapshot import call_sha256


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
    edge: TransitionSpec | None = None,
) -> HaltRecord:
    """The record for a run that halted with `reason` (`note` overrides the explanation);
    `edge` is the declared transition that halted it (None for a halt the runtime imposed)."""
    state = terminal_state(reason)
    error = note if note is not None else explain(ctx, reason, edge)
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
        handoff=handoff_packet(ctx, reason, error, edge, ended_at) if state == HANDOFF else None,
        error=None if reason is HaltReason.COMPLETED else error,
        signal=signum,
        journal_head=journal_head,
        grounded_by=grounded_by(ctx) if reason is HaltReason.COMPLETED else (),
        unreceipted=pending_lines(ctx.unreceipted, ctx.unreceipted_omitted),
        success_rules=ctx.rules,
    )


def grounded_by(ctx: RunContext) -> tuple[str, ...]:
    """The receipted calls a completed run's answer came from: those whose returned values
    back a final answer, or the call whose receipted result carried the goal."""
    if isinstance(ctx.proposal, FinalAnswer):
        return ground(ctx.proposal.text, ctx.receipted).backed_by
    if ctx.tool is not None and ctx.tool.final:
        return (f"step {ctx.steps_used}: {ctx.tool.name}",)
    return ()


def decision_note(ctx: RunContext, chosen: TransitionSpec) -> str | None:
    """What the journal says beside a decision on success: which calls grounded a
    completed run, or why a final answer was refused."""
    if chosen.halt is HaltReason.COMPLETED:
        calls = grounded_by(ctx)
        return f"grounded by {', '.join(calls)}" if calls else None
    if chosen.trigger == "answer" and isinstance(ctx.proposal, FinalAnswer):
        return answer_refusal(ctx, ctx.proposal)
    return None


def user_guards(edge: TransitionSpec | None) -> tuple[str, ...]:
    """The user guards (`package.module:function`, maybe negated) on a declared edge."""
    return () if edge is None else tuple(g for g in edge.guards if ":" in g)


def answer(ctx: RunContext, reason: HaltReason) -> str | None:
    """The final answer of a completed run, `cannot: <meter> budget` at a cap, else None."""
    if reason is HaltReason.COMPLETED:
        if isinstance(ctx.proposal, FinalAnswer):
            return ctx.proposal.text
        return ctx.tool.final if ctx.tool else None
    return cannot_answer(reason)


def explain(ctx: RunContext, reason: HaltReason, edge: TransitionSpec | None = None) -> str | None:
    """One line saying why, from the recorded facts (and the edge that halted the run)."""
    why = _why(ctx, reason, edge)
    pending = _pending(ctx)
    if why is not None and pending and reason is not HaltReason.SIDE_EFFECT_UNKNOWN:
        why += f"; without complete receipts: {pending}"
    return why


def _pending(ctx: RunContext) -> str | None:
    """The run's side-effecting calls without complete receipts, in one line (None: none)."""
    if not ctx.unreceipted and not ctx.unreceipted_omitted:
        return None
    return pending_summary(ctx.unreceipted, ctx.unreceipted_omitted)


def _why(ctx: RunContext, reason: HaltReason, edge: TransitionSpec | None) -> str | None:
    proposal, tool = ctx.proposal, ctx.tool
    guards = user_guards(edge)
    if guards and edge is not None and reason is not HaltReason.COMPLETED:
        return (
            f"stopped by guard {', '.join(guards)} in state {edge.source!r} on trigger"
            f" {edge.trigger!r}"
        )
    pending = _pending(ctx)
    if reason is HaltReason.SIDE_EFFECT_UNKNOWN and pending:
        return (
            f"no success without receipts: {pending}; the side"
            " effect is not known to have happened: check it by hand"
        )
    if reason in (HaltReason.SCHEMA_FAIL, HaltReason.EMPTY_RESPONSE):
        if isinstance(proposal, Rejection):
            return proposal.detail
        if isinstance(proposal, FinalAnswer):
            return answer_refusal(ctx, proposal)
    if reason in (HaltReason.TOOL_ERROR, HaltReason.RETRY_BUDGET, HaltReason.TOOL_TIMEOUT):
        return tool.error if tool else None
    if reason is HaltReason.TOOL_REFUSED and isinstance(proposal, ToolCall):
        if proposal.name not in ctx.allowlist:
            return (
                f"tool {proposal.name!r} is not on the allow-list"
                f" ({', '.join(ctx.allowlist) or 'empty'}); nothing was run"
            )
        return f"tool {proposal.name!r} was refused by the declaration; nothing was run"
    if reason is HaltReason.HANDOFF_REQUESTED and isinstance(proposal, HandoffRequest):
        return proposal.why
    m, b = ctx.meters, ctx.budgets
    spent = {
        HaltReason.MAX_STEPS: f"step budget spent: {m.steps_used} of {b.max_steps} model calls",
        HaltReason.WALL_CLOCK: f"time budget spent: {m.elapsed_ms} ms of {b.wall_clock_ms} ms",
        HaltReason.COST_CAP: f"money budget spent: {dollars(m.cost)} of {dollars(b.max_cost)}",
        HaltReason.THRASHING: f"the same tool call was proposed {ctx.repeats} times in a row"
        f" (limit {ctx.thrash_limit})",
    }
    return spent.get(reason)


def answer_refusal(ctx: RunContext, answer: FinalAnswer) -> str:
    """Why a final answer did not complete the run."""
    pending = _pending(ctx)
    if pending:
        return f"final answer refused: without complete receipts: {pending}"
    if ctx.rules < 2:
        return "final answer refused: no receipted tool result backs it"
    verdict = ground(answer.text, ctx.receipted)
    if verdict.missing:
        return (
            "final answer refused: it states "
            + ", ".join(repr(v) for v in verdict.missing)
            + ", which no receipted tool result returned"
        )
    return "final answer refused: no value a receipted tool result returned backs it"


def _receipt_note(call: ToolCallEntry) -> str:
    """` (206 with an empty id)` for a side-effecting call that returned without complete
    receipts; nothing for a read or a receipted call."""
    if not call.side_effect or call.status != "returned" or receipts_complete(call.receipts):
        return ""
    return f" ({receipt_problem(call.receipts)})"


def handoff_packet(
    ctx: RunContext,
    reason: HaltReason,
    why: str | None,
    edge: TransitionSpec | None = None,
    ended_at: str | None = None,
) -> HandoffPacket:
    """Why a person is needed, what was tried, the arguments frozen for them (the handoff
    request's own, or else the last proposed tool call's), where the run stopped, and what
    it waits for (`fsm_agent.runtime.decisions`)."""
    tried = tuple(
        f"step {c.step}: {c.name}({json.dumps(c.args, sort_keys=True, default=repr)}) -> {c.status}"
        + _receipt_note(c)
        for c in ctx.tool_calls
    )
    if ctx.calls_omitted:  # a long run's packet stays readable; the journal has every call
        tried = (f"({ctx.calls_omitted} earlier calls omitted: see the journal)", *tried)
    proposal = ctx.proposal
    frozen: dict[str, Any] | None = None
    if isinstance(proposal, HandoffRequest) and proposal.args is not None:
        frozen = dict(proposal.args)
    elif ctx.last_tool_call is not None:
        frozen = {"tool": ctx.last_tool_call.name, "args": dict(ctx.last_tool_call.args)}
    call = proposal if isinstance(proposal, ToolCall) else None
    awaits = waits_for(ctx.spec, reason)
    return HandoffPacket(
        why=why or reason.value,
        tried=tried,
        frozen_args=frozen,
        state=None if edge is None else edge.source,
        trigger=None if edge is None else edge.trigger,
        guards=user_guards(edge),
        call_sha256=None if call is None else call_sha256(call.name, dict(call.args)),
        awaits=awaits,
        wait_until=None
        if awaits is None or ended_at is None
        else later(ended_at, ctx.spec.wait_limit_ms),
    )


def waits_for(spec: MachineSpec, reason: HaltReason) -> str | None:
    """What a run that stopped with `reason` waits for — `approval` or `answer` — when its
    declaration continues it on a person's decision (an `approved` edge out of handoff for
    an approval, `answered` for an answer); None when the stop is final."""
    kind = AWAITS.get(reason)
    return kind if kind is not None and spec.continues(kind) else None


def later(iso: str, ms: int) -> str:
    """The ISO time `ms` after `iso` (as the journal writes times)."""
    moment = datetime.datetime.fromisoformat(iso) + datetime.timedelta(milliseconds=ms)
    return moment.isoformat(timespec="milliseconds")
