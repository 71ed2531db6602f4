"""Chain version 4's journal content (`fsm_agent.journal.content`): what the run's first event
already says is left out of every later row and restored on reading, so every store, every
run file and verify give back Events EQUAL to the ones appended; orjson's text where it is
correct, the stdlib's where it is not; a corrupt row names its column.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import sqlite3
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsm_agent.errors import JournalError
from fsm_agent.halt import HaltReason
from fsm_agent.journal import chain_hash, content, serde
from fsm_agent.journal.chain import verify_run
from fsm_agent.journal.chain_hash import UNKEYED_3, UNKEYED_4, base_of, event_columns
from fsm_agent.journal.runfile import export_run, import_run, verify_run_file
from fsm_agent.journal.store import Event, Facts, GuardResult
from fsm_agent.runtime.budgets import Budgets, Meters
from fsm_agent.runtime.lanes import ControlPlane, Lane
from fsm_agent.runtime.proposals import FinalAnswer, HandoffRequest, Rejection, ToolCall
from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.snapshot import PendingEffect, Receipted, Snapshot, ToolOutcome
from fsm_agent.stores import codec
from fsm_agent.stores.sqlite import SqliteStore
from tests.lab import LOOKUP, MISS, lab_run
from tests.test_store_contract import (  # noqa: F401 - fixtures
    Backend,
    backend,
    pg_location,
    pg_server,
    run_row,
)

BUDGETS = Budgets(
    max_steps=8, wall_clock_ms=15000, max_cost=1.0, tool_timeout_ms=5000, max_retries=2
)
STATES = ("drafting", "tool_pending", "awaiting_receipts", "done", "needs_human")
TRIGGERS = (None, "tool_call", "tool_returned", "collected", "answer", "no_transition", "retry")
VALUES: list[Any] = [None, 0, 1, -1, 2**40, 1.5, -0.0, True, False, "x", "é 🔁", "", [], {},
                     [1, "a", None], {"k": [1, {"z": None}]}, {"n": 1.0}]  # fmt: skip


def _value(rng: random.Random) -> Any:
    return rng.choice(VALUES)


def _tool(rng: random.Random) -> ToolOutcome:
    return ToolOutcome(
        name=rng.choice(("lookup", "act")),
        args={"q": _value(rng)},
        status=rng.choice(("returned", "failed", "timed_out", "interrupted")),
        receipts=rng.choice(((), (Receipt(status=200, id="cap_1"),))),
        observation=_value(rng),
        final=rng.choice((None, "v1")),
        error=rng.choice((None, "boom")),
        retryable=rng.random() < 0.3,
        cost=rng.choice((0.0, 0.01)),
        duration_ms=rng.choice((0, 12)),
        outcome_unknown=rng.random() < 0.2,
        side_effect=rng.random() < 0.5,
    )


def _proposal(rng: random.Random) -> Any:
    return rng.choice(
        (
            None,
            ToolCall(name="lookup", args={"q": _value(rng)}),
            FinalAnswer(text="swordfish", ignored=("x",)),
            HandoffRequest(why="stuck", args={"n": 1}),
            Rejection(kind="schema_fail", detail="bad json"),
        )
    )


def _snapshot(rng: random.Random, seq: int, run: dict[str, Any]) -> Snapshot:
    """A snapshot whose run-wide fields usually stay as the run has them (and sometimes
    change: an operator raises a budget, the allowlist or lane changes, a field goes back
    to its default while the base holds another)."""
    if rng.random() < 0.15:  # a raise, or back to the defaults of the field
        run["budgets"] = attrs.evolve(run["budgets"], max_steps=run["budgets"].max_steps + 5)
    if rng.random() < 0.1:
        run["allowlist"] = rng.choice(((), ("lookup",), ("lookup", "act")))
    if rng.random() < 0.1:
        run["rules"] = rng.choice((1, 2))
    if rng.random() < 0.05:
        run["halt_lane"] = rng.choice((Lane(kind="local_fn", tier="local"), Lane("http", "paid")))
    if rng.random() < 0.05:
        run["control"] = rng.choice((ControlPlane(), ControlPlane(halt="judge")))
    tool = rng.choice((None, _tool(rng)))
    return Snapshot(
        state=rng.choice(STATES),
        outcome=rng.choice(TRIGGERS),
        next_action=rng.choice((None, None, "model", "tool")),
        clock_ms=seq * 7 + rng.choice((0, 0, 1)),
        meters=Meters(steps_used=seq // 3, tool_calls=seq // 4, cost=rng.choice((0.0, 0.25))),
        proposal=_proposal(rng),
        tool=tool,
        evidence=rng.random() < 0.3,
        grounded=rng.choice(((), ("v1",))),
        unreceipted=rng.choice(((), (PendingEffect(1, "act", {"q": 1}, "no receipts"),))),
        unreceipted_omitted=rng.choice((0, 0, 3)),
        receipted=rng.choice(((), (Receipted(2, "lookup", ("v1",), ("cap_1",)),))),
        privileged=rng.choice(((), ("act",))),
        repeats=rng.choice((0, 1, 2)),
        thrash_limit=rng.choice((0, 3)),
        repair=rng.choice(("none", "refused", "repaired", "failed")),
        judge=rng.choice(("none", "agree", "veto", "ignored")),
        **run,
    )


def _guards(rng: random.Random) -> tuple[GuardResult, ...]:
    names = ("not tool_allowed", "thrashing", "budget_tripped", "goal_satisfied")
    return tuple(
        GuardResult(rng.randrange(25), rng.choice(names), rng.random() < 0.5)
        for _ in range(rng.randrange(4))
    )


def _event(rng: random.Random, run_id: str, seq: int, run: dict[str, Any]) -> Event:
    snapshot = _snapshot(rng, seq, run)
    facts = None
    if seq and rng.random() < 0.8:
        tool = rng.choice((snapshot.tool, snapshot.tool, None, _tool(rng)))
        facts = Facts(
            action=rng.choice(("model", "tool", "receipts", "judge", "control")),
            reply=_value(rng),
            reply_cost=rng.choice((0.0, 0.002)),
            tool=tool,
            error=rng.choice((None, "timeout")),
            repaired=rng.choice((None, {"answer": "x"})),
        )
    kinds = ("transition", "transition", "resumed", "operator")
    kind = "started" if seq == 0 else rng.choice(kinds)
    return Event(
        run_id=run_id,
        seq=seq,
        kind=kind,  # type: ignore[arg-type]
        at_ms=seq * 7,
        wall_time=f"2025-01-01T00:00:{seq % 60:02d}Z",
        source=None if seq == 0 else rng.choice((*STATES, None)),
        dest=rng.choice(STATES),
        trigger=None if seq == 0 else rng.choice(TRIGGERS),
        snapshot=snapshot,
        guards=_guards(rng),
        check=_guards(rng),
        facts=facts,
        halt=rng.choice((None, None, None, HaltReason.COMPLETED, HaltReason.MAX_STEPS)),
        retry=rng.random() < 0.2,
        note=rng.choice((None, "note — ✓")),
        control=rng.choice((None, None, 3)),
    )


def generated_run(seed: int, run_id: str = "run-1") -> list[Event]:
    """One made-up run: its first snapshot's run-wide fields sometimes at their defaults,
    sometimes not; later events raising budgets, changing lanes, retrying, handing off…"""
    rng = random.Random(seed)  # noqa: S311 - reproducible test data
    run = {
        "budgets": BUDGETS,
        "allowlist": rng.choice(((), ("lookup",))),
        "rules": rng.choice((1, 2)),
        "halt_lane": Lane(kind="local_fn", tier="local"),
        "control": ControlPlane(),
    }
    events = [_event(rng, run_id, seq, run) for seq in range(rng.randrange(1, 14))]
    # a chain goes on past a halt only with a person's decision on a wait: a made-up run
    # halts at its end, if at all
    return [e if e is events[-1] else attrs.evolve(e, halt=None) for e in events]


def _rows(events: list[Event]) -> list[dict[str, Any]]:
    """The rows a store keeps of a v4 run's events (column names as the schema's)."""
    names = ("run_id", "seq", "kind", "at_ms", "wall_time", "source", "dest", "trigger", "halt",
             "retry", "guards", "checks", "snapshot", "facts", "note", "control")  # fmt: skip
    base = base_of(events, 4)
    return [dict(zip(names, event_columns(e, 4, base), strict=True)) for e in events]


def _fail(message: str, run_id: str | None) -> JournalError:
    return JournalError(message, path="test", run_id=run_id)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_every_generated_run_decodes_to_the_events_written(seed: int) -> None:
    events = generated_run(seed)
    rows = _rows(events)
    assert all(content.is_v4(r["snapshot"]) for r in rows)
    assert codec.events(rows, _fail) == events
    # one row read on its own, against its run's first row, as `last_event` reads it
    assert codec.event(rows[-1], _fail, rows[0]) == events[-1]
    # decoding and writing again gives the same text (run files re-encode to verify)
    again = _rows(codec.events(rows, _fail))
    assert again == rows


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_a_repeated_snapshot_text_reads_as_it_does_on_its_own(seed: int) -> None:
    # a run often writes the same snapshot text in consecutive rows: one read of the rows
    # builds it once, and must give what each row gives read on its own
    rows = _rows(generated_run(seed))
    rng = random.Random(seed)  # noqa: S311 - reproducible test data
    for i in range(2, len(rows)):
        if rng.random() < 0.6:
            rows[i]["snapshot"] = rows[i - 1]["snapshot"]
    alone = []
    for r in rows:
        try:
            alone.append(codec.event(r, _fail, rows[0]))
        except JournalError as exc:  # a copied text the row's own columns do not fit
            alone.append(str(exc))
    for i in range(len(rows)):  # a read of rows stops at its first corrupt one
        errors = [e for e in alone[: i + 1] if type(e) is str]
        try:
            got: Any = codec.events(rows[: i + 1], _fail)[-1]
        except JournalError as exc:
            got = str(exc)
        assert got == (errors[0] if errors else alone[i])
    assert any(type(e) is Event for e in alone)


@pytest.mark.parametrize("values", [(1, True, 1.0, 1), ("a", "a", 2, 2.0), (None, 0, False, 0)])
def test_a_tool_outcome_repeated_from_the_row_before_keeps_its_json_types(
    values: tuple[Any, ...],
) -> None:
    # JSON-equal values of other types (1, 1.0, true) are not the same written value
    rows = _rows(generated_run(11))
    while len(rows) < len(values) + 1:
        rows = rows + [
            {**r, "seq": len(rows) + i} for i, r in enumerate(_rows(generated_run(11))[1:])
        ]
    for seq, value in enumerate(values, start=1):
        data = content.written(rows[seq]["snapshot"])
        tool = {"name": "t", "args": {"x": value}, "status": "returned", "observation": [value]}
        rows[seq]["snapshot"] = content.dumps([content.MARK, {**data, "tool": tool}])
        rows[seq]["facts"] = None
    rows = rows[: len(values) + 1]
    read = codec.events(rows, _fail)
    assert read == [codec.event(r, _fail, rows[0]) for r in rows]
    for event, value in zip(read[1:], values, strict=True):
        assert event.snapshot.tool is not None
        assert type(event.snapshot.tool.args["x"]) is type(value)
        assert type(event.snapshot.tool.observation[0]) is type(value)


def test_a_corrupt_row_repeating_the_previous_snapshot_text_is_refused() -> None:
    rows = _rows(generated_run(7))
    while len(rows) < 3:
        rows = rows + _rows(generated_run(7))[1:]
    rows[2]["snapshot"] = rows[1]["snapshot"]
    rows[2]["at_ms"] = "soon"  # the row's own column no longer reads
    codec.events(rows[:2], _fail)
    with pytest.raises(JournalError, match="corrupt event seq 2"):
        codec.events(rows[:3], _fail)


def test_facts_read_once_per_text_share_nothing_mutable() -> None:
    rows = _rows(generated_run(3))
    row = {**rows[-1], "facts": '{"action":"model","reply":{"a":[1]}}'}
    plain = {**rows[-1], "facts": '{"action":"receipts"}'}
    first, again = (codec.event(row, _fail, rows[0]) for _ in range(2))
    assert first.facts == again.facts == Facts(action="model", reply={"a": [1]})
    assert first.facts is not None
    assert again.facts is not None
    assert first.facts.reply is not again.facts.reply  # a caller may change its own copy
    read = [codec.event(plain, _fail, rows[0]) for _ in range(2)]
    assert [e.facts for e in read] == [Facts(action="receipts")] * 2


@pytest.fixture
def v4(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chain_hash, "CURRENT_VERSION", 4)


@pytest.mark.usefixtures("v4")
def test_generated_runs_read_back_equal_from_each_store_and_through_run_files(
    backend: Backend,  # noqa: F811 - the contract tests' fixture
    tmp_path: Path,
) -> None:
    store, copy = backend.open(), SqliteStore(tmp_path / "copy.db")
    try:
        for seed in range(40):
            run_id = f"run-{seed}"
            events = generated_run(seed, run_id)
            store.start_run(run_row(run_id), events[0])
            for i in range(1, len(events), 3):  # one at a time, and several per commit
                store.append_many(events[i : i + 3]) if i % 2 else store.append(events[i])
                if i + 1 < len(events) and i % 2 == 0:
                    store.append_many(events[i + 1 : i + 3])
            assert store.get_run(run_id).chain == UNKEYED_4
            assert store.events(run_id) == events
            assert store.last_event(run_id) == events[-1]
            assert verify_run(store, run_id).ok
            run_file = export_run(store, run_id)
            assert run_file.events == tuple(events)
            assert not verify_run_file(run_file).findings
            import_run(copy, run_file)
            assert copy.events(run_id) == events
            assert verify_run(copy, run_id).ok
        reopened = backend.open()  # a new store reads the base of a run from the journal
        try:
            events = generated_run(0, "run-0")
            assert reopened.last_event("run-0") == events[-1]
            extra = attrs.evolve(events[-1], seq=len(events))
            reopened.append(extra)
            assert reopened.events("run-0") == [*events, extra]
            assert verify_run(reopened, "run-0").ok
        finally:
            reopened.close()
    finally:
        store.close()
        copy.close()


class Capturing(SqliteStore):
    """A store that keeps a copy of every event it is given."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.given: list[Event] = []

    def start_run(self, run: Any, first: Event) -> str:
        self.given.append(first)
        return super().start_run(run, first)

    def append_many(self, events: Any) -> str:
        self.given.extend(events)
        return super().append_many(events)


@pytest.mark.usefixtures("v4")
@pytest.mark.parametrize(
    "replies",
    [[LOOKUP, {"answer": "swordfish"}], [MISS, MISS, MISS, LOOKUP, {"answer": "swordfish"}],
     ["not json", MISS, {"handoff": {"why": "stuck"}}], [{"answer": "made up"}] * 9],
    ids=["lookup", "retries", "handoff", "ungrounded"],
)  # fmt: skip
def test_real_runs_read_back_the_events_the_worker_appended(
    tmp_path: Path, replies: list[Any]
) -> None:
    store = Capturing(tmp_path / "j.db")
    try:
        record = lab_run(tmp_path, replies, store=store)
        assert store.events(record.run_id) == store.given
        assert verify_run(store, record.run_id).ok
        rows = sqlite3.connect(tmp_path / "j.db").execute("SELECT snapshot FROM events")
        assert all(content.is_v4(r[0]) for r in rows)
    finally:
        store.close()


@pytest.mark.parametrize("version", [2, 3])
def test_runs_of_older_versions_keep_their_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    monkeypatch.setattr(chain_hash, "CURRENT_VERSION", version)
    store = Capturing(tmp_path / "j.db")
    try:
        record = lab_run(tmp_path, [LOOKUP, {"answer": "swordfish"}], store=store)
        assert store.get_run(record.run_id).chain == ("sha256" if version == 2 else UNKEYED_3)
        rows = sqlite3.connect(tmp_path / "j.db").execute("SELECT snapshot FROM events")
        texts = [r[0] for r in rows]
        assert texts
        assert all(t.startswith("{") for t in texts)
        assert texts == [serde.dumps_compact(e.snapshot) for e in store.given]
        assert store.events(record.run_id) == store.given
    finally:
        store.close()


# --- the text ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_the_infinities_are_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="JSON compliant"):
        content.dumps({"x": [1, bad]})


@pytest.mark.parametrize(
    "value",
    [
        {"big": 2**70, "neg": -(2**70)},
        {"s": "lone \ud800 surrogate"},
        {1: "int key", None: "null key"},
        {"k": {2.5: "float key"}, "t": "é"},
        {"mixed": [2**64, "é", {3: None}]},
        {"plain": ["é 🔁", 1e16, 1.5, -0.0, None]},
    ],
    ids=["big-int", "surrogate", "non-str-keys", "float-key", "mixed", "plain"],
)
def test_the_text_is_a_function_of_the_value(value: Any) -> None:
    text = content.dumps(value)
    read = content.loads(text)
    assert read == serde.loads(text)  # as the journal's reader of older texts reads it
    assert read == json.loads(json.dumps(value))  # the value the journal always kept
    assert content.dumps(read) == text  # written again: the same text


def test_orjson_writes_what_it_takes_and_the_stdlib_what_it_does_not() -> None:
    assert content.dumps({"t": "é"}) == '{"t":"é"}'  # orjson: UTF-8, not \\u escapes
    assert content.dumps({"b": 2**70}) == '{"b":1180591620717411303424} '
    assert content.dumps({"s": "\ud800"}) == '{"s":"\\ud800"} '
    assert content.loads('{"b":1180591620717411303424} ') == {"b": 2**70}
    assert content.dumps({1: "a"}) == '{"1":"a"}'


@pytest.mark.parametrize(
    "value",
    [datetime(2025, 1, 1), dataclasses.make_dataclass("X", [])(), {1, 2}],
    ids=["datetime", "dataclass", "set"],
)
def test_a_value_json_has_no_form_for_is_refused_as_before(value: Any) -> None:
    with pytest.raises(TypeError):
        serde.encode_compact({"v": value})
    with pytest.raises(TypeError):
        content.dumps({"v": value})


# --- corrupt and edited rows ------------------------------------------------------------------


@pytest.fixture
def journal(tmp_path: Path, v4: None) -> tuple[Path, str]:
    record = lab_run(tmp_path, [LOOKUP, {"answer": "swordfish"}])
    return tmp_path / "j.db", record.run_id


def _edit(db: Path, column: str, text: str, seq: int = 2) -> None:
    conn = sqlite3.connect(db)
    conn.execute("DROP TRIGGER events_no_update")
    conn.execute(f"UPDATE events SET {column} = ? WHERE seq = ?", (text, seq))  # noqa: S608
    conn.commit()
    conn.close()


@pytest.mark.parametrize(
    ("column", "text", "named"),
    [
        ("snapshot", "[4,{", "snapshot"),
        ("snapshot", '[4,{"budgets":1}]', "budgets"),
        ("snapshot", '[4,{"x":1}]', "snapshot"),
        ("snapshot", "[4,[]]", "snapshot"),
        ("guards", "[[1,2]]", "guards"),
        ("checks", '[{"transition":1}]', "checks"),
        ("facts", '{"action":"tool","tool":true,"x":1}', "facts"),
    ],
)
def test_a_corrupt_row_names_its_column(
    journal: tuple[Path, str], column: str, text: str, named: str
) -> None:
    db, run_id = journal
    _edit(db, column, text)
    store = SqliteStore(db)
    try:
        with pytest.raises(JournalError) as info:
            store.events(run_id)
        assert "corrupt event seq 2" in str(info.value)
        assert named in str(info.value)
    finally:
        store.close()


def test_an_edited_content_row_is_caught_by_verify(journal: tuple[Path, str]) -> None:
    db, run_id = journal
    conn = sqlite3.connect(db)
    (text,) = conn.execute("SELECT snapshot FROM events WHERE seq = 2").fetchone()
    conn.close()
    assert content.is_v4(text)
    _edit(db, "snapshot", text.replace('"steps_used":1', '"steps_used":0'))
    store = SqliteStore(db)
    try:
        report = verify_run(store, run_id)
        assert not report.ok
        assert [f.seq for f in report.findings][:1] == [2]
    finally:
        store.close()


def test_the_row_shrinks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same run, in version 3 and in version 4: its rows' JSON columns lose more than a
    third of their bytes."""
    sizes = []
    for version in (3, 4):
        monkeypatch.setattr(chain_hash, "CURRENT_VERSION", version)
        (tmp_path / str(version)).mkdir()
        lab_run(tmp_path / str(version), [MISS, LOOKUP, {"answer": "swordfish"}])
        conn = sqlite3.connect(tmp_path / str(version) / "j.db")
        sql = "SELECT sum(length(guards) + length(checks) + length(snapshot)) FROM events"
        sizes.append(conn.execute(sql).fetchone()[0])
        conn.close()
    assert sizes[1] < sizes[0] * 0.65, sizes


def test_the_text_is_the_same_in_every_process() -> None:
    """No set or hash order reaches the text: two processes with different hash seeds
    write the same columns for the same run."""
    code = (
        "from tests.test_content_v4 import _rows, generated_run;"
        "print([r for s in range(30) for r in _rows(generated_run(s))])"
    )
    texts = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(texts) == 1
