"""Run files against real SQLite journals: export → write → read → import gives back the
same run, byte for byte; a corrupt file is refused naming the file and the JSON path."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from fsm_agent.errors import InvalidInputError, JournalError
from fsm_agent.examples.scenarios import SCENARIOS, run_scenario
from fsm_agent.journal.runfile import (
    RUN_FILE_FORMAT,
    RunExistsError,
    RunFile,
    RunFileError,
    export_run,
    import_run,
    read_run_file,
    run_file_json,
    write_run_file,
)
from fsm_agent.journal.store import RunRow
from fsm_agent.run_ids import RunNotFound
from fsm_agent.runtime.record import atomic_write_text
from fsm_agent.stores.sqlite import SqliteStore

#: Every scenario but the one that waits a real second for its wall clock.
FAST = [s for s in SCENARIOS if s.name != "halt_lab.wall_clock"]


@attrs.frozen
class Journal:
    """A journal file holding one halted run per fast scenario, and one killed run."""

    path: Path
    run_ids: dict[str, str]
    killed: str


def _kill_after_start(store: SqliteStore, halted: RunRow) -> str:
    """A run whose process died right after it started: a row, one event, no record."""
    first = store.events(halted.run_id)[0]
    killed = attrs.evolve(
        halted,
        run_id="killed-run",
        status="running",
        state=first.dest,
        steps_used=0,
        halt_reason=None,
        ended_at=None,
        record=None,
    )
    store.start_run(killed, attrs.evolve(first, run_id=killed.run_id))
    return killed.run_id


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Journal:
    folder = tmp_path_factory.mktemp("source")
    path = folder / "source.db"
    store = SqliteStore(path)
    try:
        ids = {
            s.name: run_scenario(s, store=store, record_path=folder / f"{n}.json").run_id
            for n, s in enumerate(FAST)
        }
        killed = _kill_after_start(store, store.get_run(ids["halt_lab.looping"]))
    finally:
        store.close()
    return Journal(path=path, run_ids=ids, killed=killed)


@pytest.fixture
def source(journal: Journal) -> Iterator[SqliteStore]:
    s = SqliteStore(journal.path)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def target(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(tmp_path / "target.db")
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def looping(source: SqliteStore, journal: Journal) -> RunFile:
    return export_run(source, journal.run_ids["halt_lab.looping"])


def raw_rows(path: str | Path, run_id: str) -> tuple[list[Any], list[Any]]:
    """The run's `runs` row and `events` rows exactly as SQLite stores them."""
    conn = sqlite3.connect(path)
    try:
        runs = conn.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchall()
        events = conn.execute(
            "SELECT * FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
        ).fetchall()
    finally:
        conn.close()
    return runs, events


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def edited(run_file: RunFile, path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """`run_file` written at `path` as JSON after `edit` changed it."""
    data = json.loads(run_file_json(run_file))
    edit(data)
    return write_json(path, data)


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [s.name for s in FAST])
def test_export_write_read_import_gives_back_the_same_run(
    name: str, journal: Journal, source: SqliteStore, target: SqliteStore, tmp_path: Path
) -> None:
    run_id = journal.run_ids[name]
    exported = export_run(source, run_id)
    path = write_run_file(exported, tmp_path / "run.json")
    loaded = read_run_file(path)
    assert loaded == exported

    import_run(target, loaded, source=str(path))

    assert target.get_run(run_id) == source.get_run(run_id)
    assert target.events(run_id) == source.events(run_id)
    # Not just equal values: the same bytes in every column, the same sequence numbers.
    assert raw_rows(target.path, run_id) == raw_rows(source.path, run_id)


def test_a_run_file_is_self_contained(looping: RunFile, source: SqliteStore) -> None:
    run = source.get_run(looping.run.run_id)
    assert looping.format == RUN_FILE_FORMAT
    assert looping.run == run
    assert looping.events == tuple(source.events(run.run_id))
    assert [e.seq for e in looping.events] == list(range(len(looping.events)))
    assert looping.record is not None
    assert looping.record == run.record
    assert looping.machine_text == run.machine_text
    assert looping.machine_sha256 == run.machine_sha256
    assert "name: agent_loop" in looping.machine_text


def test_the_file_is_indented_json_format_first_and_written_the_same_every_time(
    looping: RunFile, tmp_path: Path
) -> None:
    first = write_run_file(looping, tmp_path / "a.json").read_bytes()
    second = write_run_file(looping, tmp_path / "b.json").read_bytes()
    assert first == second
    assert first.startswith(b'{\n  "format": "fsm-agent/run/4",\n  "run": {')
    assert first.endswith(b"}\n")
    assert list(json.loads(first)) == [
        "format",
        "run",
        "events",
        "record",
        "machine_sha256",
        "machine_text",
        "chain",
        "head_hash",
    ]


def test_a_killed_run_without_a_record_round_trips(
    journal: Journal, source: SqliteStore, target: SqliteStore, tmp_path: Path
) -> None:
    exported = export_run(source, journal.killed)
    assert (exported.run.status, exported.record, len(exported.events)) == ("running", None, 1)
    import_run(target, read_run_file(write_run_file(exported, tmp_path / "killed.json")))
    assert target.get_run(journal.killed) == source.get_run(journal.killed)
    assert target.events(journal.killed) == source.events(journal.killed)


def test_many_runs_import_side_by_side(
    journal: Journal, source: SqliteStore, target: SqliteStore
) -> None:
    for run_id in journal.run_ids.values():
        import_run(target, export_run(source, run_id))
    assert sorted(r.run_id for r in target.list_runs(limit=100)) == sorted(journal.run_ids.values())


def test_an_edited_event_still_loads(looping: RunFile, tmp_path: Path) -> None:
    # Tamper evidence is not this module's job: a flipped guard result reads back as written.
    index = next(i for i, e in enumerate(looping.events) if e.guards)
    flipped = not looping.events[index].guards[0].result

    def flip(data: dict[str, Any]) -> None:
        data["events"][index]["guards"][0]["result"] = flipped

    loaded = read_run_file(edited(looping, tmp_path / "run.json", flip))
    assert loaded.events[index].guards[0].result is flipped
    assert loaded.events[:index] == looping.events[:index]


# --- refused files ----------------------------------------------------------------------------


def _drop_event(data: dict[str, Any]) -> None:
    del data["events"][2]


def _rename_event_run(data: dict[str, Any]) -> None:
    data["events"][1]["run_id"] = "someone-else"


def _edit_machine(data: dict[str, Any]) -> None:
    data["machine_text"] = data["machine_text"].replace("max_steps: 8", "max_steps: 80")
    data["run"]["machine_text"] = data["machine_text"]


def _edit_run_machine_text(data: dict[str, Any]) -> None:
    data["run"]["machine_text"] += "# changed\n"


def _wrong_record_run(data: dict[str, Any]) -> None:
    data["record"]["run_id"] = data["run"]["record"]["run_id"] = "someone-else"


def _record_differs(data: dict[str, Any]) -> None:
    data["record"]["answer"] = "swordfish"


def _record_dropped(data: dict[str, Any]) -> None:
    data["record"] = data["run"]["record"] = None


def _no_events(data: dict[str, Any]) -> None:
    data["events"] = []


def _string_seq(data: dict[str, Any]) -> None:
    data["events"][3]["seq"] = "3"


def _extra_key(data: dict[str, Any]) -> None:
    data["run"]["comment"] = "hi"


@pytest.mark.parametrize(
    ("edit", "key", "message"),
    [
        (
            _drop_event,
            "$.events[2].seq",
            "event seq 3 where 2 was expected: events must be numbered 0..",
        ),
        (
            _rename_event_run,
            "$.events[1].run_id",
            "event run_id 'someone-else' is not the run's id",
        ),
        (
            _edit_machine,
            "$.machine_sha256",
            "machine_sha256 does not match the sha256 of machine_text",
        ),
        (
            _edit_run_machine_text,
            "$.run.machine_text",
            "run.machine_text differs from machine_text",
        ),
        (_wrong_record_run, "$.record.run_id", "record.run_id 'someone-else' is not the run's id"),
        (_record_differs, "$.record", "record differs from run.record"),
        (_record_dropped, "$.record", "the run is 'halted' but the file has no record"),
        (_no_events, "$.events", "no events"),
        (_string_seq, "$.events[3].seq", "invalid value for type, expected int"),
        (_extra_key, "$.run", "extra fields found (comment)"),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else None,
)
def test_an_inconsistent_file_names_the_file_and_the_json_path(
    looping: RunFile,
    tmp_path: Path,
    edit: Callable[[dict[str, Any]], None],
    key: str,
    message: str,
) -> None:
    path = edited(looping, tmp_path / "run.json", edit)
    with pytest.raises(RunFileError) as info:
        read_run_file(path)
    assert info.value.key == key
    assert info.value.path == str(path)
    assert message in info.value.detail
    assert str(info.value).startswith(f"{path}: ")
    assert str(info.value).endswith(f" @ {key}")
    assert isinstance(info.value, InvalidInputError)


def test_a_truncated_file_is_refused_as_not_json(looping: RunFile, tmp_path: Path) -> None:
    path = write_run_file(looping, tmp_path / "run.json")
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    with pytest.raises(RunFileError) as info:
        read_run_file(path)
    assert info.value.key == "$"
    assert "not valid JSON (" in str(info.value)
    assert "truncated or corrupt? export the run again" in str(info.value)
    assert str(path) in str(info.value)


def test_nan_is_not_json(looping: RunFile, tmp_path: Path) -> None:
    path = write_run_file(looping, tmp_path / "run.json")
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('"cost": 0.0', '"cost": NaN', 1), encoding="utf-8")
    with pytest.raises(RunFileError, match=r"not valid JSON \(NaN is not JSON\)"):
        read_run_file(path)


@pytest.mark.parametrize(
    ("data", "key", "message"),
    [
        ([1, 2], "$", "not a run file: expected a JSON object"),
        ({"run": {}}, "$.format", "not a run file this fsm-agent reads: no format"),
        (
            {"format": "fsm-agent/halt-record/1"},
            "$.format",
            "format 'fsm-agent/halt-record/1', expected 'fsm-agent/run/4'",
        ),
        ({"format": "fsm-agent/run/5"}, "$.format", "format 'fsm-agent/run/5'"),
    ],
    ids=["not-an-object", "no-format", "a-halt-record", "a-newer-format"],
)
def test_another_kind_of_file_is_refused_by_format(
    tmp_path: Path, data: Any, key: str, message: str
) -> None:
    path = write_json(tmp_path / "run.json", data)
    with pytest.raises(RunFileError) as info:
        read_run_file(path)
    assert info.value.key == key
    assert message in info.value.detail


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(RunFileError, match="cannot read the run file \\(No such file"):
        read_run_file(path)


def test_a_file_that_is_not_text_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(RunFileError, match="cannot read the run file"):
        read_run_file(path)


def test_import_checks_a_run_file_built_in_code(looping: RunFile, target: SqliteStore) -> None:
    broken = attrs.evolve(looping, machine_sha256="0" * 64)
    with pytest.raises(RunFileError) as info:
        import_run(target, broken, source="incident.json")
    assert str(info.value).startswith("incident.json: machine_sha256 does not match")
    assert target.list_runs() == []


# --- refused imports --------------------------------------------------------------------------


def test_importing_a_run_already_there_is_refused_and_writes_nothing(
    looping: RunFile, target: SqliteStore
) -> None:
    run_id = looping.run.run_id
    import_run(target, looping)
    with pytest.raises(RunExistsError) as info:
        import_run(target, looping)
    assert info.value.identical is True
    assert info.value.run_id == run_id
    assert f"already holds run {run_id!r} (identical to this file)" in str(info.value)
    assert "an import never overwrites" in str(info.value)
    assert target.location in str(info.value)

    other = attrs.evolve(looping, run=attrs.evolve(looping.run, task="something else"))
    with pytest.raises(RunExistsError, match="a different run with the same id"):
        import_run(target, other)
    assert target.get_run(run_id) == looping.run
    assert tuple(target.events(run_id)) == looping.events


def test_the_store_refuses_a_run_already_there_in_its_transaction(
    looping: RunFile, target: SqliteStore
) -> None:
    # Behind the friendly check, the store itself never overwrites (a concurrent import).
    target.import_run(looping.run, looping.events, looping.record)
    with pytest.raises(JournalError, match="already in this journal") as info:
        target.import_run(looping.run, looping.events, looping.record)
    assert info.value.run_id == looping.run.run_id
    assert len(target.events(looping.run.run_id)) == len(looping.events)


def test_the_store_writes_all_or_nothing(looping: RunFile, target: SqliteStore) -> None:
    events = (*looping.events, looping.events[-1])  # the last seq twice: the INSERT fails
    with pytest.raises(JournalError, match="UNIQUE constraint failed"):
        target.import_run(looping.run, events, looping.record)
    assert target.list_runs() == []
    with pytest.raises(RunNotFound):
        target.get_run(looping.run.run_id)


def test_the_store_refuses_a_record_that_disagrees_with_the_row(
    looping: RunFile, target: SqliteStore
) -> None:
    with pytest.raises(JournalError, match="record to import differ"):
        target.import_run(looping.run, looping.events, None)
    assert target.list_runs() == []


# --- export -----------------------------------------------------------------------------------


def test_exporting_an_unknown_run_raises_run_not_found(source: SqliteStore) -> None:
    with pytest.raises(RunNotFound):
        export_run(source, "no-such-run")


def test_an_inconsistent_journal_row_is_not_exported(looping: RunFile, target: SqliteStore) -> None:
    target.import_run(looping.run, looping.events, looping.record)
    conn = sqlite3.connect(target.path, isolation_level=None)
    try:
        conn.execute("UPDATE runs SET machine_text = machine_text || '#'")
    finally:
        conn.close()
    with pytest.raises(JournalError, match=r"cannot export: machine_sha256 does not match") as info:
        export_run(target, looping.run.run_id)
    assert info.value.run_id == looping.run.run_id


# --- atomic writes ----------------------------------------------------------------------------


def test_atomic_write_replaces_whole_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "run.json"
    atomic_write_text(path, "old\n")
    atomic_write_text(path, "new\n")
    assert path.read_text(encoding="utf-8") == "new\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["run.json"]


def test_a_failed_atomic_write_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = atomic_write_text(tmp_path / "run.json", "old\n")

    def fail(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_text(path, "new\n")
    assert path.read_text(encoding="utf-8") == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]
