"""Machine declarations: load a YAML machine, validate it, fail with the file, line and key.

A declaration names its states (each with the action the worker performs there, or none
for terminal states), its transitions (trigger, source, dest, guards by name, and for
transitions into a terminal state the halt reason), its default budgets and optionally a
tool allow-list. Everything is checked at load time (`fsm_agent.declaration.check`); nothing is
resolved lazily. The file's shape is `fsm_agent.declaration.documents.MachineDocument`, from
which the shipped JSON Schema (`fsm-agent schema machine`) is generated.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from fsm_agent.halt import HaltReason

if TYPE_CHECKING:
    pass

#: Built-in actions and the outcomes (triggers) each one can produce.
ACTION_OUTCOMES: Mapping[str, tuple[str, ...]] = {
    "model": ("tool_call", "answer", "handoff", "rejected"),
    "tool": ("tool_returned", "tool_failed", "tool_timed_out"),
    "receipts": ("collected",),
}
#: The outcomes a user action fires whatever it declares: it raised, or ran past its cap.
USER_FAILURES: tuple[str, str] = ("failed", "timed_out")
#: Triggers the runtime fires on a failure (a refused reply, a failed or timed-out call).
FAILURE_TRIGGERS: frozenset[str] = frozenset(
    {"rejected", "tool_failed", "tool_timed_out", "failed", "timed_out"}
)
#: Trigger the worker fires, from every non-terminal state, when a meter trips.
BUDGET_TRIGGER = "budget"
#: A person's decisions on a run waiting in `handoff`: the only triggers out of it
#: (`fsm_agent.runtime.decisions`).
DECISION_TRIGGERS: tuple[str, str, str] = ("approved", "denied", "answered")
#: What a waiting run waits for -> the decisions that continue it; the first is the edge a
#: declaration needs out of handoff for such a stop to wait at all.
DECISIONS_FOR: Mapping[str, tuple[str, ...]] = {
    "approval": ("approved", "denied"),
    "answer": ("answered",),
}
#: How long a run may wait for a decision when its declaration does not say (24 hours).
DEFAULT_WAIT_MS = 86_400_000


@attrs.frozen
class StateSpec:
    """One declared state: the action performed there (None for a terminal state)."""

    name: str
    action: str | None
    terminal: bool
    #: a user action's declared outcomes (`outcomes:`), besides failed and timed_out; None
    #: for a built-in action, or a user action that declares none
    outcomes: tuple[str, ...] | None = None

    def produces(self) -> tuple[str, ...] | None:
        """Every trigger this state's action can fire, or None when that is not declared
        (a user action without `outcomes:`)."""
        if self.action is None:
            return ()
        if self.action in ACTION_OUTCOMES:
            return ACTION_OUTCOMES[self.action]
        return None if self.outcomes is None else (*self.outcomes, *USER_FAILURES)


@attrs.frozen
class TransitionSpec:
    """One declared transition. Candidates for a trigger are tried in declaration order."""

    index: int
    trigger: str
    source: str
    dest: str
    guards: tuple[str, ...] = ()
    halt: HaltReason | None = None
    retry: bool = False
    implicit: bool = False


def uncounted_retry(t: TransitionSpec, dest: StateSpec) -> bool:
    """`t` goes on after a failure into a non-terminal state without `retry: true`: a
    retry the retry meter never counts (lint's HX006; check's `privileged` property)."""
    return t.trigger in FAILURE_TRIGGERS and not dest.terminal and not t.retry


@attrs.frozen
class MachineSpec:
    """A validated machine declaration."""

    name: str
    source: str
    text: str
    sha256: str
    description: str
    initial: str
    states: tuple[StateSpec, ...]
    transitions: tuple[TransitionSpec, ...]
    budgets: Mapping[str, int | float]
    thrash_limit: int
    tools: tuple[str, ...] | None
    #: the halt policy file the declaration names, as written (relative to the file)
    policy: str | None = None
    #: how long a run may wait in `handoff` for a person's decision before it ends
    #: `wait_expired` (ms)
    wait_limit_ms: int = DEFAULT_WAIT_MS

    def policy_path(self) -> Path | None:
        """The declared policy file, resolved next to the declaration (None if none)."""
        if self.policy is None:
            return None
        return Path(self.source).parent / self.policy

    def state(self, name: str) -> StateSpec:
        for s in self.states:
            if s.name == name:
                return s
        raise KeyError(name)

    def decisions(self) -> frozenset[str]:
        """The person's decisions this declaration continues a waiting run on."""
        return frozenset(t.trigger for t in self.transitions if t.source == "handoff")

    def continues(self, kind: str) -> bool:
        """Whether a stop that waits for a person's `kind` (`approval`, `answer`) waits at
        all: the declaration has the edge out of handoff that continues it."""
        return DECISIONS_FOR[kind][0] in self.decisions()

    def candidates(self, source: str, trigger: str) -> tuple[TransitionSpec, ...]:
        return tuple(t for t in self.transitions if t.source == source and t.trigger == trigger)
