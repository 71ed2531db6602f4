"""A validated declaration compiled onto a `transitions.Machine`, and the decision function.

One `transitions.Machine` per declaration, shared by every run of it; auto transitions off;
guards resolved from our registry at load time and recorded as they are evaluated. Runs do
not register as models (no injected attributes, no list scans): each decision fires the
event on a small throwaway cursor object.
"""

from __future__ import annotations

import threading
from typing import Any

import attrs
from transitions import Machine

from fsm_agent.effects import RECEIPTS_GUARD
from fsm_agent.errors import FsmAgentError, MachineSpecError
from fsm_agent.guards import GUARD_SINCE, Guard, budget_tripped, resolve_guard
from fsm_agent.halt import HaltReason
from fsm_agent.interrupts import raised_by_user_code
from fsm_agent.journal import GuardResult
from fsm_agent.snapshot import Snapshot
from fsm_agent.spec import BUDGET_TRIGGER, MachineSpec, TransitionSpec


class GuardFailed(FsmAgentError):
    """A guard raised or returned a non-boolean; the run halts rather than guess."""

    def __init__(self, message: str, *, guard: str, transition: int) -> None:
        self.guard = guard
        self.transition = transition
        super().__init__(f"guard {guard!r} on transition {transition}: {message}")


@attrs.frozen
class Decision:
    """The transition chosen for a trigger (None when no candidate's guards all passed)."""

    transition: TransitionSpec | None
    guards: tuple[GuardResult, ...]


class _Cursor:
    """The model object a single decision runs on."""

    def __init__(self, state: str, snapshot: Snapshot) -> None:
        self.fsm_state = state
        self.snapshot = snapshot
        self.log: list[GuardResult] = []
        self.fired: int | None = None


class _GuardCall:
    def __init__(self, index: int, ref: str, fn: Guard) -> None:
        self.index, self.ref, self.fn = index, ref, fn
        #: a guard that came with newer success rules is not part of older runs' decisions
        self.since = GUARD_SINCE.get(ref, 0)

    def __call__(self, event_data: Any) -> bool:
        cursor: _Cursor = event_data.model
        if cursor.snapshot.rules < self.since:
            return True
        try:
            result = self.fn(cursor.snapshot)
        except BaseException as exc:  # sys.exit or KeyboardInterrupt in a guard too
            if not raised_by_user_code(exc):
                raise
            raise GuardFailed(
                f"raised {type(exc).__name__}: {exc}", guard=self.ref, transition=self.index
            ) from exc
        if not isinstance(result, bool):
            raise GuardFailed(
                f"returned {result!r}, not a bool", guard=self.ref, transition=self.index
            )
        cursor.log.append(GuardResult(transition=self.index, guard=self.ref, result=result))
        return result


class _Fired:
    def __init__(self, index: int) -> None:
        self.index = index

    def __call__(self, event_data: Any) -> None:
        event_data.model.fired = self.index


class CompiledMachine:
    """A declaration ready to decide transitions for any number of runs."""

    def __init__(self, spec: MachineSpec) -> None:
        for t in spec.transitions:  # a spec built by hand cannot skip the loader's rule
            if t.halt is HaltReason.COMPLETED and RECEIPTS_GUARD not in t.guards:
                raise MachineSpecError(
                    f"transition {t.index} halts 'completed' without the guard"
                    f" {RECEIPTS_GUARD!r}: no run may end done while a side-effecting call"
                    " lacks complete receipts (load declarations with load_machine)",
                    source=spec.source,
                    key=f"$.transitions[{t.index}].guards",
                )
        self.spec = spec
        self.machine = Machine(
            model=None,
            states=[s.name for s in spec.states],
            initial=spec.initial,
            auto_transitions=False,
            send_event=True,
            model_attribute="fsm_state",
            ignore_invalid_triggers=False,
        )
        self._budget_edges = {
            t.source: t for t in spec.transitions if t.implicit and t.trigger == BUDGET_TRIGGER
        }
        for t in spec.transitions:
            calls: list[Any] = [_GuardCall(t.index, ref, resolve_guard(ref)) for ref in t.guards]
            self.machine.add_transition(
                t.trigger, t.source, t.dest, conditions=calls, after=[_Fired(t.index)]
            )

    def decide(self, state: str, trigger: str, snapshot: Snapshot) -> Decision:
        """Try the candidates for `trigger` from `state` in declared order; first to pass wins."""
        event = self.machine.events.get(trigger)
        if event is None or state not in event.transitions:
            return Decision(transition=None, guards=())
        cursor = _Cursor(state, snapshot)
        event.trigger(cursor)
        chosen = None if cursor.fired is None else self.spec.transitions[cursor.fired]
        return Decision(transition=chosen, guards=tuple(cursor.log))

    def check_budget(self, state: str, snapshot: Snapshot) -> Decision:
        """The implicit budget transition out of `state`, decided on `snapshot`.

        It has one guard, `budget_tripped`; the common case (nothing tripped) is answered
        by that guard directly, and only a tripped budget is fired through the machine.
        """
        implicit = self._budget_edges[state]
        if not budget_tripped(snapshot):
            return Decision(
                transition=None,
                guards=(
                    GuardResult(transition=implicit.index, guard="budget_tripped", result=False),
                ),
            )
        return self.decide(state, BUDGET_TRIGGER, snapshot)


_CACHE: dict[tuple[str, str], CompiledMachine] = {}
_CACHE_LOCK = threading.Lock()


def compile_machine(spec: MachineSpec) -> CompiledMachine:
    """The shared compiled machine for a declaration (one per source and content hash)."""
    key = (spec.source, spec.sha256)
    with _CACHE_LOCK:
        compiled = _CACHE.get(key)
        if compiled is None:
            compiled = _CACHE[key] = CompiledMachine(spec)
        return compiled
