"""What a command may do to the files it is given: a foreign SQLite file is refused, never
migrated; commands that only read never create, migrate or write a journal; invalid input
is exit 2 wherever it is found (file modes: `test_file_modes.py`).

Through the real CLI on real SQLite files.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils
from click.testing import CliRunner

from fsm_agent.adapters.models import ScriptedModel
from fsm_agent.cli.main import cli
from fsm_agent.errors import AdapterError
from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.stores.sqlite_schema import migrations

LAB = Path(__file__).parent.parent / "examples" / "halt_lab"
PROPER = f"scripted:{LAB / 'proper.json'}"


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def lab_run(db: Path, record: Path, *extra: str, model: str = PROPER) -> Any:
    return invoke(
        "run", "agent_loop", "--task", "Find the lab password", "--model", model,
        "--tools", "fsm_agent.examples.halt_lab.tools",
        "--allow", "lookup,slow_lookup,hang",
        "--db", str(db),
        "--record", str(record), "--quiet", *extra,
    )  # fmt: skip


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


# --- cost_per_call ------------------------------------------------------------------------------


@pytest.mark.parametrize("cost", ["NaN", "Infinity", "-Infinity", "-0.01", '"0.01"', "true"])
def test_a_script_cost_that_is_not_a_finite_number_at_least_zero_is_invalid_input(
    cost: str, tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text(f'{{"replies": [], "cost_per_call": {cost}}}')
    result = lab_run(tmp_path / "j.db", tmp_path / "r.json", model=f"scripted:{script}")
    assert result.exit_code == 2, result.output
    assert "cost_per_call must be a finite number >= 0" in result.output
    assert not (tmp_path / "j.db").exists()


@pytest.mark.parametrize("cost", [float("nan"), float("inf"), -1.0])
def test_a_scripted_model_refuses_a_bad_cost_in_python(cost: float) -> None:
    with pytest.raises(AdapterError, match="cost_per_call"):
        ScriptedModel([], cost_per_call=cost)


# --- a SQLite file of another application ------------------------------------------------------


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    db = tmp_path / "notes.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO notes (body) VALUES ('keep me')")
    conn.commit()
    conn.close()
    return db


FOREIGN_COMMANDS = [
    ["runs"],
    ["show", "abc"],
    ["replay", "abc"],
    ["verify", "--all"],
    ["stats"],
    ["export", "abc", "-o", "OUT/x.json"],
    ["report", "abc", "-o", "OUT/x.html"],
    ["submit", "agent_loop", "--task", "t"],
    ["freeze-routing", "--why", "w"],
    ["migrate"],
]


@pytest.mark.parametrize("command", FOREIGN_COMMANDS, ids=lambda c: c[0])
def test_a_foreign_sqlite_file_is_refused_and_left_as_it_is(
    command: list[str], foreign: Path, tmp_path: Path
) -> None:
    before = files(tmp_path)
    args = [a.replace("OUT", str(tmp_path)) for a in command]
    result = invoke(*args, "--db", str(foreign))
    assert result.exit_code == 2, result.output
    assert f"Error: {foreign}: a SQLite database of another application (tables: notes)" in (
        result.output
    )
    assert files(tmp_path) == before  # not migrated, no -wal left, nothing written


def test_a_run_on_a_foreign_file_is_refused_before_it_starts(foreign: Path, tmp_path: Path) -> None:
    before = files(tmp_path)
    result = lab_run(foreign, tmp_path / "r.json")
    assert result.exit_code == 2, result.output
    assert "not an fsm-agent journal" in result.output
    assert files(tmp_path) == before


# --- commands that only read -------------------------------------------------------------------


READ_COMMANDS = [
    ["runs"],
    ["runs", "--json"],
    ["show", "RUN"],
    ["replay", "RUN"],
    ["verify", "--all"],
    ["verify", "RUN"],
    ["stats"],
    ["export", "RUN", "-o", "OUT/run.json"],
    ["report", "RUN", "-o", "OUT/report.html"],
    ["diagram", "agent_loop", "--run", "RUN"],
]


@pytest.fixture
def journal(tmp_path: Path) -> tuple[Path, str]:
    folder = tmp_path / "journal"
    folder.mkdir()
    db = folder / "j.db"
    assert lab_run(db, tmp_path / "r.json").exit_code == 0
    return db, json.loads((tmp_path / "r.json").read_text())["run_id"]


@pytest.mark.parametrize("command", READ_COMMANDS, ids=" ".join)
def test_read_commands_never_write_the_journal(
    command: list[str], journal: tuple[Path, str], tmp_path: Path
) -> None:
    db, run_id = journal
    before, mtime = files(db.parent), db.stat().st_mtime_ns
    args = [a.replace("RUN", run_id).replace("OUT", str(tmp_path)) for a in command]
    result = invoke(*args, "--db", str(db))
    assert result.exit_code == 0, result.output
    assert files(db.parent) == before  # the same files, byte for byte: no -wal, no -shm
    assert db.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("command", READ_COMMANDS, ids=" ".join)
def test_read_commands_never_migrate_an_older_journal(command: list[str], tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    migrations().apply(sqlite_utils.Database(conn), stop_before="m005_queue_note")
    conn.close()
    before = files(tmp_path)
    args = [a.replace("RUN", "abc").replace("OUT", str(tmp_path)) for a in command]
    result = invoke(*args, "--db", str(db))
    assert result.exit_code == 70, result.output
    assert "written by an older fsm-agent: it needs migration 'm005_queue_note'" in result.output
    assert f"`fsm-agent migrate --db {db}`" in result.output
    assert files(tmp_path) == before


def test_migrate_brings_an_older_journal_up_to_date(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db, isolation_level=None)
    migrations().apply(sqlite_utils.Database(conn), stop_before="m005_queue_note")
    conn.close()
    result = invoke("migrate", "--db", str(db))
    assert (result.exit_code, result.output) == (0, f"journal {db} is up to date\n")
    assert invoke("runs", "--db", str(db)).output == f"no runs in {db}\n"


def test_an_empty_file_reads_as_an_empty_journal_and_stays_empty(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    db.touch()
    for command in (["runs"], ["stats"], ["verify", "--all"]):
        assert invoke(*command, "--db", str(db)).exit_code == 0
    assert invoke("show", "abc", "--db", str(db)).exit_code == 2
    assert db.read_bytes() == b""
    assert [p.name for p in tmp_path.iterdir()] == ["new.db"]


def test_the_store_opened_to_read_refuses_writes(journal: tuple[Path, str]) -> None:
    db, run_id = journal
    store = SqliteStore(db, read_only=True)
    try:
        assert store.read_only
        assert store.get_run(run_id).run_id == run_id
        with pytest.raises(Exception, match="read"):
            store.mark_run(run_id, "paused", None, None)
    finally:
        store.close()
