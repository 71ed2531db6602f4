"""Halt statistics against real SQLite journals: exact counts, nearest-rank percentiles on
known runs, the text tables, the JSON form, and the filters."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from fsm_agent import HaltReason, HaltRecord, ScriptedModel
from fsm_agent.errors import InvalidInputError, JournalError
from fsm_agent.examples.scenarios import SCENARIOS, run_scenario
from fsm_agent.journal import serde
from fsm_agent.journal.runfile import RunFile, export_run, import_run
from fsm_agent.review.stats import (
    Distribution,
    MachineStats,
    Stats,
    distribution,
    format_stats,
    halt_stats,
    percentile,
    since_key,
)
from fsm_agent.stores.sqlite import SqliteStore
from tests import lab
from tests.lab import LOOKUP, rechained
from tests.lab import MISS as AGAIN

HANDOFF = {"handoff": {"why": "needs a human"}}
COST_PER_CALL = 0.25  # exact in binary: costs add up without rounding


def lab_run(store: SqliteStore, folder: Path, replies: list[Any], max_steps: int) -> HaltRecord:
    """One agent_loop run on the halt-lab tools; every model call costs COST_PER_CALL."""
    return lab.lab_run(
        folder,
        ScriptedModel(replies, cost_per_call=COST_PER_CALL),
        store=store,
        budgets={"max_steps": max_steps, "max_cost": 100.0},
    )


#: (replies, max_steps) -> halt reason, steps used / max, cost
KNOWN_RUNS: list[tuple[list[Any], int]] = [
    ([AGAIN] * 4, 4),  # max_steps, 4/4 = 1.0, cost 1.0
    ([AGAIN] * 2, 2),  # max_steps, 2/2 = 1.0, cost 0.5
    ([LOOKUP, {"answer": "swordfish"}], 8),  # completed, 2/8 = 0.25, cost 0.5
    ([HANDOFF], 8),  # handoff_requested, 1/8 = 0.125, cost 0.25
    ([HANDOFF], 4),  # handoff_requested, 1/4 = 0.25, cost 0.25
]


def start_killed_run(store: SqliteStore, like: str, run_id: str) -> None:
    """A run whose process died right after it started: a row, one event, no record."""
    halted = store.get_run(like)
    first = store.events(like)[0]
    killed = attrs.evolve(
        halted,
        run_id=run_id,
        status="running",
        state=first.dest,
        steps_used=0,
        halt_reason=None,
        ended_at=None,
        record=None,
    )
    store.start_run(killed, attrs.evolve(first, run_id=run_id))


@pytest.fixture(scope="module")
def known_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five agent_loop runs with known steps and costs, one killed agent_loop run, and one
    payments_retry run."""
    folder = tmp_path_factory.mktemp("known")
    path = folder / "known.db"
    store = SqliteStore(path)
    try:
        records = [lab_run(store, folder, replies, cap) for replies, cap in KNOWN_RUNS]
        assert [r.meters.cost for r in records] == [1.0, 0.5, 0.5, 0.25, 0.25]
        start_killed_run(store, like=records[0].run_id, run_id="killed")
        settles = next(s for s in SCENARIOS if s.name == "payments_retry.settles")
        run_scenario(settles, store=store, record_path=folder / "payments.json")
    finally:
        store.close()
    return path


@pytest.fixture
def known(known_db: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(known_db)
    try:
        yield s
    finally:
        s.close()


#: (started_at, duration ms, cost) of the runs in the timed journal.
TIMED = [
    ("2001-01-01T00:00:00.000+00:00", 250, 0.5),
    ("2001-02-01T00:00:00.000+00:00", 100, 0.25),
    ("2001-03-01T00:00:00.000+00:00", 60000, 2.0),
    ("2001-04-01T00:00:00.000+00:00", 1500, 1.0),
]


def _at(started_at: str, later_ms: int) -> str:
    moment = datetime.fromisoformat(started_at) + timedelta(milliseconds=later_ms)
    return moment.isoformat(timespec="milliseconds")


def retimed(original: RunFile, run_id: str, started_at: str, ms: int, cost: float) -> RunFile:
    """A copy of a halted run under another id, with known start, end and cost."""
    assert original.record is not None
    ended_at = _at(started_at, ms)
    record = attrs.evolve(
        original.record,
        run_id=run_id,
        started_at=started_at,
        ended_at=ended_at,
        meters=attrs.evolve(original.record.meters, cost=cost),
    )
    row = attrs.evolve(
        original.run, run_id=run_id, started_at=started_at, ended_at=ended_at, record=record
    )
    events = tuple(attrs.evolve(e, run_id=run_id) for e in original.events)
    return rechained(attrs.evolve(original, run=row, events=events, record=record))


@pytest.fixture
def timed(tmp_path: Path) -> Iterator[SqliteStore]:
    """Four copies of an 8/8 max_steps run with known start times, durations and costs."""
    source = SqliteStore(tmp_path / "source.db")
    looping = next(s for s in SCENARIOS if s.name == "halt_lab.looping")
    record = run_scenario(looping, store=source, record_path=tmp_path / "r.json")
    original = export_run(source, record.run_id)
    source.close()
    store = SqliteStore(tmp_path / "timed.db")
    for n, (started_at, ms, cost) in enumerate(TIMED):
        import_run(store, retimed(original, f"timed-{n}", started_at, ms, cost))
    try:
        yield store
    finally:
        store.close()


# --- percentiles ------------------------------------------------------------------------------


def test_percentiles_are_nearest_rank() -> None:
    ten = [float(v) for v in range(1, 11)]
    assert (percentile(ten, 50), percentile(ten, 90), percentile(ten, 100)) == (5.0, 9.0, 10.0)
    thirty = [float(v) for v in range(1, 31)]
    assert percentile(thirty, 90) == 27.0  # 0.9 * 30 in floats is 27.000000000000004
    assert percentile([7.0], 50) == percentile([7.0], 90) == 7.0
    assert percentile([1.0, 2.0], 0) == 1.0


def test_distribution_sorts_and_is_none_when_empty() -> None:
    assert distribution([3.0, 1.0, 2.0]) == Distribution(count=3, p50=2.0, p90=3.0, max=3.0)
    assert distribution([]) is None


# --- counts and distributions on known runs ---------------------------------------------------


def test_counts_and_distributions_per_machine(known: SqliteStore) -> None:
    stats = halt_stats(known)
    assert stats.journal == known.location
    assert (stats.machine, stats.since) == (None, None)
    assert [m.machine for m in stats.machines] == ["agent_loop", "payments_retry"]
    loop, payments = stats.machines

    assert (loop.runs, loop.halted, loop.running) == (6, 5, 1)
    # Most frequent first; ties in the enum's order.
    assert list(loop.halt_reasons.items()) == [
        (HaltReason.MAX_STEPS, 2),
        (HaltReason.HANDOFF_REQUESTED, 2),
        (HaltReason.COMPLETED, 1),
    ]
    # ratios 0.125, 0.25, 0.25, 1.0, 1.0: p50 is the 3rd, p90 the 5th
    assert loop.steps_ratio == Distribution(count=5, p50=0.25, p90=1.0, max=1.0)
    assert (loop.at_step_cap, loop.at_step_cap_share) == (2, 0.4)
    # costs 0.25, 0.25, 0.5, 0.5, 1.0
    assert loop.cost == Distribution(count=5, p50=0.5, p90=1.0, max=1.0)
    assert loop.duration_ms is not None
    assert loop.duration_ms.count == 5
    assert 0 <= loop.duration_ms.p50 <= loop.duration_ms.p90 <= loop.duration_ms.max

    assert (payments.runs, payments.halted, payments.running) == (1, 1, 0)
    assert payments.halt_reasons == {HaltReason.COMPLETED: 1}
    assert payments.steps_ratio == Distribution(count=1, p50=0.5, p90=0.5, max=0.5)
    assert (payments.at_step_cap, payments.at_step_cap_share) == (0, 0.0)


def test_one_machine(known: SqliteStore) -> None:
    stats = halt_stats(known, machine="payments_retry")
    assert stats.machine == "payments_retry"
    assert [m.machine for m in stats.machines] == ["payments_retry"]
    assert halt_stats(known, machine="nope").machines == ()


def test_a_machine_with_only_running_runs(tmp_path: Path, known: SqliteStore) -> None:
    store = SqliteStore(tmp_path / "live.db")
    try:
        store.start_run(known.get_run("killed"), known.events("killed")[0])
        (only,) = halt_stats(store).machines
    finally:
        store.close()
    assert only == MachineStats(
        machine="agent_loop",
        runs=1,
        halted=0,
        running=1,
        halt_reasons={},
        steps_ratio=None,
        at_step_cap=0,
        at_step_cap_share=None,
        duration_ms=None,
        cost=None,
    )


def test_the_text_tables_of_known_runs(known: SqliteStore) -> None:
    text = format_stats(halt_stats(known))
    lines = text.splitlines()
    assert lines[0] == f"journal: {known.location}"
    for line in [
        "agent_loop: 6 run(s), 5 halted, 1 running",
        "  HALT REASON           RUNS  SHARE       COST       TOKENS",
        "  max_steps                2    40%      $1.50            -",
        "  handoff_requested        2    40%      $0.50            -",
        "  completed                1    20%      $0.50            -",
        "  (running)                1",
        "  MEASURE             p50        p90        max   RUNS",
        "  steps/max          0.25       1.00       1.00      5",
        "  cost              $0.50      $1.00      $1.00      5",
        "  at the step cap (steps/max = 1.0): 2 of 5 halted (40%)",
        "payments_retry: 1 run(s), 1 halted, 0 running",
        "  at the step cap (steps/max = 1.0): 0 of 1 halted (0%)",
    ]:
        assert line in lines
    assert "cap may be too tight" not in text
    assert [line for line in lines if line != line.rstrip()] == []
    assert text.endswith("\n")


# --- durations, costs and `since` on a journal with known times -------------------------------


def test_durations_and_costs_are_exact(timed: SqliteStore) -> None:
    (m,) = halt_stats(timed).machines
    assert m.duration_ms == Distribution(count=4, p50=250.0, p90=60000.0, max=60000.0)
    assert m.cost == Distribution(count=4, p50=0.5, p90=2.0, max=2.0)
    assert m.steps_ratio == Distribution(count=4, p50=1.0, p90=1.0, max=1.0)
    assert (m.at_step_cap, m.at_step_cap_share) == (4, 1.0)


def test_the_text_table_in_full(timed: SqliteStore) -> None:
    assert format_stats(halt_stats(timed, since="2001-02-01")) == (
        f"journal: {timed.location}  since: 2001-02-01T00:00:00.000+00:00\n"
        "\n"
        "agent_loop: 3 run(s), 3 halted, 0 running\n"
        "  HALT REASON           RUNS  SHARE       COST       TOKENS\n"
        "  max_steps                3   100%      $3.25            -\n"
        "  MEASURE             p50        p90        max   RUNS\n"
        "  steps/max          1.00       1.00       1.00      3\n"
        "  duration ms        1500      60000      60000      3\n"
        "  cost              $1.00      $2.00      $2.00      3\n"
        "  at the step cap (steps/max = 1.0): 3 of 3 halted (100%)\n"
        "  every halted run used its whole step budget: the cap may be too tight\n"
    )


@pytest.mark.parametrize(
    ("since", "runs"),
    [
        ("2001-02-01", 3),
        ("2001-02-01T00:00:00", 3),
        ("2001-02-01T01:00:00+01:00", 3),  # the same instant in another zone
        ("2001-02-01T00:00:00.001", 2),
        ("2001-01-01", 4),
        ("2002-01-01", 0),
    ],
)
def test_since_counts_runs_started_at_or_after(timed: SqliteStore, since: str, runs: int) -> None:
    assert sum(m.runs for m in halt_stats(timed, since=since).machines) == runs


def test_since_is_normalised_to_the_journal_format() -> None:
    assert since_key("2025-01-31") == "2025-01-31T00:00:00.000+00:00"
    assert since_key("2025-01-31T12:30:00+02:00") == "2025-01-31T10:30:00.000+00:00"
    with pytest.raises(InvalidInputError, match="since 'last week': not an ISO date"):
        since_key("last week")


def test_a_corrupt_record_leaves_its_cost_out(timed: SqliteStore) -> None:
    conn = sqlite3.connect(timed.path, isolation_level=None)
    try:
        conn.execute("UPDATE runs SET record = '{\"truncat' WHERE run_id = 'timed-2'")
    finally:
        conn.close()
    (m,) = halt_stats(timed).machines
    # Its row no longer verifies: it is counted as unverified, in no other figure.
    assert m.runs == 3
    assert m.unverified == 1
    assert m.cost == Distribution(count=3, p50=0.5, p90=1.0, max=1.0)


@pytest.mark.parametrize(
    ("column", "value", "problem"),
    [
        ("budgets", '{"max_steps": "8"}', "budgets.max_steps '8' is not a positive integer"),
        ("budgets", '{"max_steps": 0}', "budgets.max_steps 0 is not a positive integer"),
        ("halt_reason", "gave_up", "halt_reason 'gave_up' is not a halt reason"),
        ("status", "sleeping", "status 'sleeping' is not 'running', 'paused' or 'halted'"),
        ("steps_used", "eight", "steps_used 'eight' is not an integer"),
        ("record", '{"meters": {"cost": "1"}}', "record.meters.cost '1' is not a number"),
    ],
)
def test_a_corrupt_runs_row_names_the_run(
    timed: SqliteStore, column: str, value: str, problem: str
) -> None:
    conn = sqlite3.connect(timed.path, isolation_level=None)
    try:
        conn.execute(f"UPDATE runs SET {column} = ? WHERE run_id = 'timed-1'", (value,))  # noqa: S608
    finally:
        conn.close()
    with pytest.raises(JournalError, match="corrupt runs row") as info:
        halt_stats(timed)
    assert info.value.run_id == "timed-1"
    assert problem in str(info.value)
    assert timed.path in str(info.value)


def test_an_empty_journal(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "empty.db")
    try:
        stats = halt_stats(store, machine="agent_loop")
    finally:
        store.close()
    assert stats.machines == ()
    assert format_stats(stats) == f"journal: {stats.journal}  machine: agent_loop\nno runs\n"


# --- JSON -------------------------------------------------------------------------------------


def test_stats_round_trip_through_json(known: SqliteStore) -> None:
    stats = halt_stats(known, since="2000-01-01")
    text = json.dumps(serde.unstructure(stats), indent=2)
    data = json.loads(text)
    assert serde.structure(data, Stats) == stats
    loop = data["machines"][0]
    assert loop["halt_reasons"] == {"max_steps": 2, "handoff_requested": 2, "completed": 1}
    assert list(loop["halt_reasons"]) == ["max_steps", "handoff_requested", "completed"]
    assert loop["steps_ratio"] == {"count": 5, "p50": 0.25, "p90": 1.0, "max": 1.0}
    assert data["since"] == "2000-01-01T00:00:00.000+00:00"
    assert sorted(data) == ["journal", "machine", "machines", "since"]
