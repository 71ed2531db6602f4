"""The frozen snapshot of a run that every guard decides on, and the facts it is built from.

A snapshot holds everything a guard may read — meters, budgets, the last proposal, the last
tool outcome with its receipts, the lane that owns the halt vote, and the clock reading the
worker took for this decision. It is journaled with every transition, so replay can
re-evaluate every guard without a model, a tool or a clock.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from fsm_agent.budgets import Budgets, Meters
from fsm_agent.lanes import LOCAL, ControlPlane, Lane
from fsm_agent.proposals import Proposal
from fsm_agent.receipts import Receipt

ToolStatus = Literal["returned", "failed", "timed_out", "interrupted"]


@attrs.frozen
class ToolOutcome:
    """What one tool call (or user action) produced, as the worker observed it."""

    name: str
    args: dict[str, Any]
    status: ToolStatus
    receipts: tuple[Receipt, ...] = ()
    observation: Any = None
    final: str | None = None
    error: str | None = None
    retryable: bool = False
    cost: float = 0.0
    duration_ms: int = 0
    #: True when the tool was abandoned or killed at a deadline: its side effect is unknown.
    outcome_unknown: bool = False


@attrs.frozen
class Snapshot:
    """Everything a guard may read. Guards are pure functions of this value."""

    state: str
    outcome: str | None
    next_action: str | None
    clock_ms: int
    budgets: Budgets
    meters: Meters
    proposal: Proposal | None = None
    tool: ToolOutcome | None = None
    evidence: bool = False
    #: Values (finals, receipt ids, observation strings) returned by receipted tool calls.
    grounded: tuple[str, ...] = ()
    allowlist: tuple[str, ...] = ()
    privileged: tuple[str, ...] = ()
    halt_lane: Lane = LOCAL
    control: ControlPlane = attrs.field(factory=ControlPlane)
    repeats: int = 0
    thrash_limit: int = 0
    #: the schema-repair vote on the last reply: none, refused (voter not on a local lane),
    #: repaired, or failed (the repaired reply was still invalid)
    repair: Literal["none", "refused", "repaired", "failed"] = "none"
    #: a second-opinion judge's vote on a possible success: none (no judge or not asked),
    #: agree, veto, or ignored (a judge off a local or paid lane has no vote)
    judge: Literal["none", "agree", "veto", "ignored"] = "none"
