"""Pending side effects (fsm_agent.runtime.effects): which calls of a run are not known to have
happened, how a later call settles them, and that the list stays bounded and fails closed."""

from __future__ import annotations

from typing import Any

import pytest

from fsm_agent.runtime.effects import (
    MAX_PENDING,
    pending_lines,
    pending_summary,
    receipt_problem,
    settle,
)
from fsm_agent.runtime.guards import side_effects_receipted
from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.snapshot import PendingEffect, ToolOutcome
from tests.test_guards import snap

OK = (Receipt(status=200, id="T-1"),)


def outcome(receipts: tuple[Receipt, ...] = OK, **kw: Any) -> ToolOutcome:
    base: dict[str, Any] = {"name": "close", "args": {"t": 1}, "status": "returned"}
    return ToolOutcome(**(base | {"receipts": receipts} | kw))


@pytest.mark.parametrize(
    ("receipts", "why"),
    [
        ((), "no receipts"),
        ((Receipt(status=206, id=""),), "206 with an empty id"),
        ((Receipt(status=500, id="x"),), "status 500 (not 2xx)"),
        ((Receipt(status=302, id=""),), "status 302 (not 2xx) with an empty id"),
        ((Receipt(status=200, id="a"), Receipt(status=200, id="")), "200 with an empty id"),
    ],
)
def test_a_write_without_complete_receipts_is_pending(
    receipts: tuple[Receipt, ...], why: str
) -> None:
    assert receipt_problem(receipts) == why
    pending, omitted = settle((), 0, 3, outcome(receipts))
    assert pending == (PendingEffect(step=3, name="close", args={"t": 1}, why=why),)
    assert omitted == 0
    assert not side_effects_receipted(snap(unreceipted=pending))


@pytest.mark.parametrize(
    "failed",
    [
        outcome((), status="failed", error="ToolError: boom"),
        outcome((), status="timed_out"),
        outcome((), status="interrupted"),
    ],
)
def test_a_write_that_failed_or_was_cut_off_is_pending(failed: ToolOutcome) -> None:
    pending, _ = settle((), 0, 1, failed)
    assert len(pending) == 1


def test_the_same_call_with_receipts_settles_it_and_another_call_does_not() -> None:
    pending, _ = settle((), 0, 1, outcome(()))
    other, _ = settle(pending, 0, 2, outcome(OK, args={"t": 2}))
    assert other == pending  # other arguments: a different effect
    renamed, _ = settle(pending, 0, 2, outcome(OK, name="reopen"))
    assert renamed == pending
    settled, _ = settle(pending, 0, 3, outcome(OK))
    assert settled == ()


def test_reads_and_calls_never_made_change_nothing() -> None:
    pending, _ = settle((), 0, 1, outcome(()))
    assert settle(pending, 0, 2, outcome((), side_effect=False)) == (pending, 0)
    assert settle((), 0, 2, outcome((), side_effect=False, status="failed")) == ((), 0)


def test_the_pending_list_is_bounded_and_the_overflow_stays_pending() -> None:
    pending: tuple[PendingEffect, ...] = ()
    omitted = 0
    for i in range(MAX_PENDING + 7):
        pending, omitted = settle(pending, omitted, i, outcome((), args={"t": i}))
    assert (len(pending), omitted) == (MAX_PENDING, 7)
    # settling every named call leaves the counted ones: still not receipted (fail closed)
    for i in range(7, MAX_PENDING + 7):
        pending, omitted = settle(pending, omitted, 999, outcome(OK, args={"t": i}))
    assert (pending, omitted) == ((), 7)
    assert not side_effects_receipted(snap(unreceipted_omitted=omitted))
    assert pending_lines(pending, omitted) == (
        "(7 earlier calls without complete receipts: see the journal)",
    )


def test_the_summary_names_the_last_calls_and_counts_the_rest() -> None:
    pending = tuple(
        PendingEffect(step=i, name="close", args={"t": i}, why="no receipts") for i in range(5)
    )
    assert pending_summary(pending, 1) == (
        'step 2: close({"t": 2}) -> no receipts; step 3: close({"t": 3}) -> no receipts;'
        ' step 4: close({"t": 4}) -> no receipts; and 3 more (see the record)'
    )
