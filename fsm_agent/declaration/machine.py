"""A validated declaration compiled into a decide table, and the decision function.

One compiled machine per declaration, shared by every run of it; guards resolved from our
registry at load time and recorded as they are evaluated. Decisions are made on a
precompiled table: (state, trigger) -> the candidate edges in declared order, each with its
guard calls, evaluated directly. A `transitions.Machine` (auto transitions off) is built
from the same declaration and kept as the reference: it validates the declaration, draws
it, and `decide_via_machine` fires its event on a throwaway cursor — the table gives the
same decision and the same guard log (a property test holds them to it).
"""

from __future__ import annotations

import threading
from typing import Any

import attrs
from transitions import Machine

from fsm_agent.declaration.spec import BUDGET_TRIGGER, MachineSpec, TransitionSpec
from fsm_agent.errors import FsmAgentError, MachineSpecError
from fsm_agent.halt import HaltReason
from fsm_agent.journal.store import GuardResult
from fsm_agent.runtime.contract import Refusal, refusal
from fsm_agent.runtime.effects import RECEIPTS_GUARD
from fsm_agent.runtime.guards import GUARD_SINCE, Guard, budget_tripped, resolve_guard
from fsm_agent.runtime.interrupts import raised_by_user_code
from fsm_agent.runtime.snapshot import Snapshot


class GuardFailed(FsmAgentError):
    """A guard raised or returned a non-boolean; the run halts rather than guess."""

    def __init__(self, message: str, *, guard: str, transition: int) -> None:
        self.guard = guard
        self.transition = transition
        super().__init__(f"guard {guard!r} on transition {transition}: {message}")


@attrs.frozen
class Decision:
    """The transition chosen for a trigger (None when no candidate's guards all passed), and
    the runtime's refusal of it (`fsm_agent.runtime.contract`): when `refused` is set, the
    run halts with its reason instead of taking the transition."""

    transition: TransitionSpec | None
    guards: tuple[GuardResult, ...]
    refused: Refusal | None = None


class _Cursor:
    """The model object a single decision runs on."""

    def __init__(self, state: str, snapshot: Snapshot) -> None:
        self.fsm_state = state
        self.snapshot = snapshot
        self.log: list[GuardResult] = []
        self.fired: int | None = None


class _GuardCall:
    """One guard of one edge: evaluated on a snapshot, its result logged."""

    def __init__(self, index: int, ref: str, fn: Guard) -> None:
        self.index, self.ref, self.fn = index, ref, fn
        #: a guard that came with newer success rules is not part of older runs' decisions
        self.since = GUARD_SINCE.get(ref, 0)
        #: its two possible log entries (immutable), by result
        self.results = (GuardResult(index, ref, False), GuardResult(index, ref, True))

    def evaluate(self, snapshot: Snapshot, log: list[GuardResult]) -> bool:
        """The guard's verdict on `snapshot` (logged in `log`); True without evaluating it
        for a run under older success rules than the guard's."""
        if snapshot.rules < self.since:
            return True
        try:
            result = self.fn(snapshot)
        except BaseException as exc:  # sys.exit or KeyboardInterrupt in a guard too
            if not raised_by_user_code(exc):
                raise
            raise GuardFailed(
                f"raised {type(exc).__name__}: {exc}", guard=self.ref, transition=self.index
            ) from exc
        if result is not True and result is not False:
            raise GuardFailed(
                f"returned {result!r}, not a bool", guard=self.ref, transition=self.index
            )
        log.append(self.results[result])
        return result

    def __call__(self, event_data: Any) -> bool:  # as a `transitions` condition
        cursor: _Cursor = event_data.model
        return self.evaluate(cursor.snapshot, cursor.log)


#: One candidate edge in the decide table: the transition and its guard calls, in order.
_Edge = tuple[TransitionSpec, tuple[_GuardCall, ...]]


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
        #: what `check_budget` answers when nothing tripped, per state (immutable)
        self._untripped = {
            state: Decision(None, (GuardResult(t.index, "budget_tripped", False),))
            for state, t in self._budget_edges.items()
        }
        table: dict[tuple[str, str], list[_Edge]] = {}
        for t in spec.transitions:
            calls = tuple(_GuardCall(t.index, ref, resolve_guard(ref)) for ref in t.guards)
            table.setdefault((t.source, t.trigger), []).append((t, calls))
            self.machine.add_transition(
                t.trigger, t.source, t.dest, conditions=list(calls), after=[_Fired(t.index)]
            )
        #: (state, trigger) -> candidate edges in declared order: the decide table
        self._table = {key: tuple(edges) for key, edges in table.items()}
        actions = {st.name: st.action for st in spec.states}
        #: edge index -> (halts completed, enters a state that runs the proposed tool): the
        #: edges the runtime's contract looks at
        self._contract = {
            t.index: (t.halt is HaltReason.COMPLETED, actions.get(t.dest) == "tool")
            for t in spec.transitions
            if t.halt is HaltReason.COMPLETED or actions.get(t.dest) == "tool"
        }

    def decide(self, state: str, trigger: str, snapshot: Snapshot) -> Decision:
        """Try the candidates for `trigger` from `state` in declared order; first to pass wins.

        Each edge's guards are evaluated in order and stop at the first False; every result
        evaluated is logged. The chosen edge is then held to the runtime's contract: a
        refusal is logged as the guard `runtime:<rule>` = False on that edge."""
        edges = self._table.get((state, trigger))
        if edges is None:
            return _NONE
        log: list[GuardResult] = []
        for transition, calls in edges:
            for call in calls:
                if not call.evaluate(snapshot, log):
                    break
            else:
                return self._held(transition, snapshot, log)
        return Decision(transition=None, guards=tuple(log))

    def decide_via_machine(self, state: str, trigger: str, snapshot: Snapshot) -> Decision:
        """`decide` by firing the event on the `transitions.Machine`: the reference the
        decide table is tested against."""
        event = self.machine.events.get(trigger)
        if event is None or state not in event.transitions:
            return Decision(transition=None, guards=())
        cursor = _Cursor(state, snapshot)
        event.trigger(cursor)
        if cursor.fired is None:
            return Decision(transition=None, guards=tuple(cursor.log))
        return self._held(self.spec.transitions[cursor.fired], snapshot, cursor.log)

    def _held(self, chosen: TransitionSpec, snapshot: Snapshot, log: list[GuardResult]) -> Decision:
        """The decision for `chosen`, held to the runtime's contract: a refusal is logged
        as `runtime:<rule>` = False on that edge."""
        looked = self._contract.get(chosen.index)
        if looked is not None:
            refused = refusal(snapshot, completes=looked[0], runs_tool=looked[1])
            if refused is not None:
                log.append(GuardResult(chosen.index, refused.guard, False))
                return Decision(chosen, tuple(log), refused)
        return Decision(transition=chosen, guards=tuple(log))

    def check_budget(self, state: str, snapshot: Snapshot) -> Decision:
        """The implicit budget transition out of `state`, decided on `snapshot`.

        It has one guard, `budget_tripped`; the common case (nothing tripped) is answered
        by that guard directly, and only a tripped budget is fired through the machine.
        """
        untripped = self._untripped[state]
        if not budget_tripped(snapshot):
            return untripped
        return self.decide(state, BUDGET_TRIGGER, snapshot)

    def untripped(self, state: str) -> Decision:
        """What `check_budget` decides out of `state` on a snapshot whose budget has not
        tripped (without building the snapshot)."""
        return self._untripped[state]


_NONE = Decision(transition=None, guards=())
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
