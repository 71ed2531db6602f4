"""A final answer completes a run only when a receipted tool result backs it (seed 001)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsm_agent import HaltReason
from fsm_agent.proposals import Rejection, parse_reply
from tests.lab import LOOKUP, MISS, lab_run


@pytest.mark.parametrize(
    "answer", ["swordfish", "The lab password is Swordfish.", "fact:lab password"]
)
def test_an_answer_grounded_in_a_receipted_result_completes(tmp_path: Path, answer: str) -> None:
    record = lab_run(tmp_path, [LOOKUP, {"answer": answer}])
    assert record.halt_reason is HaltReason.COMPLETED
    assert record.answer == answer


def test_an_invented_answer_after_a_receipt_is_schema_fail(tmp_path: Path) -> None:
    invented = {"answer": "hunter2 (made up)"}
    record = lab_run(tmp_path, [LOOKUP, invented, invented, invented])
    assert record.halt_reason is HaltReason.SCHEMA_FAIL
    assert record.answer is None
    assert record.error is not None
    assert "no receipted tool result backs it" in record.error
    assert record.meters.retries_used == 2


def test_an_answer_echoing_an_unreceipted_observation_is_refused(tmp_path: Path) -> None:
    # The miss comes back without receipts, so its text grounds nothing.
    echo = {"answer": "No exact match. Refine your query and look up again."}
    record = lab_run(tmp_path, [MISS, echo], budgets={"max_retries": 0})
    assert record.halt_reason is HaltReason.SCHEMA_FAIL


def test_a_handoff_may_carry_arguments_for_the_packet(tmp_path: Path) -> None:
    reply = {"handoff": {"why": "needs approval", "args": {"amount_cents": 1299}}}
    record = lab_run(tmp_path, [reply])
    assert record.halt_reason is HaltReason.HANDOFF_REQUESTED
    assert record.handoff is not None
    assert record.handoff.frozen_args == {"amount_cents": 1299}
    rejected = parse_reply({"handoff": {"why": "x", "extra": 1}}, step=1, max_steps=8)
    assert isinstance(rejected, Rejection)
    assert rejected.kind == "schema_fail"
