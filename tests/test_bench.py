"""The benchmark's own logic (`tests/bench/`): the targets checklist judged from synthetic
samples, ratios paired by round, the scaling schedule, and the declaration count. The
benchmark itself runs in CI as `python -m tests.bench.run --smoke`; nothing here times
anything."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.bench import checklist, declarations, peers, scaling
from tests.bench.report import Metric, Samples, Target, ratio, render_targets, to_json
from tests.bench.scaling import Scale
from tests.bench.workload import Scratch

FULL = Scale.of(scaling.SIZES)
ROUNDS = 3


def _table(samples: dict[str, list[list[float]]], scale: Scale = FULL) -> dict[str, Samples]:
    """Every row of the real table, filled from `samples` (rounds of values), else empty."""
    table = {}
    for m in checklist.metrics(scale):
        rounds = samples.get(m.name, [[] for _ in range(ROUNDS)])
        table[m.name] = Samples(m, [list(r) for r in rounds])
    return table


def _target(label_start: str, scale: Scale = FULL) -> Target:
    (found,) = [t for t in checklist.targets(scale) if t.label.startswith(label_start)]
    return found


def test_every_target_names_rows_of_the_table() -> None:
    for scale in (FULL, Scale.of((30, 100, 300, 1000))):
        names = {m.name for m in checklist.metrics(scale)}
        for t in checklist.targets(scale):
            assert t.metric in names, t.label
            assert t.baseline is None or t.baseline in names, t.label


def test_a_ratio_target_met_and_one_missed_from_the_same_samples() -> None:
    # per-round ratios 1.5, 2.5, 1.8: the median is 1.8
    table = _table({"naive": [[20.0], [20.0], [20.0]], "fsm-agent": [[30.0], [50.0], [36.0]]})
    bound = _target("fsm-agent (default isolation)")
    stretch = _target("stretch: fsm-agent / naive")
    assert bound.verdict(table) == ("met", pytest.approx(1.8))
    assert stretch.verdict(table) == ("missed", pytest.approx(1.8))
    lines = render_targets([bound, stretch], table).splitlines()
    assert lines[0] == (
        "[x] fsm-agent (default isolation) per journaled transition / naive <= 2.00x: met, 1.80x"
    )
    assert lines[1] == "[ ] stretch: fsm-agent / naive <= 1.50x: missed, 1.80x"


def test_ratios_pair_rounds_and_skip_those_a_side_missed() -> None:
    # the largest size is measured in rounds 1 and 3 only: round 2's 1,000 sample is unpaired
    small, big = scaling.us_metric(1_000), scaling.us_metric(100_000)
    table = _table({small: [[100.0], [1.0], [100.0]], big: [[110.0], [], [130.0]]})
    r = ratio(table[big], table[small])
    assert r is not None
    assert r.per_round == pytest.approx((1.1, 1.3))
    target = _target("per transition at 100,000")
    assert target.verdict(table) == ("missed", pytest.approx(1.2))


def test_at_least_at_most_and_equal_targets() -> None:
    replay = _target("replay")
    rss = _target("peak RSS at 100,000")
    copies = _target("each declaration stored once")
    replay_row, rss_row = checklist.REPLAY, scaling.rss_metric(100_000)
    met = _table({
        replay_row: [[120e3], [100e3], [90e3]],  # median 100,000: at least the bound
        rss_row: [[39.9], [], []],
        declarations.METRIC: [[1.0]] * 3,
    })  # fmt: skip
    assert [t.verdict(met)[0] for t in (replay, rss, copies)] == ["met"] * 3
    missed = _table({
        replay_row: [[99e3], [99.9e3], [150e3]],
        rss_row: [[38.0], [40.5], []],  # the max counts
        declarations.METRIC: [[1.0], [5.0], [1.0]],
    })  # fmt: skip
    assert [t.verdict(missed) for t in (replay, rss, copies)] == [
        ("missed", 99.9e3), ("missed", 40.5), ("missed", 5.0)
    ]  # fmt: skip
    # no copy found is not "stored once": the text went where the check cannot see it
    assert copies.verdict(_table({declarations.METRIC: [[0.0]] * 3}))[0] == "missed"


def test_a_report_target_is_stated_never_judged_and_a_skip_says_why() -> None:
    pg = _target("PostgreSQL store")
    table = _table({checklist.POSTGRES: [[900.0]] * 3, "fsm-agent": [[300.0]] * 3})
    assert pg.verdict(table) == ("reported", pytest.approx(3.0))
    assert render_targets([pg], table).startswith("[i] PostgreSQL store")
    table[checklist.POSTGRES].skipped = "no DSN"
    assert pg.verdict(table) == ("not measured", None)
    assert render_targets([pg], table).endswith(": not measured (fsm-agent postgres: no DSN)")


def test_the_json_checklist_carries_bound_verdict_and_figure() -> None:
    table = _table({"naive": [[20.0]] * 3, "fsm-agent": [[50.0]] * 3})
    targets = checklist.targets(FULL)
    out = to_json(table, targets, {"format": "x"})
    first = out["targets"][0]
    assert first["verdict"] == "missed"
    assert first["figure"] == pytest.approx(2.5)
    assert (first["bound"], first["direction"], first["baseline"]) == (2.0, "at_most", "naive")
    assert len(out["targets"]) == len(targets)


def test_the_big_sizes_are_measured_in_fewer_rounds() -> None:
    rounds = 15
    counts = dict.fromkeys(FULL.sizes, 0)
    for index in range(rounds):
        for size in FULL.in_round(rounds, index):
            counts[size] += 1
    assert counts == {100: 15, 1_000: 15, 10_000: 5, 100_000: 3}
    assert FULL.in_round(rounds, 0) == FULL.sizes  # the first round measures every size
    assert (FULL.base, FULL.largest) == (1_000, 100_000)
    assert Scale.of((30, 100, 300)).base == 100


def _file_with(path: Path, needle: bytes) -> None:
    conn = sqlite3.connect(path)
    conn.execute('CREATE TABLE "odd ""name""" (t TEXT, b BLOB, n INTEGER)')
    conn.execute("CREATE TABLE other (k TEXT PRIMARY KEY, t TEXT) WITHOUT ROWID")
    rows = [(needle.decode(), None, 1), ("x" + needle.decode() + "y", None, 2),
            (None, b"\0" + needle, 3), ("almost " + needle.decode()[:-1], None, 4)]  # fmt: skip
    conn.executemany('INSERT INTO "odd ""name""" VALUES (?, ?, ?)', rows)
    conn.execute("INSERT INTO other VALUES ('a', ?)", (needle.decode(),))
    conn.commit()
    conn.close()


def test_cells_holding_reads_every_table_and_column(tmp_path: Path) -> None:
    needle = b"name: agent_loop\ninitial: drafting\n"
    _file_with(tmp_path / "j.db", needle)
    assert declarations.cells_holding(tmp_path / "j.db", needle) == 4


def test_the_declaration_is_found_in_a_real_journal(tmp_path: Path) -> None:
    scratch = Scratch(str(tmp_path))
    try:
        found = declarations.copies(scratch, runs=3)
    finally:
        scratch.close()
    # once per sha256, or once per run; never nowhere
    assert found in (1.0, 3.0)


def test_a_metric_without_samples_is_not_measured() -> None:
    samples = Samples(Metric("x", "ms"), [[], []])
    target = Target("x", "x", "median", 1.0)
    assert target.verdict({"x": samples}) == ("not measured", None)


def test_the_burr_check_refuses_what_is_not_one_commit_per_step_at_wal_normal(
    tmp_path: Path,
) -> None:
    db = tmp_path / "burr.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE burr_state (state TEXT)")
    conn.executemany("INSERT INTO burr_state VALUES (?)", [("{}",)] * 4)
    conn.commit()
    try:
        peers._burr_check(db, synchronous=1, commits=4, actions=4)  # as Burr does it
        for synchronous, commits, actions in ((2, 4, 4), (1, 1, 4), (1, 4, 5)):
            with pytest.raises(RuntimeError, match="Burr's persister"):
                peers._burr_check(db, synchronous, commits, actions)
        conn.execute("PRAGMA journal_mode = DELETE")
        with pytest.raises(RuntimeError, match="journal_mode delete"):
            peers._burr_check(db, synchronous=1, commits=4, actions=4)
    finally:
        conn.close()
