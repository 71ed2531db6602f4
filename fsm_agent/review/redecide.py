"""Re-deciding one journaled event: the reply parsed again, every guard evaluated again on
the journaled snapshot, the budget checks run again, and the result compared with what the
journal recorded — matched by transition identity (`fsm_agent.declaration.edges`), so a
counterfactual
declaration may add, remove or reorder edges. `fsm_agent.review.replay` walks a run with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from fsm_agent.declaration.edges import EdgeId, edge_ids, keyed
from fsm_agent.declaration.machine import CompiledMachine, Decision
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.halt import HANDOFF, IMPOSED, HaltReason, terminal_state
from fsm_agent.journal.store import Event, GuardResult
from fsm_agent.review.step_report import GuardCheck, StepReport, Verdict, matched_step, step_base
from fsm_agent.runtime.budgets import tripped_meter
from fsm_agent.runtime.contract import CONTRACT_SINCE, tool_refusal
from fsm_agent.runtime.contract import PREFIX as CONTRACT_PREFIX
from fsm_agent.runtime.decided import wait_over, waited_on
from fsm_agent.runtime.lanes import CONTROL_KEYS, halt_lane_refusal
from fsm_agent.runtime.proposals import Proposal, Rejection, ToolCall, parse_reply
from fsm_agent.runtime.snapshot import Snapshot, call_sha256


def _index(edge: EdgeId | int, ids: Mapping[EdgeId, int], fallback: Mapping[EdgeId, int]) -> int:
    if isinstance(edge, int):
        return edge
    return ids.get(edge, fallback.get(edge, -1))


def _same_proposal(a: Proposal | None, b: Proposal | None) -> bool:
    """Equal proposals; a rejection's wording may change between versions, its kind may not."""
    if isinstance(a, Rejection) and isinstance(b, Rejection):
        return a.kind == b.kind
    return a == b


@attrs.frozen
class Comparison:
    """Recorded guard results against recomputed ones: side by side (`checks`), whether
    they differ as `Replayer.differs` judges, and whether both trip alike (a budget check's
    `budget_tripped` results). It holds the values it compares, so while it is cached by
    their identities no other value can have those ids."""

    recorded: tuple[GuardResult, ...]
    recomputed: tuple[GuardResult, ...]
    checks: tuple[GuardCheck, ...]
    differs: bool
    same_trip: bool


class Replayer:
    def __init__(
        self, compiled: CompiledMachine, overrides: Mapping[str, Any], recorded: MachineSpec
    ) -> None:
        self.compiled = compiled
        self.spec = compiled.spec
        #: counterfactual snapshot fields (budgets, thrash limit, allow-list); empty as recorded
        self.overrides = overrides
        self.counterfactual = bool(overrides) or recorded.sha256 != self.spec.sha256
        #: transition identities: the journal's guard results name the recorded declaration's
        #: indexes, the recomputed ones this declaration's
        self.recorded_ids = edge_ids(recorded)
        self.ids = edge_ids(self.spec)
        self.index_of = {v: k for k, v in self.ids.items()}
        self.recorded_index_of = {v: k for k, v in self.recorded_ids.items()}
        self.states = {s.name: s for s in self.spec.states}
        #: comparisons already made, by (recorded, recomputed) results: a loop re-decides
        #: the same guards to the same results again and again
        self._checks: dict[tuple[tuple[GuardResult, ...], ...], Comparison] = {}
        #: the same, found by identity first (see `compare`)
        self._seen: dict[tuple[int, tuple[int, ...]], Comparison] = {}

    def guard_checks(
        self, recorded: Iterable[GuardResult], recomputed: Iterable[GuardResult]
    ) -> tuple[GuardCheck, ...]:
        """Recorded and recomputed guard results side by side, matched by transition
        identity (the same edge in both declarations), shown by this declaration's index."""
        return self.compare(recorded, recomputed).checks

    def compare(
        self, recorded: Iterable[GuardResult], recomputed: Iterable[GuardResult]
    ) -> Comparison:
        """The comparison of recorded and recomputed guard results (see `Comparison`).

        Found by identity first (decoded guard columns are shared per text, and a decision
        logs the compiled machine's own result values), then by value."""
        if type(recorded) is not tuple:
            recorded = tuple(recorded)
        if type(recomputed) is not tuple:
            recomputed = tuple(recomputed)
        ids = (id(recorded), tuple(map(id, recomputed)))
        found = self._seen.get(ids)
        if found is not None:
            return found
        key = (recorded, recomputed)
        found = self._checks.get(key)
        if found is None:
            found = self._compare(recorded, recomputed)
            if len(self._checks) >= 4096:
                self._checks.clear()
            self._checks[key] = found
        elif found.recorded is not recorded or found.recomputed is not recomputed:
            found = attrs.evolve(found, recorded=recorded, recomputed=recomputed)
        if len(self._seen) >= 4096:
            self._seen.clear()
        self._seen[ids] = found
        return found

    def _compare(
        self, recorded: tuple[GuardResult, ...], recomputed: tuple[GuardResult, ...]
    ) -> Comparison:
        checks = self._guard_checks(recorded, recomputed)
        same_trip = _tripped(recorded) == _tripped(recomputed)
        return Comparison(recorded, recomputed, checks, self.differs(checks), same_trip)

    def _guard_checks(
        self, recorded: tuple[GuardResult, ...], recomputed: tuple[GuardResult, ...]
    ) -> tuple[GuardCheck, ...]:
        rec = keyed(recorded, self.recorded_ids)
        now = keyed(recomputed, self.ids)
        keys = list(dict.fromkeys([*rec, *now]))
        return tuple(
            GuardCheck(
                _index(e, self.index_of, self.recorded_index_of),
                name,
                rec.get((e, name)),
                now.get((e, name)),
            )
            for e, name in keys
        )

    def differs(self, checks: Iterable[GuardCheck]) -> bool:
        """Whether guard results differ. As recorded every guard must come out the same; a
        counterfactual compares decisions (where each one goes, what it halts), not guards:
        another declaration or budget may evaluate other guards on the way to the same edge."""
        return not self.counterfactual and any(g.recorded != g.recomputed for g in checks)

    def has_state(self, name: str) -> bool:
        return name in self.states

    def snapshot(self, event: Event) -> Snapshot:
        snap = event.snapshot
        if not self.overrides:
            return snap
        changes = dict(self.overrides)
        if "allowlist" in changes:  # only tools the run could call: the recorded allow-list
            changes["allowlist"] = tuple(n for n in changes["allowlist"] if n in snap.allowlist)
        return attrs.evolve(snap, **changes)

    def action(self, state: str) -> str | None:
        return self.states[state].action

    def entering(
        self, snap: Snapshot, dest: str, retry: bool
    ) -> tuple[Decision, HaltReason | None]:
        """The budget check on entering `dest` from `snap` (and the meter that trips it):
        on the snapshot `after` would build, built only when the budget trips."""
        meters = snap.meters
        if retry:
            meters = attrs.evolve(meters, retries_used=meters.retries_used + 1)
        reason = tripped_meter(snap.budgets, meters, next_action=self.action(dest))
        if reason is None:  # `budget_tripped` is exactly this test: nothing trips
            return self.compiled.untripped(dest), None
        return self.compiled.check_budget(dest, self.after(snap, dest, retry)), reason

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


def _tripped(results: Iterable[GuardResult]) -> bool:
    """Whether a budget check (its `budget_tripped` results) tripped."""
    return any(g.result for g in results)


def _judge(
    r: Replayer,
    event: Event,
    snap: Snapshot,
    decision: Decision,
    check: tuple[Decision, HaltReason | None] | None,
    expected_halt: HaltReason | None,
) -> StepReport:
    """Compare one recomputed decision, and the budget check on entering its dest (with the
    reason it would trip), with what the journal recorded."""
    chosen = decision.transition
    compared = r.compare(event.guards, decision.guards)
    guards = compared.checks
    if chosen is None:
        return StepReport(
            **step_base(event, snap),
            verdict="needs_facts" if event.halt else "diverged",
            guards=guards,
            detail=f"no transition on {event.trigger!r} passes its guards now",
        )
    halt = expected_halt if chosen.halt is None else chosen.halt
    if chosen.dest != event.dest or halt != event.halt or chosen.retry != event.retry:
        verdict: Verdict = "diverged"
        if halt is not None and event.halt is None:
            verdict = "halted_earlier"
        elif halt is None and (event.halt is not None or r.counterfactual):
            verdict = "needs_facts"  # it would go on where the journal has no facts
        detail = (
            f"now goes to {chosen.dest!r}"
            + (f" halting {halt.value!r}" if halt else "")
            + f"; recorded {event.dest!r}"
            + (f" halting {event.halt.value!r}" if event.halt else "")
        )
        if verdict == "needs_facts" and event.halt is None:
            detail += f" (what {chosen.dest!r} would have done next was never recorded)"
        return StepReport(
            **step_base(event, snap),
            verdict=verdict,
            guards=guards,
            recomputed_dest=chosen.dest,
            recomputed_halt=halt,
            detail=detail,
        )
    if compared.differs:
        return StepReport(
            **step_base(event, snap),
            verdict="diverged",
            guards=guards,
            recomputed_dest=chosen.dest,
            recomputed_halt=halt,
            detail="guard results differ",
        )
    entering = None if check is None else r.compare(event.check, check[0].guards)
    if check is not None and entering is not None and (entering.differs or not entering.same_trip):
        tripped = check[0].transition
        fired = tripped is not None
        return StepReport(
            **step_base(event, snap),
            verdict="halted_earlier" if fired else "needs_facts",
            guards=guards + entering.checks,
            recomputed_dest=tripped.dest if tripped is not None else chosen.dest,
            recomputed_halt=check[1] if fired else None,
            detail=f"the budget check on entering {chosen.dest!r} now "
            + (f"trips ({check[1]})" if fired else "passes")
            + " (recorded the opposite)",
        )
    return matched_step(event, snap, guards, chosen.dest, halt)


def _meter(snap: Snapshot) -> HaltReason | None:
    """The meter that trips on `snap` (what a budget halt out of its state is)."""
    return tripped_meter(snap.budgets, snap.meters, next_action=snap.next_action)


def redecide(r: Replayer, event: Event) -> StepReport:
    snap = r.snapshot(event)
    if event.kind == "started":
        if event.dest != r.spec.initial:
            return StepReport(
                **step_base(event, snap),
                verdict="diverged",
                detail=f"this declaration starts in {r.spec.initial!r}; the run started in"
                f" {event.dest!r}",
            )
        first = r.compiled.check_budget(event.dest, snap)
        compared = r.compare(event.check, first.guards)
        checks = compared.checks
        same = not compared.differs and compared.same_trip
        return StepReport(
            **step_base(event, snap),
            verdict="match" if same else "diverged",
            guards=checks,
            detail=None if same else "the start-of-run budget check differs",
        )
    if event.kind in ("operator", "resumed", "forked"):  # an act, a take-over, a fork: facts
        return StepReport(**step_base(event, snap), verdict="external", detail=event.note)
    assert event.source is not None  # noqa: S101 - only the started event has no source
    if not r.has_state(event.source):
        return StepReport(
            **step_base(event, snap),
            verdict="needs_facts",
            detail=f"the run was in state {event.source!r}, which this declaration does not have",
        )
    if event.kind == "decided":
        return _redecide_decision(r, event, snap)
    imposed = event.halt in IMPOSED and not r.spec.candidates(event.source, event.trigger or "")
    if imposed:  # a signal, an error, a routing freeze: facts, not decisions to re-make
        return StepReport(
            **step_base(event, snap),
            verdict="external",
            recomputed_halt=event.halt,
            detail=f"imposed from outside the machine: {event.note}",
        )
    if event.halt is HaltReason.HALT_PATH_REFUSED and event.trigger == "refused":
        refused = any(halt_lane_refusal(snap.control, k, snap.halt_lane) for k in CONTROL_KEYS)
        return StepReport(
            **step_base(event, snap),
            verdict="match" if refused else "diverged",
            recomputed_halt=HaltReason.HALT_PATH_REFUSED if refused else None,
            detail=None if refused else "the halt lane is accepted now",
        )
    if event.trigger == "refused" and event.halt is not None:  # refused at the tool itself
        again = tool_refusal(snap) if snap.rules >= CONTRACT_SINCE else None
        ok = again is not None and again.reason is event.halt
        return StepReport(
            **step_base(event, snap),
            verdict="match" if ok else "diverged",
            recomputed_halt=again.reason if again is not None else None,
            detail=None if ok else "the runtime's contract does not refuse this tool call now",
        )
    if event.trigger == "budget":
        budget = r.compiled.check_budget(event.source, snap)
        return _judge(r, event, snap, budget, None, _meter(snap))
    budget = r.compiled.check_budget(event.source, snap)  # after the action: time and money
    if budget.transition is not None:
        meter = _meter(snap)
        return StepReport(
            **step_base(event, snap),
            verdict="halted_earlier",
            recomputed_dest=budget.transition.dest,
            recomputed_halt=meter,
            guards=r.guard_checks((), budget.guards),
            detail=f"the {meter.value if meter else 'budget'} meter trips first",
        )
    if (mismatch := r.reparse(event, snap)) is not None:
        return StepReport(**step_base(event, snap), verdict="diverged", detail=mismatch)
    decision = r.compiled.decide(event.source, event.trigger or "", snap)
    if event.halt is HaltReason.NO_TRANSITION:
        ok = decision.transition is None
        return StepReport(
            **step_base(event, snap),
            verdict="match" if ok else "diverged",
            guards=r.guard_checks(event.guards, decision.guards),
            recomputed_halt=HaltReason.NO_TRANSITION if ok else None,
            detail=None if ok else "a transition passes its guards now",
        )
    if decision.refused is not None or _contract_logged(event.guards):
        return _judge_refusal(r, event, snap, decision)
    chosen = decision.transition
    check: tuple[Decision, HaltReason | None] | None = None
    if chosen is not None and not r.states[chosen.dest].terminal:
        check = r.entering(snap, chosen.dest, chosen.retry)
    return _judge(r, event, snap, decision, check, None)


def _redecide_decision(r: Replayer, event: Event, snap: Snapshot) -> StepReport:
    """A person's decision on a waiting run: the decision itself is a recorded fact, the
    edge it took is re-decided, an approval must be bound to the frozen call it let run,
    and an expiry must come after the wait's limit."""
    frozen, until = waited_on(event)
    if event.halt is HaltReason.WAIT_EXPIRED:
        late = wait_over(event.wall_time, until)
        return StepReport(
            **step_base(event, snap),
            verdict="external" if late else "diverged",
            recomputed_halt=event.halt if late else None,
            detail=event.note if late else "ended wait_expired before its wait limit",
        )
    p = snap.proposal
    if event.trigger == "approved" and (
        frozen is None
        or snap.approved != frozen
        or not isinstance(p, ToolCall)
        or call_sha256(p.name, dict(p.args)) != frozen
    ):
        return StepReport(
            **step_base(event, snap),
            verdict="diverged",
            detail="the approval is not bound to the call the run waited on",
        )
    decision = r.compiled.decide(HANDOFF, event.trigger or "", snap)
    if decision.refused is not None:
        return _judge_refusal(r, event, snap, decision)
    chosen = decision.transition
    check = None if chosen is None else r.entering(snap, chosen.dest, False)
    return _judge(r, event, snap, decision, check, None)


def _contract_logged(guards: tuple[GuardResult, ...]) -> bool:
    """Whether a recorded decision was refused by the runtime's contract."""
    return any(g.guard.startswith(CONTRACT_PREFIX) for g in guards)


def _judge_refusal(r: Replayer, event: Event, snap: Snapshot, decision: Decision) -> StepReport:
    """A decision the runtime's contract refused, now or as recorded, against the journal."""
    refused = decision.refused
    compared = r.compare(event.guards, decision.guards)
    if refused is None:
        return StepReport(
            **step_base(event, snap),
            verdict="diverged",
            guards=compared.checks,
            detail="the runtime's contract refused this step as recorded; it does not now",
        )
    dest = terminal_state(refused.reason)
    if event.halt is refused.reason and event.dest == dest and not compared.differs:
        return matched_step(event, snap, compared.checks, dest, refused.reason)
    return StepReport(
        **step_base(event, snap),
        verdict="halted_earlier" if event.halt is None else "diverged",
        guards=compared.checks,
        recomputed_dest=dest,
        recomputed_halt=refused.reason,
        detail=f"the runtime's contract refuses it now ({refused.rule}): {refused.why}",
    )
