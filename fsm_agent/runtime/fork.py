"""Forks: a new run that takes a recorded run's facts up to one of its events as its own
past and goes on live from there (`fsm-agent fork RUN --at SEQ`) — under the same
declaration or another, with another model or tools, with raised budgets — making none of
the calls before that event again.

A fork is a run of its own, chained under its own run id: the parent's events 0..SEQ,
copied with their snapshots and facts as recorded, then a `forked` event holding the fork's
`Lineage` in the chain (the parent, SEQ, the parent's event hash there, both declarations'
sha256, the parent's declaration text when it differs, and what else changed). All of it is
written in one transaction as a run whose process is gone; this process then takes it over
exactly as `resume` takes an interrupted run (`load_resumable`, `restore_context`,
`claim_run`, `take_over`), so a fork stopped at any moment is resumed like any other run,
and `verify` and `replay` read it on its own (replay re-decides the copied events under the
declaration that decided them: `fsm_agent.review.fork_replay`).

Refused with nothing written (`InvalidInputError`): a parent whose chain does not verify;
SEQ out of range, or the parent's halt; SEQ inside a side-effecting call — the parent was
about to make a tool call or a user action at SEQ, and then either made it (the fork would
make it twice) or holds no outcome of it (unknown) — unless the call may be made again (a
read, or an idempotent tool); a declaration without a state that matches the parent's at
SEQ (same name and action, not final, an edge out of it); a budget that would be lowered.
Budgets are the parent's caps at SEQ (an operator's raises included) with what `budgets`
raises, and its meters at SEQ carry on (steps, tool calls, retries, cost, the wall clock).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from fsm_agent.adapters.models import ModelAdapter
from fsm_agent.declaration.load import load_machine, parse_machine
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.errors import InvalidInputError
from fsm_agent.journal import serde
from fsm_agent.journal.chain import verify_chain
from fsm_agent.journal.chain_hash import mode_for
from fsm_agent.journal.chain_waits import resealed
from fsm_agent.journal.store import Event, Facts, RunRow, Store
from fsm_agent.outputs import check_run_outputs
from fsm_agent.run_ids import RunNotFound, check_run_id
from fsm_agent.runtime.actions import has_side_effect
from fsm_agent.runtime.budgets import Budgets, check_budget, tripped_meter
from fsm_agent.runtime.context import Clock, RunContext
from fsm_agent.runtime.contract import allow_list, may_reissue
from fsm_agent.runtime.fork_lineage import FORK_ACTION, BudgetRaise, Lineage, number, stretches
from fsm_agent.runtime.journaling import now_iso
from fsm_agent.runtime.proposals import ToolCall
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.runtime.resume import _own_witness, restore_context
from fsm_agent.runtime.tools import ToolRegistry, check_tools


def _refuse(parent: str, why: str) -> InvalidInputError:
    return InvalidInputError(f"run {parent} is not forked: {why}")


def verified_parent(store: Store, parent: str) -> tuple[RunRow, list[Event], list[str]]:
    """The parent's row, its events and their hashes (hex), once its chain verifies (as
    `resume` asks of a run: every event there is the one written)."""
    chained, links, head = store.chain(parent)
    report = verify_chain(
        chained, links, head, key=store.chain_key, witness=_own_witness(store, parent)
    )
    if not report.intact:
        first = report.findings[0] if report.findings else None
        why = f"seq {first.seq}: {first.detail}" if first else (report.notes or ["no head"])[0]
        raise _refuse(
            parent, f"its journal does not verify ({why}); see `fsm-agent verify {parent}`"
        )
    events = store.events(parent)[: len(links)]
    return store.get_run(parent), events, [x.hash or "" for x in links]


def matching_state(spec: MachineSpec, parent_spec: MachineSpec, state: str, at: int) -> str:
    """The fork's declaration's state `state` (the parent's at seq `at`); refused unless it
    is there, does what the parent's did, is not final and has an edge out of it."""
    where = f"declaration {spec.name} ({spec.sha256[:12]})"
    found = next((s for s in spec.states if s.name == state), None)
    if found is None:
        names = ", ".join(s.name for s in spec.states)
        raise InvalidInputError(
            f"the {where} has no state {state!r}, the parent's state at seq {at} (its states:"
            f" {names}): a fork goes on from the state the parent was in"
        )
    if found.terminal:
        raise InvalidInputError(
            f"{state!r} is final in the {where}: a fork there has nothing to do"
        )
    before = next((s.action for s in parent_spec.states if s.name == state), None)
    if found.action != before:
        raise InvalidInputError(
            f"state {state!r} does {found.action!r} in the {where}, but {before!r} in the parent's:"
            f" the facts recorded up to seq {at} were made for {before!r}"
        )
    if not any(t.source == state for t in spec.transitions):
        raise InvalidInputError(f"the {where} has no edge out of {state!r}, the state at seq {at}")
    return found.action or ""


def inside_call(ctx: RunContext, action: str, events: Sequence[Event], at: int) -> str | None:
    """Why going on from seq `at` would make a side-effecting call the parent was about to
    make there (and then made, or holds no outcome of) a second time (None: it would not)."""
    after = events[at + 1] if at + 1 < len(events) else None
    outcome = None if after is None or after.facts is None else after.facts
    if action == "tool":
        call = ctx.proposal
        if not isinstance(call, ToolCall):
            return None
        tool = ctx.tools.get(call.name)
        if tool is not None and may_reissue(
            side_effect=tool.side_effect, idempotent=tool.idempotent
        ):
            return None
        what = "is not declared idempotent" if tool is not None else "is not in the tools given"
        args = json.dumps(call.args, sort_keys=True, default=repr)
        if after is not None and outcome is not None and outcome.tool is not None:
            then = (
                f"the parent made that call (seq {after.seq}): the fork would make it again;"
                f" {call.name!r} {what}. Fork before the call was proposed, or at seq"
                f" {after.seq}, after its outcome"
            )
        else:
            then = (
                "the parent's journal holds no outcome of it: its side effect is unknown;"
                f" {call.name!r} {what}. Check it by hand, or fork before the call was proposed"
            )
        return (
            f"seq {at} is inside a side-effecting call: the run was about to call"
            f" {call.name}({args}), and {then}"
        )
    if has_side_effect(action):
        return (
            f"seq {at} is inside the user action {action!r} (a side effect): the fork would do"
            " it again; fork before or after it"
        )
    return None


def raised_caps(
    caps: Budgets, asked: Mapping[str, int | float | None] | None, at: int
) -> tuple[Budgets, tuple[BudgetRaise, ...]]:
    """The parent's caps at seq `at` with what `asked` raises; a lowering is refused."""
    changes: dict[str, Any] = {}
    raised = []
    for name, value in (asked or {}).items():
        if value is None:
            continue
        wanted, now = check_budget(name, value), getattr(caps, name)
        if wanted < now:
            raise InvalidInputError(
                f"{name} {value} would lower the parent's {name} ({number(now)} at seq {at}): a"
                " fork goes on with the parent's budgets and meters, and may only raise a cap"
            )
        if wanted > now:
            changes[name] = wanted
            raised.append(BudgetRaise(name, float(now), float(wanted)))
    return attrs.evolve(caps, **changes), tuple(raised)


def _allowlist(
    ctx: RunContext, spec: MachineSpec, tools: ToolRegistry, allow: Sequence[str] | None, new: bool
) -> tuple[str, ...] | None:
    """The fork's allow-list where it is not the parent's (None: the parent's, kept): made
    as `run` makes one when `allow` is given or another declaration lists its tools."""
    if allow is None and not (new and spec.tools is not None):
        return None
    names = allow_list(spec.tools, tools.names(), allow)
    check_tools(tools, names)
    if names == ctx.allowlist:
        return None
    ctx.allowlist = names
    return names


def plan_fork(
    store: Store,
    parent: str,
    at: int,
    fork_id: str,
    *,
    model: ModelAdapter,
    tools: ToolRegistry,
    machine: MachineSpec | None,
    budgets: Mapping[str, int | float | None] | None,
    allow: Sequence[str] | None,
    clock: Clock,
    model_label: str | None = None,
) -> tuple[RunRow, list[Event]]:
    """The fork's row and its events (the parent's 0..`at`, then the `forked` event), or
    the refusal (`InvalidInputError`, naming the parent); nothing is written."""
    row, events, hashes = verified_parent(store, parent)
    try:
        ctx, action, lineage = _fork_point(
            row, events, hashes, at, model=model, tools=tools, machine=machine,
            budgets=budgets, allow=allow, clock=clock, model_label=model_label,
        )  # fmt: skip
    except InvalidInputError as exc:
        raise _refuse(parent, str(exc)) from None
    snap = ctx.snapshot(lineage.state, None, action)
    forked = Event(
        run_id=fork_id, seq=at + 1, kind="forked", at_ms=snap.clock_ms, wall_time=now_iso(),
        source=lineage.state, dest=lineage.state, trigger=None, snapshot=snap,
        facts=Facts(action=FORK_ACTION, reply=serde.unstructure(lineage)),
        note=f"forked from run {parent} at seq {at} ({lineage.state})",
    )  # fmt: skip
    spec = ctx.spec
    fork = RunRow(
        run_id=fork_id, machine=spec.name, machine_sha256=spec.sha256, machine_text=spec.text,
        task=row.task, budgets=ctx.budgets, state=lineage.state, status="running",
        started_at=forked.wall_time, steps_used=snap.meters.steps_used,
        chain=mode_for(store.chain_key),
    )  # fmt: skip
    copied = [*(attrs.evolve(e, run_id=fork_id) for e in events[: at + 1]), forked]
    return fork, resealed(fork, copied, store.chain_key)  # a decision's seal, on this chain


def _fork_point(
    row: RunRow,
    events: Sequence[Event],
    hashes: Sequence[str],
    at: int,
    *,
    model: ModelAdapter,
    tools: ToolRegistry,
    machine: MachineSpec | None,
    budgets: Mapping[str, int | float | None] | None,
    allow: Sequence[str] | None,
    clock: Clock,
    model_label: str | None,
) -> tuple[RunContext, str, Lineage]:
    """The run's context as the fork goes on with it after seq `at`, the action it goes on
    with, and its lineage; or why it cannot (`InvalidInputError`)."""
    if isinstance(at, bool) or not isinstance(at, int) or not 0 <= at < len(events):
        raise InvalidInputError(f"seq {at} is out of range (its events are 0..{len(events) - 1})")
    event = events[at]
    if event.halt is not None:
        earlier = f" (0..{at - 1})" if at else ""
        raise InvalidInputError(f"seq {at} is its halt ({event.halt.value}); fork earlier{earlier}")
    decided = next(s for s in stretches(row, events) if s.start <= at < s.end)
    where = f"{row.machine} (journaled with run {row.run_id})"
    parent_spec = parse_machine(decided.text, source=where, resolve=machine is None)
    spec = machine or parent_spec
    action = matching_state(spec, parent_spec, event.dest, at)
    ctx = restore_context(spec, row, events[: at + 1], model=model, tools=tools, clock=clock,
                          repair=None, judge=None)  # fmt: skip
    ctx.budgets, raised = raised_caps(ctx.budgets, budgets, at)
    allowlist = _allowlist(ctx, spec, tools, allow, machine is not None)
    thrash = None
    if machine is not None and machine.thrash_limit != ctx.thrash_limit:
        ctx.thrash_limit = thrash = machine.thrash_limit
    why = inside_call(ctx, action, events, at) or _spent(ctx, action, at)
    if why is not None:
        raise InvalidInputError(why)
    lineage = Lineage(
        parent=row.run_id, at=at, parent_hash=hashes[at], parent_chain=row.chain,
        state=event.dest, parent_machine=parent_spec.name,
        parent_machine_sha256=parent_spec.sha256, machine=spec.name, machine_sha256=spec.sha256,
        parent_machine_text=None if spec.sha256 == parent_spec.sha256 else parent_spec.text,
        raised=raised, allowlist=allowlist, thrash_limit=thrash, model=model_label,
    )  # fmt: skip
    return ctx, action, lineage


def _spent(ctx: RunContext, action: str, at: int) -> str | None:
    """Why the parent's budgets at seq `at`, as the fork carries them, are already spent."""
    meters = ctx.meters
    reason = tripped_meter(ctx.budgets, meters, next_action=action)
    if reason is None:
        return None
    return (
        f"its budgets at seq {at} are spent ({reason.value}: {meters.steps_used} of"
        f" {ctx.budgets.max_steps} steps, {meters.elapsed_ms} of {ctx.budgets.wall_clock_ms} ms,"
        f" cost {meters.cost} of {ctx.budgets.max_cost}); a fork carries them on, never afresh:"
        " raise the cap that is spent (--max-steps, --wall-clock-ms, --max-cost)"
    )


def fork_run(
    parent_id: str,
    *,
    at: int,
    store: Store | str | os.PathLike[str],
    model: ModelAdapter,
    tools: ToolRegistry | None = None,
    machine: MachineSpec | str | None = None,
    budgets: Mapping[str, int | float | None] | None = None,
    allow: Sequence[str] | None = None,
    record_path: str | os.PathLike[str] | None = None,
    clock: Clock = time.monotonic,
    on_transition: Callable[[Event], None] | None = None,
    handle_signals: bool = True,
    run_id: str | None = None,
    secret_env: Sequence[str] = (),
    model_label: str | None = None,
) -> HaltRecord:
    """Fork run `parent_id` at its event `at`: a new run (`run_id`, generated if None) that
    takes the parent's events 0..`at` as its own past and goes on live from there under
    `machine` (default: the parent's declaration), `model`, `tools` and `allow` (default:
    the parent's allow-list), its budgets the parent's at `at` raised by `budgets`; return
    its halt record. See the module docstring for what is refused (`InvalidInputError`,
    nothing written). `model_label` (the model spec, say) is kept in the lineage."""
    from fsm_agent.redaction import run_secrets
    from fsm_agent.runtime.worker import resume_run

    run_secrets(secret_env, model)  # an unset secret variable: refused before anything is written
    check_run_outputs(store, record_path, None)
    spec = load_machine(machine) if isinstance(machine, str) else machine
    fork_id = uuid.uuid4().hex[:12] if run_id is None else check_run_id(run_id, where="run_id")
    registry = tools if tools is not None else ToolRegistry()
    opened, owned = _opened(store)
    try:
        _refuse_taken(opened, fork_id)
        row, events = plan_fork(
            opened, parent_id, at, fork_id, model=model, tools=registry, machine=spec,
            budgets=budgets, allow=allow, clock=clock, model_label=model_label,
        )  # fmt: skip
        opened.import_run(row, events, None)  # one transaction: a run whose process is gone
        return resume_run(
            fork_id, model=model, tools=registry, store=opened, record_path=record_path,
            clock=clock, on_transition=on_transition, handle_signals=handle_signals,
            secret_env=secret_env,
        )  # fmt: skip
    finally:
        if owned:
            opened.close()


def _opened(store: Store | str | os.PathLike[str]) -> tuple[Store, bool]:
    """The journal, and whether it was opened here (a SQLite path or a postgresql:// DSN)."""
    if not isinstance(store, str | os.PathLike):
        return store, False
    from fsm_agent.stores import open_store

    return open_store(store), True


def _refuse_taken(store: Store, run_id: str) -> None:
    try:
        store.get_run(run_id)
    except RunNotFound:
        return
    raise InvalidInputError(f"run id {run_id} is already in the journal; a fork needs a new one")
