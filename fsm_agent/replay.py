"""Replay: prove a halt from the journal alone — no model, no tools, no network, no clock.

Every decision of a run is re-made with the current code on the snapshot it was journaled
with: the reply is parsed again, every guard is evaluated again, the budget checks are
run again, and the recomputed transition, guard results and halt reason are compared with
the recorded ones. The first difference is a divergence (as Temporal's replayer flags
non-determinism): a guard change that would have rewritten history shows up here.

A counterfactual replay does the same under other budgets or another declaration. The
recorded facts (replies, tool outcomes, clock readings) stay what they were; where the
alternative history leaves the recorded path, replay says so instead of inventing facts.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from fsm_agent.budgets import Meters, make_budgets, tripped_meter
from fsm_agent.errors import InvalidInputError
from fsm_agent.halt import IMPOSED, HaltReason
from fsm_agent.journal import Event, GuardResult, RunRow
from fsm_agent.lanes import CONTROL_KEYS, halt_lane_refusal
from fsm_agent.machine import CompiledMachine, Decision, compile_machine
from fsm_agent.proposals import Proposal, Rejection, parse_reply
from fsm_agent.receipts import Receipt
from fsm_agent.snapshot import SUCCESS_RULES, Snapshot
from fsm_agent.spec import MachineSpec, parse_machine

Verdict = Literal["match", "diverged", "external", "halted_earlier", "needs_facts"]


@attrs.frozen
class GuardCheck:
    """One guard of one candidate transition: recorded vs recomputed (None: not evaluated)."""

    transition: int
    guard: str
    recorded: bool | None
    recomputed: bool | None


@attrs.frozen
class StepReport:
    """One journaled transition, re-decided."""

    seq: int
    step: int
    max_steps: int
    source: str | None
    dest: str
    trigger: str | None
    verdict: Verdict
    recorded_halt: HaltReason | None = None
    recomputed_dest: str | None = None
    recomputed_halt: HaltReason | None = None
    guards: tuple[GuardCheck, ...] = ()
    meters: Meters | None = None
    reply: Any = None
    receipts: tuple[Receipt, ...] = ()
    detail: str | None = None
    #: what the journal noted beside the transition (a refused or grounded answer, an act)
    note: str | None = None


@attrs.frozen
class ReplayReport:
    """The whole replay: every step, and whether the recorded halt is proven."""

    run_id: str
    machine: str
    machine_sha256: str
    counterfactual: bool
    steps: tuple[StepReport, ...]
    recorded_halt: HaltReason | None
    recomputed_halt: HaltReason | None
    ok: bool
    summary: str
    #: the success rules the run was recorded, and so re-decided, under (see SUCCESS_RULES)
    rules: int = SUCCESS_RULES


def _guard_checks(
    recorded: Iterable[GuardResult], recomputed: Iterable[GuardResult]
) -> tuple[GuardCheck, ...]:
    rec = {(g.transition, g.guard): g.result for g in recorded}
    now = {(g.transition, g.guard): g.result for g in recomputed}
    keys = list(dict.fromkeys([*rec, *now]))
    return tuple(GuardCheck(t, name, rec.get((t, name)), now.get((t, name))) for t, name in keys)


def _same_proposal(a: Proposal | None, b: Proposal | None) -> bool:
    """Equal proposals; a rejection's wording may change between versions, its kind may not."""
    if isinstance(a, Rejection) and isinstance(b, Rejection):
        return a.kind == b.kind
    return a == b


class _Replayer:
    def __init__(self, compiled: CompiledMachine, overrides: Mapping[str, Any]) -> None:
        self.compiled = compiled
        self.spec = compiled.spec
        #: counterfactual snapshot fields (budgets, thrash limit, allow-list); empty as recorded
        self.overrides = overrides

    def snapshot(self, event: Event) -> Snapshot:
        snap = event.snapshot
        if not self.overrides:
            return snap
        changes = dict(self.overrides)
        if "allowlist" in changes:  # only tools the run could call: the recorded allow-list
            changes["allowlist"] = tuple(n for n in changes["allowlist"] if n in snap.allowlist)
        return attrs.evolve(snap, **changes)

    def action(self, state: str) -> str | None:
        return self.spec.state(state).action

    def after(self, snap: Snapshot, dest: str, retry: bool) -> Snapshot:
        meters = snap.meters
        if retry:
            meters = attrs.evolve(meters, retries_used=meters.retries_used + 1)
        return attrs.evolve(
            snap, state=dest, outcome=None, next_action=self.action(dest), meters=meters
        )

    def reparse(self, event: Event, snap: Snapshot) -> str | None:
        """Parse the recorded reply again; a different proposal is a divergence."""
        facts = event.facts
        if facts is None or facts.action != "model" or facts.error is not None:
            return None
        reply = facts.repaired if event.snapshot.repair == "repaired" else facts.reply
        again = parse_reply(reply, step=snap.meters.steps_used, max_steps=snap.budgets.max_steps)
        if not _same_proposal(again, event.snapshot.proposal):
            recorded = event.snapshot.proposal
            return f"the reply parses differently now: recorded {recorded!r}, now {again!r}"
        return None


def _step_base(event: Event, snap: Snapshot) -> dict[str, Any]:
    facts = event.facts
    tool = facts.tool if facts is not None else None
    return {
        "seq": event.seq,
        "step": snap.meters.steps_used,
        "max_steps": snap.budgets.max_steps,
        "source": event.source,
        "dest": event.dest,
        "trigger": event.trigger,
        "recorded_halt": event.halt,
        "meters": snap.meters,
        "reply": facts.reply if facts is not None and facts.action == "model" else None,
        "receipts": tool.receipts if tool is not None else (),
        "note": event.note,
    }


def _judge(
    event: Event,
    snap: Snapshot,
    decision: Decision,
    check: tuple[Decision, HaltReason | None] | None,
    expected_halt: HaltReason | None,
) -> StepReport:
    """Compare one recomputed decision, and the budget check on entering its dest (with the
    reason it would trip), with what the journal recorded."""
    base = _step_base(event, snap)
    chosen = decision.transition
    guards = _guard_checks(event.guards, decision.guards)
    if chosen is None:
        return StepReport(
            **base,
            verdict="needs_facts" if event.halt else "diverged",
            guards=guards,
            detail=f"no transition on {event.trigger!r} passes its guards now",
        )
    halt = expected_halt if chosen.halt is None else chosen.halt
    if chosen.dest != event.dest or halt != event.halt or chosen.retry != event.retry:
        verdict: Verdict = "diverged"
        if halt is not None and event.halt is None:
            verdict = "halted_earlier"
        elif halt is None and event.halt is not None:
            verdict = "needs_facts"
        return StepReport(
            **base,
            verdict=verdict,
            guards=guards,
            recomputed_dest=chosen.dest,
            recomputed_halt=halt,
            detail=f"now goes to {chosen.dest!r}"
            + (f" halting {halt.value!r}" if halt else "")
            + f"; recorded {event.dest!r}"
            + (f" halting {event.halt.value!r}" if event.halt else ""),
        )
    if any(g.recorded != g.recomputed for g in guards):
        return StepReport(
            **base,
            verdict="diverged",
            guards=guards,
            recomputed_dest=chosen.dest,
            recomputed_halt=halt,
            detail="guard results differ",
        )
    if check is not None and check[0].guards != event.check:
        tripped = check[0].transition
        fired = tripped is not None
        return StepReport(
            **base,
            verdict="halted_earlier" if fired else "needs_facts",
            guards=guards + _guard_checks(event.check, check[0].guards),
            recomputed_dest=tripped.dest if tripped is not None else chosen.dest,
            recomputed_halt=check[1] if fired else None,
            detail=f"the budget check on entering {chosen.dest!r} now "
            + (f"trips ({check[1]})" if fired else "passes")
            + " (recorded the opposite)",
        )
    return StepReport(
        **base, verdict="match", guards=guards, recomputed_dest=chosen.dest, recomputed_halt=halt
    )


def _replay_event(r: _Replayer, event: Event) -> StepReport:
    snap = r.snapshot(event)
    meter = tripped_meter(snap.budgets, snap.meters, next_action=snap.next_action)
    if event.kind == "started":
        first = r.compiled.check_budget(event.dest, snap)
        verdict: Verdict = "match" if first.guards == event.check else "diverged"
        return StepReport(
            **_step_base(event, snap),
            verdict=verdict,
            guards=_guard_checks(event.check, first.guards),
            detail=None if verdict == "match" else "the start-of-run budget check differs",
        )
    if event.kind in ("operator", "resumed"):  # a person's act, a take-over: recorded facts
        return StepReport(**_step_base(event, snap), verdict="external", detail=event.note)
    assert event.source is not None  # noqa: S101 - only the started event has no source
    imposed = event.halt in IMPOSED and not r.spec.candidates(event.source, event.trigger or "")
    if imposed:  # a signal, an error, a routing freeze: facts, not decisions to re-make
        return StepReport(
            **_step_base(event, snap),
            verdict="external",
            recomputed_halt=event.halt,
            detail=f"imposed from outside the machine: {event.note}",
        )
    if event.halt is HaltReason.HALT_PATH_REFUSED and event.trigger == "refused":
        refused = any(halt_lane_refusal(snap.control, k, snap.halt_lane) for k in CONTROL_KEYS)
        return StepReport(
            **_step_base(event, snap),
            verdict="match" if refused else "diverged",
            recomputed_halt=HaltReason.HALT_PATH_REFUSED if refused else None,
            detail=None if refused else "the halt lane is accepted now",
        )
    if event.trigger == "budget":
        return _judge(event, snap, r.compiled.check_budget(event.source, snap), None, meter)
    budget = r.compiled.check_budget(event.source, snap)  # after the action: time and money
    if budget.transition is not None:
        return StepReport(
            **_step_base(event, snap),
            verdict="halted_earlier",
            recomputed_dest=budget.transition.dest,
            recomputed_halt=meter,
            guards=_guard_checks((), budget.guards),
            detail=f"the {meter.value if meter else 'budget'} meter trips first",
        )
    if (mismatch := r.reparse(event, snap)) is not None:
        return StepReport(**_step_base(event, snap), verdict="diverged", detail=mismatch)
    decision = r.compiled.decide(event.source, event.trigger or "", snap)
    if event.halt is HaltReason.NO_TRANSITION:
        ok = decision.transition is None
        return StepReport(
            **_step_base(event, snap),
            verdict="match" if ok else "diverged",
            guards=_guard_checks(event.guards, decision.guards),
            recomputed_halt=HaltReason.NO_TRANSITION if ok else None,
            detail=None if ok else "a transition passes its guards now",
        )
    chosen = decision.transition
    check: tuple[Decision, HaltReason | None] | None = None
    if chosen is not None and not r.spec.state(chosen.dest).terminal:
        after = r.after(snap, chosen.dest, chosen.retry)
        reason = tripped_meter(after.budgets, after.meters, next_action=after.next_action)
        check = (r.compiled.check_budget(chosen.dest, after), reason)
    return _judge(event, snap, decision, check, None)


def replay_events(
    run: RunRow,
    events: Sequence[Event],
    *,
    machine: MachineSpec | None = None,
    budgets: Mapping[str, int | float | None] | None = None,
) -> ReplayReport:
    """Re-decide every journaled transition of `run` and compare; see the module docstring.

    `machine` (another declaration: its guards, edges, thrash limit and allow-list) or
    `budgets` (overrides) make it a counterfactual.
    """
    spec = machine or parse_machine(run.machine_text, source=f"journal:{run.run_id}")
    overrides: dict[str, Any] = {}
    if budgets and any(v is not None for v in budgets.values()):
        overrides["budgets"] = make_budgets(attrs.asdict(run.budgets), budgets)
    if machine is not None:
        overrides["thrash_limit"] = machine.thrash_limit
        if machine.tools is not None:
            overrides["allowlist"] = machine.tools
    counterfactual = bool(overrides) or machine is not None
    r = _Replayer(compile_machine(spec), overrides)
    steps: list[StepReport] = []
    for event in events:
        report = _replay_event(r, event)
        if not counterfactual and report.verdict in ("halted_earlier", "needs_facts"):
            report = attrs.evolve(report, verdict="diverged")  # as recorded, any change is one
        steps.append(report)
        if report.verdict in ("diverged", "halted_earlier", "needs_facts"):
            break
    rules = events[0].snapshot.rules if events else SUCCESS_RULES
    return _conclude(run, spec, steps, counterfactual, rules)


def _conclude(
    run: RunRow, spec: MachineSpec, steps: list[StepReport], counterfactual: bool, rules: int
) -> ReplayReport:
    last = steps[-1] if steps else None
    recorded = run.halt_reason
    recomputed = last.recomputed_halt if last is not None else None
    ok = (
        last is not None
        and last.verdict in ("match", "external")
        and recorded is not None
        and recomputed == recorded
    )
    summary = _summary(run, last, len(steps), ok)
    if rules < SUCCESS_RULES:
        summary += (
            f" under success rules {rules}, the rules it was recorded with (before side"
            " effects needed receipts and answers value-level grounding): not re-judged"
        )
    return ReplayReport(
        run_id=run.run_id, machine=spec.name, machine_sha256=spec.sha256,
        counterfactual=counterfactual, steps=tuple(steps), recorded_halt=recorded,
        recomputed_halt=recomputed, ok=ok, summary=summary, rules=rules,
    )  # fmt: skip


def _summary(run: RunRow, last: StepReport | None, n: int, ok: bool) -> str:
    if last is None:
        return "the journal holds no events for this run"
    where = f"seq {last.seq} (step {last.step}/{last.max_steps}, {last.source} → {last.dest})"
    if ok:
        return f"replay matches: {n} transitions re-decided, halt {run.halt_reason} proven"
    if last.verdict == "halted_earlier":
        return f"would have halted {last.recomputed_halt} at {where}: {last.detail}"
    if last.verdict == "diverged":
        return f"diverges at {where}: {last.detail}"
    if last.verdict == "needs_facts":
        return (
            f"needs facts the journal does not hold, at {where}: {last.detail}; the run"
            f" would go on past the recorded halt, and step {last.step + 1}'s model reply"
            " was never recorded"
        )
    if run.halt_reason is None:
        return f"every recorded decision matches, but the run never halted (status {run.status})"
    return f"every decision matches, but the recorded halt {run.halt_reason} was not reached"


def load_run(path: str | os.PathLike[str], run_id: str | None = None) -> tuple[RunRow, list[Event]]:
    """A run and its events from a run file (`fsm-agent export`) or, by id, a journal (a
    SQLite file or a postgresql:// DSN)."""
    from stores import is_dsn, open_store, redact_dsn

    if not is_dsn(path):
        location = Path(path)
        if not location.exists():
            raise InvalidInputError(f"no such run file or journal: {location}")
        if location.suffix == ".json":
            from fsm_agent.runfile import read_run_file

            run_file = read_run_file(location)
            if run_id is not None and run_id != run_file.run.run_id:
                raise InvalidInputError(f"{location} holds run {run_file.run.run_id}, not {run_id}")
            return run_file.run, list(run_file.events)
    if run_id is None:
        raise InvalidInputError(f"{redact_dsn(str(path))} is a journal: say which run to replay")
    store = open_store(path)
    try:
        return store.get_run(run_id), store.events(run_id)
    finally:
        store.close()
