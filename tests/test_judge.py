"""A second-opinion judge can veto a success, never make one (seed 000)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fsm_agent import LOCAL, HaltReason, HaltRecord, Lane, Snapshot
from tests.lab import LOOKUP, lab_run, replays

PAID = Lane(kind="http", tier="paid")


def judged_run(tmp_path: Path, replies: list[object], judge: Judge) -> HaltRecord:
    record = lab_run(tmp_path, replies, judge=judge)
    assert replays(tmp_path / "j.db", record.run_id)
    return record


class Judge:
    def __init__(self, lane: Lane | None, votes: list[Any]) -> None:
        self.lane = lane
        self.votes = list(votes)
        self.asked: list[Snapshot] = []

    def __call__(self, snap: Snapshot) -> Any:
        self.asked.append(snap)
        return self.votes.pop(0) if self.votes else True


def test_a_paid_judge_can_veto_a_success_once(tmp_path: Path) -> None:
    judge = Judge(PAID, [False, True])
    answer = {"answer": "swordfish"}
    record = judged_run(tmp_path, [LOOKUP, answer, answer], judge)
    assert record.halt_reason is HaltReason.COMPLETED
    assert len(judge.asked) == 2  # asked only when a success was possible: at each answer
    assert record.steps_used == 3  # the veto cost a step (and a retry)


def test_a_judge_cannot_make_a_success_alone(tmp_path: Path) -> None:
    judge = Judge(LOCAL, [True] * 5)
    invented = {"answer": "hunter2"}  # not grounded in any receipt
    record = judged_run(tmp_path, [invented] * 3, judge)
    assert record.halt_reason is HaltReason.SCHEMA_FAIL


def test_a_free_judge_has_no_vote(tmp_path: Path) -> None:
    judge = Judge(Lane(kind="http", tier="free"), [False] * 5)
    record = judged_run(tmp_path, [LOOKUP, {"answer": "swordfish"}], judge)
    assert record.halt_reason is HaltReason.COMPLETED
    assert judge.asked == []  # never consulted: two free opinions are zero halt votes


def test_a_failing_judge_vetoes(tmp_path: Path) -> None:
    judge = Judge(PAID, ["yes", "maybe", "sure"])  # not True: no success on a non-answer
    answer = {"answer": "swordfish"}
    record = judged_run(tmp_path, [LOOKUP, answer, answer, answer], judge)
    assert record.halt_reason is HaltReason.SCHEMA_FAIL
