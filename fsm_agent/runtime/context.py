"""The mutable context of one run: its frozen inputs (declaration, task, adapters, lanes),
its meters and clock, and what it has seen so far; `snapshot()` freezes it for a decision.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Literal

import attrs

from fsm_agent.adapters.models import ModelAdapter
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.redaction import NO_SECRETS, Redactor
from fsm_agent.runtime.budgets import Budgets, Meters
from fsm_agent.runtime.history import History
from fsm_agent.runtime.lanes import ControlPlane, Lane
from fsm_agent.runtime.proposals import Proposal, ToolCall
from fsm_agent.runtime.record import RECORD_TOOL_CALLS, ToolCallEntry
from fsm_agent.runtime.snapshot import (
    SUCCESS_RULES,
    DoneEffect,
    PendingEffect,
    Receipted,
    Snapshot,
    ToolOutcome,
)
from fsm_agent.runtime.tools import ToolRegistry

Clock = Callable[[], float]


@attrs.define
class RunContext:
    """The mutable facts of one run; `snapshot()` freezes them for a decision."""

    spec: MachineSpec
    task: str
    budgets: Budgets
    model: ModelAdapter
    tools: ToolRegistry
    allowlist: tuple[str, ...]
    halt_lane: Lane
    control: ControlPlane
    thrash_limit: int
    clock: Clock
    start: float
    privileged: tuple[str, ...] = ()
    #: tools declared idempotent, and those whose repeat is meant (repeatable or idempotent)
    idempotent: tuple[str, ...] = ()
    repeatable: tuple[str, ...] = ()
    #: tools a person must approve each call of, and the digest of the call approved
    approval: tuple[str, ...] = ()
    approved: str | None = None
    #: a repeat of a completed side effect asks a person instead of being refused
    repeat_asks: bool = False
    #: the schema-repair voter: callable(raw reply) -> repaired reply, with its `lane`
    repair_voter: Callable[[Any], Any] | None = None
    repair: Literal["none", "refused", "repaired", "failed"] = "none"
    #: the second-opinion judge: callable(Snapshot) -> bool, with its `lane`
    judge: Callable[[Snapshot], Any] | None = None
    #: the secrets redacted from every reply and tool outcome before the run sees them
    secrets: Redactor = NO_SECRETS
    steps_used: int = 0
    retries_used: int = 0
    cost: float = 0.0
    elapsed_ms: int = 0
    proposal: Proposal | None = None
    tool: ToolOutcome | None = None
    evidence: bool = False
    #: the success rules the run is decided under (a resumed run keeps its own)
    rules: int = SUCCESS_RULES
    unreceipted: tuple[PendingEffect, ...] = ()
    unreceipted_omitted: int = 0
    receipted: tuple[Receipted, ...] = ()
    #: side-effecting calls that returned complete receipts (older ones only counted)
    effects: tuple[DoneEffect, ...] = ()
    effects_omitted: int = 0
    #: the last tool call the model proposed (made or refused): a handoff freezes its args
    last_tool_call: ToolCall | None = None
    repeats: int = 0
    last_call: str | None = None
    #: the notes each model call is shown (as a read-only view: `fsm_agent.runtime.history`)
    history: History = attrs.field(factory=History)
    #: the last RECORD_TOOL_CALLS calls (what the record and a handoff show); `calls_made`
    #: counts them all (the journal has every one)
    tool_calls: deque[ToolCallEntry] = attrs.field(factory=lambda: deque(maxlen=RECORD_TOOL_CALLS))
    calls_made: int = 0

    def read_clock(self) -> int:
        """One clock reading, as ms since the run started; updates the elapsed meter."""
        ms = max(0, int((self.clock() - self.start) * 1000))
        self.elapsed_ms = ms
        return ms

    def remaining_s(self) -> float:
        return max(0.0, (self.budgets.wall_clock_ms - self.read_clock()) / 1000)

    def snapshot(self, state: str, outcome: str | None, next_action: str | None) -> Snapshot:
        clock_ms = self.read_clock()
        return Snapshot(
            state=state,
            outcome=outcome,
            next_action=next_action,
            clock_ms=clock_ms,
            budgets=self.budgets,
            meters=self.meters,
            proposal=self.proposal,
            tool=self.tool,
            evidence=self.evidence,
            rules=self.rules,
            unreceipted=self.unreceipted,
            unreceipted_omitted=self.unreceipted_omitted,
            receipted=self.receipted,
            allowlist=self.allowlist,
            privileged=self.privileged,
            halt_lane=self.halt_lane,
            control=self.control,
            repeats=self.repeats,
            thrash_limit=self.thrash_limit,
            repair=self.repair,
            effects=self.effects,
            effects_omitted=self.effects_omitted,
            idempotent=self.idempotent,
            repeatable=self.repeatable,
            approval=self.approval,
            approved=self.approved,
            repeat_asks=self.repeat_asks,
        )

    def count_call(self, entry: ToolCallEntry) -> None:
        """One tool call made: counted, and kept among the last ones."""
        self.tool_calls.append(entry)
        self.calls_made += 1

    @property
    def calls_omitted(self) -> int:
        """Tool calls made but no longer kept here (the journal has every one)."""
        return self.calls_made - len(self.tool_calls)

    def add_cost(self, cost: float) -> None:
        """Add a cost already validated by `ModelReply` / `ToolResult` (finite, >= 0)."""
        self.cost += cost

    @property
    def meters(self) -> Meters:
        """The meters as a frozen value (taken for each snapshot and for the record)."""
        return Meters(
            steps_used=self.steps_used,
            tool_calls=self.calls_made,
            retries_used=self.retries_used,
            cost=self.cost,
            elapsed_ms=self.elapsed_ms,
        )
