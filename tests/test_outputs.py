"""Every output path is checked before anything runs: a record, a trace copy, an export, a
report, a diagram or a records directory never replaces the journal, a directory, a device or
any other non-regular file, and an unusable path is exit 2 naming the option — with no run
started, nothing journaled, nothing written.

Through the real CLI on real SQLite files.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fsm_agent import load_tools, run
from fsm_agent.adapters.models import ScriptedModel
from fsm_agent.cli.main import cli
from fsm_agent.outputs import OutputRefused
from fsm_agent.runtime.record import atomic_write_text

LAB = Path(__file__).parent.parent / "examples" / "halt_lab"
LOOPING = f"scripted:{LAB / 'looping.json'}"


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def lab_run(db: Path, *extra: str) -> Any:
    return invoke(
        "run", "agent_loop", "--task", "Find the lab password", "--model", LOOPING,
        "--tools", "fsm_agent.examples.halt_lab.tools",
        "--allow", "lookup,slow_lookup,hang",
        "--db", str(db), "--quiet", *extra,
    )  # fmt: skip


def events(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
    finally:
        conn.close()


@pytest.fixture
def journal(tmp_path: Path) -> tuple[Path, str]:
    """A journal with one finished run, and that run's id."""
    db, record = tmp_path / "j.db", tmp_path / "first.json"
    assert lab_run(db, "--record", str(record)).exit_code == 3
    return db, json.loads(record.read_text())["run_id"]


def assert_refused(result: Any, option: str, problem: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Error:" in result.output
    assert option in result.output, result.output
    assert problem in result.output, result.output


def test_a_record_never_replaces_the_journal(journal: tuple[Path, str]) -> None:
    db, _ = journal
    before, count = db.read_bytes(), events(db)
    result = lab_run(db, "--record", str(db))
    assert_refused(result, "--record", "is a SQLite database")
    assert db.read_bytes() == before
    assert events(db) == count  # no run was started either


def test_a_record_at_the_path_of_a_journal_not_made_yet_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    result = lab_run(db, "--record", str(db))
    assert_refused(result, "--record", "is the journal (--db)")
    assert not db.exists()
    result = lab_run(db, "--record", f"{db}-wal")
    assert_refused(result, "--record", "is the journal (--db)")


@pytest.mark.parametrize(
    ("where", "problem"),
    [
        ("a directory", "is a directory"),
        ("an empty string", "is empty"),
        ("under a file", "is not a directory"),
        ("unwritable", "cannot write in /proc"),
        ("a device", "is not a regular file"),
        ("a fifo", "is not a regular file"),
        ("ends with a slash", "ends with a path separator"),
    ],
)
@pytest.mark.parametrize("option", ["--record", "--trace-copy"])
def test_an_unusable_run_output_is_found_before_the_run(
    option: str, where: str, problem: str, tmp_path: Path
) -> None:
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    path = {
        "a directory": str(tmp_path / "adir"),
        "an empty string": "",
        "under a file": str(tmp_path / "afile" / "r.json"),
        "unwritable": "/proc/fsm-agent-test/r.json",
        "a device": "/dev/null",
        "a fifo": str(tmp_path / "fifo"),
        "ends with a slash": str(tmp_path / "new") + "/",
    }[where]
    db = tmp_path / "j.db"
    result = lab_run(db, option, path)
    assert_refused(result, option, problem)
    assert not db.exists()  # nothing ran: no journal, no interrupted run
    assert Path("/dev/null").is_char_device()


def test_record_and_trace_copy_must_differ(tmp_path: Path) -> None:
    same = str(tmp_path / "out.json")
    result = lab_run(tmp_path / "j.db", "--record", same, "--trace-copy", same)
    assert_refused(result, "--trace-copy", "is --record")
    assert not (tmp_path / "j.db").exists()


def test_a_record_never_replaces_the_machine_declaration(tmp_path: Path) -> None:
    machine = tmp_path / "m.yaml"
    machine.write_text((Path(__file__).parent.parent / "machines/agent_loop.yaml").read_text())
    before = machine.read_bytes()
    result = invoke(
        "run", str(machine), "--task", "t", "--model", LOOPING, "--db", str(tmp_path / "j.db"),
        "--record", str(machine),
    )  # fmt: skip
    assert_refused(result, "--record", "is MACHINE")
    assert machine.read_bytes() == before


def test_resume_checks_its_outputs_first(journal: tuple[Path, str]) -> None:
    db, run_id = journal
    before = db.read_bytes()
    result = invoke("resume", run_id, "--model", LOOPING, "--db", str(db), "--record", str(db))
    assert_refused(result, "--record", "is a SQLite database")
    result = invoke("resume", run_id, "--model", LOOPING, "--db", str(db), "--trace-copy", "")
    assert_refused(result, "--trace-copy", "is empty")
    assert db.read_bytes() == before


@pytest.mark.parametrize("command", ["export", "report"])
def test_export_and_report_never_replace_the_journal_or_a_directory(
    command: str, journal: tuple[Path, str], tmp_path: Path
) -> None:
    db, run_id = journal
    before = db.read_bytes()
    assert_refused(invoke(command, run_id, "-o", str(db), "--db", str(db)), "--output", "SQLite")
    assert_refused(invoke(command, run_id, "-o", str(tmp_path), "--db", str(db)), "--output",
                   "is a directory")  # fmt: skip
    assert_refused(invoke(command, run_id, "-o", "/dev/null", "--db", str(db)), "--output",
                   "not a regular file")  # fmt: skip
    assert db.read_bytes() == before


def test_a_report_never_replaces_the_run_file_it_reads(
    journal: tuple[Path, str], tmp_path: Path
) -> None:
    db, run_id = journal
    exported = tmp_path / "run.json"
    assert invoke("export", run_id, "-o", str(exported), "--db", str(db)).exit_code == 0
    before = exported.read_bytes()
    result = invoke("report", str(exported), "-o", str(exported))
    assert_refused(result, "--output", "is SOURCE")
    assert exported.read_bytes() == before


def test_a_diagram_never_replaces_its_declaration_or_a_directory(tmp_path: Path) -> None:
    machine = tmp_path / "m.yaml"
    machine.write_text((Path(__file__).parent.parent / "machines/agent_loop.yaml").read_text())
    assert_refused(invoke("diagram", str(machine), "-o", str(machine)), "--output", "is MACHINE")
    assert_refused(invoke("diagram", "agent_loop", "-o", str(tmp_path)), "--output", "directory")
    under = str(tmp_path / "m.yaml" / "d.md")
    assert_refused(invoke("diagram", "agent_loop", "-o", under), "--output", "not a directory")


def test_a_records_directory_must_be_one(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    db = tmp_path / "q.db"
    for where, problem in [
        (str(tmp_path / "afile"), "is not a directory"),
        ("/dev/null", "is not a directory"),
        ("", "is empty"),
        ("/proc/fsm-agent-test", "cannot write in /proc"),
    ]:
        assert_refused(invoke("demo", "--db", str(db), "--records", where), "--records", problem)
    assert not db.exists()
    result = invoke("demo", "--db", str(db), "--records", str(db))
    assert_refused(result, "--records", "is the journal (--db)")


# --- the library --------------------------------------------------------------------------------


def test_the_atomic_writer_replaces_only_a_regular_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    conn = sqlite3.connect(tmp_path / "some.db")
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    for name, problem in [("fifo", "not a regular file"), ("dir", "is a directory"),
                          ("some.db", "SQLite database")]:  # fmt: skip
        with pytest.raises(OutputRefused, match=problem):
            atomic_write_text(tmp_path / name, "text")
    assert (tmp_path / "fifo").is_fifo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "fifo", "some.db"]
    with pytest.raises(OSError, match="not a regular file"):  # what write-failure paths catch
        atomic_write_text("/dev/null", "text")
    atomic_write_text(tmp_path / "ok.txt", "one")
    atomic_write_text(tmp_path / "ok.txt", "two")
    assert (tmp_path / "ok.txt").read_text() == "two"


def test_run_refuses_a_record_path_that_is_its_journal_before_it_starts(tmp_path: Path) -> None:
    db = tmp_path / "j.db"
    with pytest.raises(OutputRefused, match=r"record_path: .* is the journal"):
        run("agent_loop", task="t", model=ScriptedModel([]), tools=load_tools(
            "fsm_agent.examples.halt_lab.tools"),
            allow=("lookup", "slow_lookup", "hang"),
            store=db, record_path=db)  # fmt: skip
    assert not db.exists()
