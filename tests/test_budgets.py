"""Budgets and meters: validation that names the budget, operator overrides, and the one pure
function that decides which meter has tripped (wall clock, then money, then steps)."""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsm_agent.errors import BudgetError, InvalidInputError
from fsm_agent.halt import HaltReason
from fsm_agent.runtime.budgets import (
    BUDGET_NAMES,
    Budgets,
    Meters,
    check_budget,
    make_budgets,
    tripped_meter,
)

DEFAULTS: dict[str, Any] = {
    "max_steps": 8,
    "wall_clock_ms": 15000,
    "max_cost": 1.0,
    "tool_timeout_ms": 5000,
    "max_retries": 2,
}
BUDGETS = Budgets(
    max_steps=8, wall_clock_ms=15000, max_cost=1.0, tool_timeout_ms=5000, max_retries=2
)


# --- make_budgets -----------------------------------------------------------------------------


def test_make_budgets_from_defaults() -> None:
    budgets = make_budgets(DEFAULTS)
    assert budgets == BUDGETS


def test_make_budgets_normalises_types() -> None:
    budgets = make_budgets({**DEFAULTS, "max_steps": 8.0, "max_cost": 2})
    assert budgets.max_steps == 8
    assert type(budgets.max_steps) is int
    assert budgets.max_cost == 2.0
    assert type(budgets.max_cost) is float


def test_overrides_replace_defaults() -> None:
    budgets = make_budgets(DEFAULTS, {"max_steps": 3, "max_cost": 0.25})
    assert budgets == attrs.evolve(BUDGETS, max_steps=3, max_cost=0.25)


@pytest.mark.parametrize(
    "overrides",
    [None, {}, dict.fromkeys(BUDGET_NAMES), {"max_steps": None, "wall_clock_ms": 10}],
    ids=["none", "empty", "all-none", "some-none"],
)
def test_none_overrides_keep_the_defaults(overrides: dict[str, Any] | None) -> None:
    budgets = make_budgets(DEFAULTS, overrides)
    expected = BUDGETS
    if overrides and overrides.get("wall_clock_ms") is not None:
        expected = attrs.evolve(BUDGETS, wall_clock_ms=overrides["wall_clock_ms"])
    assert budgets == expected


def test_make_budgets_does_not_mutate_its_inputs() -> None:
    defaults, overrides = dict(DEFAULTS), {"max_steps": 2}
    make_budgets(defaults, overrides)
    assert defaults == DEFAULTS
    assert overrides == {"max_steps": 2}


@pytest.mark.parametrize("name", BUDGET_NAMES)
def test_missing_budget_is_named(name: str) -> None:
    defaults = {k: v for k, v in DEFAULTS.items() if k != name}
    with pytest.raises(BudgetError) as info:
        make_budgets(defaults)
    assert info.value.name == name
    assert f"budget {name}" in str(info.value)
    assert "missing" in str(info.value)


def test_unknown_budget_is_named() -> None:
    with pytest.raises(BudgetError) as info:
        make_budgets(DEFAULTS, {"max_tokens": 100})
    assert info.value.name == "max_tokens"
    assert "unknown budget" in str(info.value)


BAD_VALUES: list[tuple[str, Any, str]] = [
    ("max_steps", -1, "negative"),
    ("max_steps", 0, "positive"),
    ("max_steps", 2.5, "whole number"),
    ("max_steps", "8", "must be a number"),
    ("max_steps", True, "must be a number"),
    ("max_steps", False, "must be a number"),
    ("max_steps", math.nan, "finite"),
    ("max_steps", math.inf, "finite"),
    ("wall_clock_ms", 0, "positive"),
    ("wall_clock_ms", -15000, "negative"),
    ("max_cost", 0, "positive"),
    ("max_cost", 0.0, "positive"),
    ("max_cost", -0.01, "negative"),
    ("max_cost", math.inf, "finite"),
    ("max_cost", math.nan, "finite"),
    ("max_cost", "1.0", "must be a number"),
    ("tool_timeout_ms", 0, "positive"),
    ("tool_timeout_ms", 0.5, "whole number"),
    ("max_retries", -1, "negative"),
    ("max_retries", [2], "must be a number"),
]


@pytest.mark.parametrize(("name", "value", "fragment"), BAD_VALUES)
def test_bad_override_is_refused_and_named(name: str, value: Any, fragment: str) -> None:
    with pytest.raises(BudgetError) as info:
        make_budgets(DEFAULTS, {name: value})
    err = info.value
    assert err.name == name
    assert str(err).startswith(f"budget {name}: ")
    assert fragment in str(err)
    assert isinstance(err, InvalidInputError)


@pytest.mark.parametrize(
    ("name", "value", "fragment"), [*BAD_VALUES, ("max_steps", None, "must be a number")]
)
def test_check_budget_refuses_bad_values(name: str, value: Any, fragment: str) -> None:
    with pytest.raises(BudgetError, match=fragment) as info:
        check_budget(name, value)
    assert info.value.name == name


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("max_retries", 0, 0),
        ("max_steps", 1, 1),
        ("max_steps", 8.0, 8),
        ("max_cost", 1, 1.0),
        ("max_cost", 0.001, 0.001),
        ("wall_clock_ms", 10**12, 10**12),
    ],
)
def test_check_budget_accepts_and_normalises(name: str, value: Any, expected: Any) -> None:
    result = check_budget(name, value)
    assert result == expected
    assert type(result) is type(expected)


# --- tripped_meter ----------------------------------------------------------------------------

SMALL = Budgets(max_steps=4, wall_clock_ms=1000, max_cost=1.0, tool_timeout_ms=100, max_retries=1)


@pytest.mark.parametrize(
    ("meters", "next_action", "expected"),
    [
        (Meters(), "model", None),
        (Meters(steps_used=3, cost=0.99, elapsed_ms=999), "model", None),
        # each meter at its cap trips (>=)
        (Meters(elapsed_ms=1000), "model", HaltReason.WALL_CLOCK),
        (Meters(elapsed_ms=5000), None, HaltReason.WALL_CLOCK),
        (Meters(cost=1.0), "model", HaltReason.COST_CAP),
        (Meters(cost=7.5), "tool", HaltReason.COST_CAP),
        (Meters(steps_used=4), "model", HaltReason.MAX_STEPS),
        (Meters(steps_used=9), "model", HaltReason.MAX_STEPS),
        # steps trip only when the next action is another model call
        (Meters(steps_used=4), "tool", None),
        (Meters(steps_used=4), "receipts", None),
        (Meters(steps_used=4), None, None),
        # precedence: wall clock, then cost, then steps
        (Meters(steps_used=4, cost=1.0, elapsed_ms=1000), "model", HaltReason.WALL_CLOCK),
        (Meters(steps_used=4, cost=1.0), "model", HaltReason.COST_CAP),
        (Meters(steps_used=4, elapsed_ms=1000), "model", HaltReason.WALL_CLOCK),
        (Meters(cost=2.0, elapsed_ms=1000), "tool", HaltReason.WALL_CLOCK),
        # tool calls and retries are not budgets of their own here
        (Meters(tool_calls=100, retries_used=100), "model", None),
    ],
)
def test_tripped_meter(
    meters: Meters, next_action: str | None, expected: HaltReason | None
) -> None:
    assert tripped_meter(SMALL, meters, next_action=next_action) == expected


meters_strategy = st.builds(
    Meters,
    steps_used=st.integers(0, 10),
    tool_calls=st.integers(0, 10),
    retries_used=st.integers(0, 5),
    cost=st.floats(0, 3, allow_nan=False),
    elapsed_ms=st.integers(0, 3000),
)


@settings(max_examples=150, deadline=None)
@given(
    meters=meters_strategy,
    next_action=st.sampled_from(["model", "tool", "receipts", None]),
    bump=st.sampled_from(["steps_used", "cost", "elapsed_ms"]),
    amount=st.integers(0, 1000),
)
def test_a_tripped_meter_stays_tripped_when_any_meter_grows(
    meters: Meters, next_action: str | None, bump: str, amount: int
) -> None:
    before = tripped_meter(SMALL, meters, next_action=next_action)
    grown = attrs.evolve(meters, **{bump: getattr(meters, bump) + amount})
    after = tripped_meter(SMALL, grown, next_action=next_action)
    if before is not None:
        assert after is not None
        # growing a meter can only move the reason earlier in precedence, never clear it
        order = [HaltReason.WALL_CLOCK, HaltReason.COST_CAP, HaltReason.MAX_STEPS]
        assert order.index(after) <= order.index(before)


@pytest.mark.parametrize(
    ("amount", "shown"),
    [
        (0, "$0"),
        (0.00005, "$0.00005"),
        (1.0, "$1.00"),
        (1.25, "$1.25"),
        (0.1 + 0.2, "$0.30"),
        (0.123456789, "$0.123457"),
        (1e-9, "<$0.000001"),
        (1234.5, "$1234.50"),
    ],
)
def test_costs_are_shown_with_sensible_precision(amount: float, shown: str) -> None:
    from fsm_agent.runtime.budgets import dollars

    assert dollars(amount) == shown
