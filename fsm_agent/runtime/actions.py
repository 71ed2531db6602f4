"""What the worker does in a state: ask the model, run the proposed tool, collect receipts,
or call a user action declared as `package.module:function`.

Each action updates the run's facts and returns the outcome (the trigger to fire) plus the
raw facts to journal. Actions never decide transitions; guards do.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator
from typing import Any, TypeVar

import attrs

from fsm_agent.adapters.models import ModelCallFailed, ModelReply, Prompt, clip, describe_tools
from fsm_agent.declaration.refs import resolve_callable
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.errors import ContractRefused, Interrupted
from fsm_agent.halt import DONE
from fsm_agent.journal import serde
from fsm_agent.journal.store import Facts
from fsm_agent.runtime.context import RunContext
from fsm_agent.runtime.contract import CONTRACT_SINCE, tool_refusal
from fsm_agent.runtime.deadline import Call, CallResult, error_text
from fsm_agent.runtime.effects import record_effect, settle
from fsm_agent.runtime.guards import resolve_guard
from fsm_agent.runtime.lanes import assert_local_halt, halt_lane_refusal
from fsm_agent.runtime.outcomes import (
    add_receipted,
    admit,
    jsonable,
    outcome_from_call,
    returned,
)
from fsm_agent.runtime.proposals import (
    FinalAnswer,
    HandoffRequest,
    Proposal,
    Rejection,
    ToolCall,
    parse_reply,
)
from fsm_agent.runtime.receipts import receipts_complete
from fsm_agent.runtime.record import ToolCallEntry
from fsm_agent.runtime.snapshot import Snapshot, ToolOutcome
from fsm_agent.runtime.tool_schema import ArgumentsRefused
from fsm_agent.runtime.tools import ToolResult, tool_arguments
from fsm_agent.runtime.usage import ModelUsage, call_usage


@attrs.frozen
class ActionResult:
    """What a user action returns: the trigger to fire, and optionally a tool-shaped result."""

    outcome: str
    result: ToolResult | None = None


#: The actions that touch nothing outside the run: any other (a tool call, a user action)
#: may have a side effect.
PURE_ACTIONS = frozenset({"model", "receipts"})


T = TypeVar("T")
#: An action as the run's loop performs it: it yields the deadline-bound calls it needs and
#: is sent their results (`fsm_agent.runtime.driver`), then returns its value.
Steps = Generator[Call, CallResult, T]


def has_side_effect(action: str | None) -> bool:
    """Whether a state's action may change the world (a tool call or a user action)."""
    return bool(action) and action not in PURE_ACTIONS


def perform(ctx: RunContext, state: str, action: str) -> Steps[tuple[str, Facts]]:
    """Run the action of the current state; return (outcome trigger, facts)."""
    if action == "model":
        return (yield from _ask_model(ctx))
    if action == "tool":
        return (yield from _run_tool(ctx))
    if action == "receipts":
        return _collect_receipts(ctx)
    return (yield from _user_action(ctx, state, action))


def _outcome_of(proposal: Proposal) -> str:
    if isinstance(proposal, ToolCall):
        return "tool_call"
    if isinstance(proposal, FinalAnswer):
        return "answer"
    if isinstance(proposal, HandoffRequest):
        return "handoff"
    return "rejected"


def _ask_model(ctx: RunContext) -> Steps[tuple[str, Facts]]:
    ctx.steps_used += 1
    step = ctx.steps_used
    time_left = ctx.remaining_s()
    prompt = Prompt(
        task=ctx.task,
        step=step,
        max_steps=ctx.budgets.max_steps,
        tools=ctx.allowlist,
        history=ctx.history.view(),
        time_left_s=time_left,
        tool_specs=describe_tools(ctx.tools, ctx.allowlist),
    )
    call = yield Call(
        ctx.model,
        (prompt,),
        timeout_s=time_left,
        isolation=getattr(ctx.model, "isolation", "thread"),
        name="model",
    )
    content: Any = None
    kept: Any = None
    cost = 0.0
    error = None
    reported: ModelUsage | None = None
    secrets = ctx.secrets  # redacted before the run decides on the reply or journals it
    if call.status == "ok":
        content = call.value
        if isinstance(call.value, ModelReply):
            content, cost = call.value.content, call.value.cost
            reported = call.value.usage
            ctx.add_cost(cost)
        content, kept = admit(content, secrets)  # kept: as journaled; the very value when plain
        proposal = parse_reply(
            content, step=step, max_steps=ctx.budgets.max_steps, plain=kept is content
        )
        if isinstance(proposal, Rejection) and secrets:
            proposal = attrs.evolve(proposal, detail=secrets.text(proposal.detail))
    elif call.status == "timeout":
        error = f"model call abandoned after {call.elapsed_ms} ms at the wall-clock deadline"
        proposal = Rejection(kind="empty_response", detail=error)
    elif isinstance(call.error, ModelCallFailed):  # a named fault: journal its raw body
        fault = call.error
        content, cost, reported = fault.raw, fault.cost, fault.usage
        if secrets and fault.raw_full is not None:  # redacted whole, then cut
            content = clip(secrets.text(fault.raw_full))
        kept = jsonable(content, secrets)
        ctx.add_cost(cost)
        error = secrets.text(f"model call failed: {fault.kind}: {fault.detail}")
        proposal = Rejection(kind=fault.rejection, detail=error)
    else:
        error = secrets.text(f"model call failed: {error_text(call.error)}")
        proposal = Rejection(kind="empty_response", detail=error)
    ctx.repair, repaired = "none", None
    if (
        ctx.repair_voter is not None
        and isinstance(proposal, Rejection)
        and proposal.kind == "schema_fail"
    ):
        proposal, repaired = yield from _repair_vote(ctx, content, proposal, step)
    ctx.proposal = proposal
    if isinstance(proposal, ToolCall):
        ctx.last_tool_call = proposal
        fingerprint = json.dumps([proposal.name, proposal.args], sort_keys=True, default=repr)
        ctx.repeats = ctx.repeats + 1 if fingerprint == ctx.last_call else 1
        ctx.last_call = fingerprint
    note = proposal_note(proposal)
    if note is not None:
        ctx.history.append(note)
    usage = call_usage(ctx.model, reported, call.elapsed_ms, secrets)
    facts = Facts(action="model", reply=kept, reply_cost=float(cost), error=error,
                  repaired=repaired, usage=usage)  # fmt: skip
    return _outcome_of(proposal), facts


def _repair_vote(
    ctx: RunContext, content: Any, rejected: Rejection, step: int
) -> Steps[tuple[Proposal, Any]]:
    """An invalid reply may get a repair vote only from a local lane (the halt policy's
    `schema_repair_vote`). A voter on
    any other lane is refused (the run hard-fails as schema_fail); a local one's rewrite is
    parsed like any reply, and counts only if it parses."""
    voter = ctx.repair_voter
    assert voter is not None  # noqa: S101 - only called with a voter
    lane = getattr(voter, "lane", None)
    if halt_lane_refusal(ctx.control, "schema_repair_vote", lane) is not None:
        ctx.repair = "refused"
        return rejected, None
    call = yield Call(voter, (content,), timeout_s=ctx.remaining_s(), name="repair",
                      isolation=getattr(voter, "isolation", "thread"))  # fmt: skip
    repaired = jsonable(call.value, ctx.secrets) if call.status == "ok" else None
    again = parse_reply(repaired, step=step, max_steps=ctx.budgets.max_steps)
    if call.status != "ok" or isinstance(again, Rejection):
        ctx.repair = "failed"
        return rejected, repaired
    ctx.repair = "repaired"
    return again, repaired


# --- what the model is told, and what the record lists (also rebuilt by resume) -----------


def proposal_note(proposal: Proposal) -> dict[str, Any] | None:
    """The history note a parsed reply leaves for the model's next prompt: a tool call is the
    assistant's turn (the protocol pairs each tool result with it)."""
    if isinstance(proposal, ToolCall):
        call = {"name": proposal.name, "args": dict(proposal.args)}
        return {"role": "assistant", "content": {"tool_call": call}}
    if isinstance(proposal, Rejection):
        return {"role": "runtime", "content": f"reply rejected: {proposal.detail}"}
    if isinstance(proposal, FinalAnswer):
        return {
            "role": "runtime",
            "content": "a final answer counts only if what receipted tool results returned"
            " backs every value it states, and only once every call with a side effect has"
            " complete receipts",
        }
    return None


def failure_note(outcome: ToolOutcome) -> dict[str, Any] | None:
    """The history note of a tool call that did not return."""
    if outcome.status == "returned":
        return None
    return {"role": "tool", "name": outcome.name, "status": outcome.status, "error": outcome.error}


def receipts_note(outcome: ToolOutcome) -> dict[str, Any]:
    """The history note of a returned call's observation and receipts."""
    return {
        "role": "tool",
        "name": outcome.name,
        "observation": outcome.observation,
        "receipts": serde.unstructure(outcome.receipts),
        "receipts_complete": receipts_complete(outcome.receipts),
    }


def call_entry(step: int, outcome: ToolOutcome) -> ToolCallEntry:
    """One tool call as the halt record lists it."""
    return ToolCallEntry(
        step=step,
        name=outcome.name,
        args=dict(outcome.args),
        status=outcome.status,
        receipts=outcome.receipts,
        error=outcome.error,
        outcome_unknown=outcome.outcome_unknown,
        duration_ms=outcome.duration_ms,
        side_effect=outcome.side_effect,
    )


def _record_call(ctx: RunContext, outcome: ToolOutcome) -> ToolOutcome:
    """Make `outcome` the run's last tool outcome and count it: meters, cost, the record."""
    ctx.tool = outcome
    ctx.add_cost(outcome.cost)
    ctx.count_call(call_entry(ctx.steps_used, outcome))
    ctx.unreceipted, ctx.unreceipted_omitted = settle(
        ctx.unreceipted,
        ctx.unreceipted_omitted,
        ctx.steps_used,
        outcome,
        idempotent=outcome.name in ctx.idempotent,
    )
    ctx.effects, ctx.effects_omitted = record_effect(
        ctx.effects, ctx.effects_omitted, ctx.steps_used, outcome
    )
    return outcome


def _side_effect_call(
    ctx: RunContext,
    name: str,
    args: dict[str, Any],
    call: Callable[[float], Call],
    side_effect: bool = True,
) -> Steps[CallResult]:
    """Run a tool or user action under its time cap (and the wall clock). If a signal cuts
    it short, the call is still recorded — as interrupted, its side effect unknown (a signal
    that came before the call began leaves no call to record)."""
    request = call(min(ctx.budgets.tool_timeout_ms / 1000, ctx.remaining_s()))
    started = time.monotonic()
    try:
        return (yield request)
    except Interrupted as exc:
        if request.begun is None:
            raise
        _record_call(
            ctx,
            ToolOutcome(
                name=name,
                args=args,
                status="interrupted",
                outcome_unknown=True,
                side_effect=side_effect,
                duration_ms=int((time.monotonic() - started) * 1000),
                error=f"interrupted by signal {exc.signum} while running;"
                " its side effect is unknown",
            ),
        )
        raise


def _run_tool(ctx: RunContext) -> Steps[tuple[str, Facts]]:
    proposal = ctx.proposal
    if not isinstance(proposal, ToolCall) or ctx.tools.get(proposal.name) is None:
        name = proposal.name if isinstance(proposal, ToolCall) else "?"
        ctx.tool = ToolOutcome(
            name=name,
            args={},
            status="failed",
            error=f"no registered tool {name!r} to run",
            side_effect=False,
        )
        return "tool_failed", Facts(action="tool", tool=ctx.tool, error=ctx.tool.error)
    tool = ctx.tools.get(proposal.name)
    assert tool is not None  # noqa: S101 - checked above
    if ctx.rules >= CONTRACT_SINCE:  # also where no decision led here (a resumed run)
        refused = tool_refusal(ctx.snapshot("", None, "tool"))
        if refused is not None:
            raise ContractRefused(refused.why, reason=refused.reason.value)
    if tool.privileged:
        assert_local_halt(ctx.control, "halt", ctx.halt_lane)
    ctx.approved = None  # a person's approval lets exactly one call run: this one
    args = dict(proposal.args)
    try:
        kwargs = tool_arguments(tool, args)  # as the parameters' types decode them
    except ArgumentsRefused as refused:  # never called (no call recorded): the model may retry
        outcome = ctx.tool = ToolOutcome(
            name=tool.name, args=args, status="failed", retryable=True, side_effect=False,
            error=f"arguments refused before the call: {refused}; {tool.name} was not called",
        )  # fmt: skip
    else:
        call = yield from _side_effect_call(
            ctx,
            tool.name,
            args,
            lambda timeout_s: Call(
                tool.fn,
                kwargs=kwargs,
                timeout_s=timeout_s,
                isolation=tool.isolation,
                name=f"tool:{tool.name}",
            ),
            tool.side_effect,
        )
        made = outcome_from_call(
            tool.name, args, call, side_effect=tool.side_effect, secrets=ctx.secrets
        )
        outcome = _record_call(ctx, made)
    trigger = {"returned": "tool_returned", "failed": "tool_failed", "timed_out": "tool_timed_out"}[
        outcome.status
    ]
    note = failure_note(outcome)
    if note is not None:
        ctx.history.append(note)
    return trigger, Facts(action="tool", tool=outcome, error=outcome.error)


def _collect_receipts(ctx: RunContext) -> tuple[str, Facts]:
    outcome = ctx.tool
    if outcome is not None and outcome.status == "returned":
        complete = receipts_complete(outcome.receipts)
        ctx.evidence = ctx.evidence or complete
        if complete:
            ctx.receipted = add_receipted(ctx.receipted, ctx.steps_used, outcome)
        ctx.history.append(receipts_note(outcome))
    return "collected", Facts(action="receipts")


def _user_action(ctx: RunContext, state: str, ref: str) -> Steps[tuple[str, Facts]]:
    fn = resolve_callable(ref)
    snapshot = ctx.snapshot(state=state, outcome=None, next_action=ref)
    name = f"action:{ref}"
    call = yield from _side_effect_call(
        ctx, ref, {}, lambda timeout_s: Call(fn, (snapshot,), timeout_s=timeout_s, name=name)
    )
    call = _as_declared(call, ref, ctx.spec.state(state).outcomes)
    if call.status == "ok" and isinstance(call.value, ActionResult):
        result = call.value.result or ToolResult()
        outcome = returned(ref, {}, result, call.elapsed_ms, ctx.secrets)
        return call.value.outcome, Facts(action=ref, tool=_record_call(ctx, outcome))
    if call.status == "ok":
        call = CallResult(
            status="error",
            elapsed_ms=call.elapsed_ms,
            error=TypeError(f"a user action returns ActionResult, got {type(call.value).__name__}"),
        )
    outcome = _record_call(ctx, outcome_from_call(ref, {}, call, secrets=ctx.secrets))
    trigger = "timed_out" if call.status == "timeout" else "failed"
    return trigger, Facts(action=ref, tool=outcome, error=outcome.error)


def _as_declared(call: CallResult, ref: str, declared: tuple[str, ...] | None) -> CallResult:
    """A user action's call, its outcome held to the state's declared `outcomes`: one it
    did not declare is a failure (the declaration's promise broken), not a trigger that no
    edge may handle."""
    value = call.value
    if call.status != "ok" or not isinstance(value, ActionResult) or declared is None:
        return call
    if value.outcome in declared:
        return call
    return CallResult(
        status="error",
        elapsed_ms=call.elapsed_ms,
        error=ValueError(
            f"user action {ref} returned outcome {value.outcome!r}, not one of its declared"
            f" outcomes ({', '.join(declared)})"
        ),
    )


def ask_judge(ctx: RunContext, snap: Snapshot) -> Steps[Snapshot]:
    """The snapshot with the judge's vote on a possible success (a paid judge may give
    a second opinion, but never moves halt alone; two free opinions are zero votes).
    A judge that fails or times out vetoes: no success on a missing opinion."""
    judge = ctx.judge
    if judge is None:
        return snap
    lane = getattr(judge, "lane", None)
    if lane is None or lane.tier == "free" or lane.kind == "free_server":
        return attrs.evolve(snap, judge="ignored")
    call = yield Call(judge, (snap,), timeout_s=ctx.remaining_s(), name="judge",
                      isolation=getattr(judge, "isolation", "thread"))  # fmt: skip
    agrees = call.status == "ok" and call.value is True
    return attrs.evolve(snap, judge="agree" if agrees else "veto")


def success_possible(spec: MachineSpec, state: str, outcome: str, snap: Snapshot) -> bool:
    """Some edge into `done` for this outcome passes every guard but the judge's: only then is
    the judge asked (a second opinion is not paid for on a run that cannot succeed yet)."""
    return any(
        t.dest == DONE
        and all(resolve_guard(ref)(snap) for ref in t.guards if ref != "judge_agrees")
        for t in spec.candidates(state, outcome)
    )
