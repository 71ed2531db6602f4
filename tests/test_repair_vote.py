"""Seed 000's decision table, row "schema invalid": request a local repair vote; hard fail
if the vote is free."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fsm_agent import LOCAL, HaltReason, Lane
from tests.lab import LOOKUP, lab_run, replays

TRUNCATED = '{"tool_call": {"name": "lookup", "args": {"q": "lab password"}}'  # cut short


class Voter:
    """Repairs a truncated JSON reply by closing its braces."""

    def __init__(self, lane: Lane | None) -> None:
        self.lane = lane
        self.votes = 0

    def __call__(self, raw: Any) -> Any:
        self.votes += 1
        return json.loads(raw + "}") if isinstance(raw, str) else raw


def test_a_local_voter_repairs_the_truncated_reply(tmp_path: Path) -> None:
    voter = Voter(LOCAL)
    record = lab_run(tmp_path, [TRUNCATED, {"answer": "swordfish"}], repair=voter)
    assert record.halt_reason is HaltReason.COMPLETED
    assert voter.votes == 1
    assert record.meters.retries_used == 0  # repaired, not retried
    assert replays(tmp_path / "j.db", record.run_id)


def test_a_free_voter_is_refused_and_the_run_hard_fails(tmp_path: Path) -> None:
    voter = Voter(Lane(kind="http", tier="free"))
    record = lab_run(tmp_path, [TRUNCATED, LOOKUP, {"answer": "swordfish"}], repair=voter)
    assert record.halt_reason is HaltReason.SCHEMA_FAIL
    assert voter.votes == 0  # a free lane never sees the ballot
    assert record.steps_used == 1
    assert record.meters.retries_used == 0  # a hard fail: no retry either
    assert replays(tmp_path / "j.db", record.run_id)


def test_an_undeclared_voter_lane_is_refused_too(tmp_path: Path) -> None:
    record = lab_run(tmp_path, [TRUNCATED, LOOKUP], repair=Voter(None))
    assert record.halt_reason is HaltReason.SCHEMA_FAIL


def test_a_failed_repair_falls_back_to_the_retry_path(tmp_path: Path) -> None:
    voter = Voter(LOCAL)
    record = lab_run(tmp_path, ["just prose", LOOKUP, {"answer": "swordfish"}], repair=voter)
    assert voter.votes == 1
    assert record.halt_reason is HaltReason.COMPLETED
    assert record.meters.retries_used == 1
    assert replays(tmp_path / "j.db", record.run_id)
