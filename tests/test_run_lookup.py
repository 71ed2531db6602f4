"""How a store finds runs for the CLI: by id prefix, the latest one, and `runs`' filters —
the same answers from every backend (the `store` fixture is SQLite and PostgreSQL)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsm_agent.halt import HaltReason, terminal_state
from fsm_agent.journal.store import RunRow, Store
from fsm_agent.run_ids import (
    CANDIDATES_SHOWN,
    LATEST,
    AmbiguousRunId,
    NoRunsYet,
    RunNotFound,
    resolve_run_id,
)
from fsm_agent.stores.sqlite import SqliteStore
from tests.test_store_contract import (  # noqa: F401 - fixtures
    Backend,
    backend,
    halt_record,
    pg_location,
    pg_server,
    run_row,
    started,
)


@pytest.fixture
def journal(backend: Backend) -> Iterator[Store]:  # noqa: F811
    """A fresh journal of each backend."""
    s = backend.open()
    try:
        yield s
    finally:
        s.close()


IDS = ["3f2a9c0d1e4b", "3f2a9c0d1e4b-retry", "3f88e1a0b2c4", "a1", "a10", "B", "b_x", "zz"]


def add(
    s: Store,
    run_id: str,
    started_at: str,
    machine: str = "agent_loop",
    halt: HaltReason | None = None,
    status: str = "running",
) -> RunRow:
    row = attrs.evolve(run_row(run_id, started_at), machine=machine)
    s.start_run(row, started(run_id))
    if halt is not None:
        record = attrs.evolve(
            halt_record(run_id), halt_reason=halt, terminal_state=terminal_state(halt),
            machine=machine, started_at=started_at,
        )  # fmt: skip
        s.finish_run(record)
    elif status == "paused":
        s.mark_run(run_id, "paused", None, None)
    return s.get_run(run_id)


def test_a_prefix_names_its_one_run_and_a_whole_id_its_own(journal: Store) -> None:
    for n, run_id in enumerate(IDS):
        add(journal, run_id, f"2026-01-0{n + 1}T00:00:00.000+00:00")
    assert resolve_run_id(journal, "3f88") == "3f88e1a0b2c4"
    assert resolve_run_id(journal, "zz") == "zz"
    # a whole id is its own run, though it is also the prefix of another
    assert resolve_run_id(journal, "3f2a9c0d1e4b") == "3f2a9c0d1e4b"
    assert resolve_run_id(journal, "a1") == "a1"
    assert resolve_run_id(journal, "b") == "b_x"  # ids compare as bytes: 'B' is not 'b'
    assert journal.run_ids_from("3f2a", 10) == ["3f2a9c0d1e4b", "3f2a9c0d1e4b-retry"]


def test_an_ambiguous_prefix_lists_its_runs_and_an_unknown_one_says_so(journal: Store) -> None:
    for n, run_id in enumerate(IDS):
        add(journal, run_id, f"2026-01-0{n + 1}T00:00:00.000+00:00")
    with pytest.raises(AmbiguousRunId) as caught:
        resolve_run_id(journal, "3f")
    assert caught.value.candidates == ("3f2a9c0d1e4b", "3f2a9c0d1e4b-retry", "3f88e1a0b2c4")
    assert "'3f' is ambiguous" in str(caught.value)
    assert "3f2a9c0d1e4b, 3f2a9c0d1e4b-retry, 3f88e1a0b2c4" in str(caught.value)
    for unknown in ["3f3", "c", "", "zzz", "@other"]:
        with pytest.raises(RunNotFound):
            resolve_run_id(journal, unknown)


def test_an_ambiguous_prefix_lists_at_most_ten(journal: Store) -> None:
    for n in range(CANDIDATES_SHOWN + 3):
        add(journal, f"run-{n:02d}", f"2026-01-01T00:00:{n:02d}.000+00:00")
    with pytest.raises(AmbiguousRunId) as caught:
        resolve_run_id(journal, "run-")
    assert len(caught.value.candidates) == CANDIDATES_SHOWN
    assert "more than 10 runs' ids" in str(caught.value)
    assert str(caught.value).count("run-") == CANDIDATES_SHOWN + 1  # the prefix, then ten


def test_latest_is_the_run_started_last(journal: Store) -> None:
    with pytest.raises(NoRunsYet, match=r"@latest: no run in .* yet"):
        resolve_run_id(journal, LATEST)
    add(journal, "b-older", "2026-01-02T00:00:00.000+00:00")
    add(journal, "a-newest", "2026-01-03T00:00:00.000+00:00")
    add(journal, "c-oldest", "2026-01-01T00:00:00.000+00:00")
    assert journal.latest_run_id() == "a-newest"
    assert resolve_run_id(journal, LATEST) == "a-newest"
    assert journal.list_runs(1)[0].run_id == "a-newest"  # the first line of `runs`


@pytest.fixture
def mixed(journal: Store) -> Store:
    """Runs of two machines over four days, in every status."""
    add(journal, "r1", "2026-01-01T10:00:00.000+00:00", halt=HaltReason.COMPLETED)
    add(journal, "r2", "2026-01-02T10:00:00.000+00:00", halt=HaltReason.MAX_STEPS)
    add(journal, "r3", "2026-01-02T11:00:00.000+00:00", "payments", halt=HaltReason.MAX_STEPS)
    add(journal, "r4", "2026-01-03T10:00:00.000+00:00", "payments", status="paused")
    add(journal, "r5", "2026-01-04T10:00:00.000+00:00")
    add(journal, "r6", "2026-01-04T11:00:00.000+00:00", halt=HaltReason.MAX_STEPS)
    return journal


def ids(rows: list[RunRow]) -> list[str]:
    return [r.run_id for r in rows]


def test_runs_filter_by_each_field_and_by_all_at_once(mixed: Store) -> None:
    assert ids(mixed.list_runs()) == ["r6", "r5", "r4", "r3", "r2", "r1"]
    assert ids(mixed.list_runs(machine="payments")) == ["r4", "r3"]
    assert ids(mixed.list_runs(halt_reason=HaltReason.MAX_STEPS)) == ["r6", "r3", "r2"]
    assert ids(mixed.list_runs(status="paused")) == ["r4"]
    assert ids(mixed.list_runs(status="running")) == ["r5"]
    assert ids(mixed.list_runs(status="halted")) == ["r6", "r3", "r2", "r1"]
    since, until = "2026-01-02T10:00:00.000+00:00", "2026-01-03T10:00:00.000+00:00"
    assert ids(mixed.list_runs(since=since)) == ["r6", "r5", "r4", "r3", "r2"]  # inclusive
    assert ids(mixed.list_runs(until=until)) == ["r4", "r3", "r2", "r1"]  # inclusive
    assert ids(mixed.list_runs(since=since, until=until)) == ["r4", "r3", "r2"]
    both = mixed.list_runs(
        machine="agent_loop", halt_reason=HaltReason.MAX_STEPS, status="halted", since=since
    )
    assert ids(both) == ["r6", "r2"]
    assert mixed.list_runs(machine="nobody") == []
    assert mixed.list_runs(halt_reason=HaltReason.WALL_CLOCK) == []


def test_the_limit_counts_the_runs_that_pass_the_filters(mixed: Store) -> None:
    # Newest first, r5 and r4 do not match: a limit applied before the filter would drop r3.
    assert ids(mixed.list_runs(2, halt_reason=HaltReason.MAX_STEPS)) == ["r6", "r3"]
    assert ids(mixed.list_runs(1, machine="payments")) == ["r4"]
    assert len(mixed.list_runs(None)) == 6


@settings(max_examples=40, deadline=None)
@given(
    st.sets(st.text("ab.-_0", min_size=1, max_size=5).map(lambda s: "r" + s), max_size=12),
    st.text("rab.-_0", max_size=4),
)
def test_resolution_is_what_a_scan_of_every_id_says(run_ids: set[str], prefix: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        s = SqliteStore(Path(tmp) / "j.db")
        try:
            for n, run_id in enumerate(sorted(run_ids)):
                add(s, run_id, f"2026-01-01T00:00:{n:02d}.000+00:00")
            matches = sorted(i for i in run_ids if i.startswith(prefix)) if prefix else []
            if prefix in run_ids:
                assert resolve_run_id(s, prefix) == prefix
            elif len(matches) == 1:
                assert resolve_run_id(s, prefix) == matches[0]
            elif not matches:
                with pytest.raises(RunNotFound):
                    resolve_run_id(s, prefix)
            else:
                with pytest.raises(AmbiguousRunId) as caught:
                    resolve_run_id(s, prefix)
                assert list(caught.value.candidates) == matches[:CANDIDATES_SHOWN]
        finally:
            s.close()
