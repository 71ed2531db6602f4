"""Budgets (frozen at run start) and meters (what the run has used so far).

`tripped_meter` is the one pure function that decides whether a budget is spent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from fsm_agent.errors import BudgetError
from fsm_agent.halt import HaltReason

BUDGET_NAMES = ("max_steps", "wall_clock_ms", "max_cost", "tool_timeout_ms", "max_retries")
_INTEGER = {"max_steps", "wall_clock_ms", "tool_timeout_ms", "max_retries"}
_MAY_BE_ZERO = {"max_retries"}
#: The largest budget: the largest integer every JSON reader holds exactly (2**53 - 1).
MAX_BUDGET = 2**53 - 1


@attrs.frozen
class Budgets:
    """The caps of one run. Only an operator may raise them; the model never can."""

    max_steps: int
    wall_clock_ms: int
    max_cost: float
    tool_timeout_ms: int
    max_retries: int


@attrs.frozen
class Meters:
    """What a run has used. Every model call is a step; retries are model calls too."""

    steps_used: int = 0
    tool_calls: int = 0
    retries_used: int = 0
    cost: float = 0.0
    elapsed_ms: int = 0


def check_budget(name: str, value: Any) -> int | float:
    """Validate one budget value; raise `BudgetError` naming it when it is unusable."""
    if name not in BUDGET_NAMES:
        raise BudgetError(f"unknown budget (known: {', '.join(BUDGET_NAMES)})", name=name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BudgetError(f"must be a number, got {value!r}", name=name)
    if isinstance(value, float) and not math.isfinite(value):
        raise BudgetError(f"must be finite, got {value!r}", name=name)
    if name in _INTEGER and value != int(value):
        raise BudgetError(f"must be a whole number, got {value!r}", name=name)
    if value < 0:
        raise BudgetError(f"must not be negative, got {value!r}", name=name)
    if value == 0 and name not in _MAY_BE_ZERO:
        raise BudgetError("must be positive (a zero budget would stop every run)", name=name)
    if value > MAX_BUDGET:
        raise BudgetError(f"must be at most {MAX_BUDGET}, got {value!r}", name=name)
    return int(value) if name in _INTEGER else float(value)


def make_budgets(
    defaults: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
) -> Budgets:
    """Budgets from a machine's defaults with operator overrides applied (None = keep default)."""
    merged = dict(defaults)
    for name, value in (overrides or {}).items():
        if value is not None:
            merged[name] = value
    missing = [n for n in BUDGET_NAMES if n not in merged]
    if missing:
        raise BudgetError("missing (every run needs all five budgets)", name=missing[0])
    extra = sorted(set(merged) - set(BUDGET_NAMES))
    if extra:
        check_budget(extra[0], merged[extra[0]])
    return Budgets(
        max_steps=int(check_budget("max_steps", merged["max_steps"])),
        wall_clock_ms=int(check_budget("wall_clock_ms", merged["wall_clock_ms"])),
        max_cost=float(check_budget("max_cost", merged["max_cost"])),
        tool_timeout_ms=int(check_budget("tool_timeout_ms", merged["tool_timeout_ms"])),
        max_retries=int(check_budget("max_retries", merged["max_retries"])),
    )


def tripped_meter(
    budgets: Budgets, meters: Meters, *, next_action: str | None
) -> HaltReason | None:
    """Which budget is spent, or None. Pure.

    Wall clock first, then money; the step budget is spent only when the next action would
    be another model call (a tool proposed on the last step still runs and may succeed).
    """
    if meters.elapsed_ms >= budgets.wall_clock_ms:
        return HaltReason.WALL_CLOCK
    if meters.cost >= budgets.max_cost:
        return HaltReason.COST_CAP
    if next_action == "model" and meters.steps_used >= budgets.max_steps:
        return HaltReason.MAX_STEPS
    return None


def dollars(amount: float) -> str:
    """A cost as people read it: `$0`, `$0.00005`, `$1.25`, `$0.123457` — at least two
    decimals, at most six, no trailing zeros past the second (`$0.0000` hid $5e-05)."""
    if amount == 0:
        return "$0"
    if 0 < amount < 0.000001:
        return "<$0.000001"
    text = f"{amount:.6f}".rstrip("0")
    whole, _, frac = text.partition(".")
    return f"${whole}.{frac.ljust(2, '0')}"
