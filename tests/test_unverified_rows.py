"""Nothing unverified is shown as fact (issue 27.2): each stored column of a run's row that a
review displays is edited as an insider would (`sqlite3`, on the real journal file), and
every command-line surface either shows what verifies or marks the row unverified, and
exits non-zero where it is about that one run.

The console's surfaces are held to the same rule in `tests/test_console_truth.py`.
"""

from __future__ import annotations

import html
import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from fsm_agent.cli.main import cli
from tests.lab import lab_run

HANDOFF = {"handoff": {"why": "a person must approve the refund"}}
#: edit name -> the SQL an insider runs on the runs row (`?` is the run id)
EDITS = {
    "halt_reason+state": "UPDATE runs SET halt_reason = 'completed', state = 'done'"
    " WHERE run_id = ?",
    "halt_reason": "UPDATE runs SET halt_reason = 'completed' WHERE run_id = ?",
    "reopened": "UPDATE runs SET status = 'running', halt_reason = NULL, record = NULL,"
    " ended_at = NULL WHERE run_id = ?",
    "steps_used": "UPDATE runs SET steps_used = 7 WHERE run_id = ?",
    "ended_at": "UPDATE runs SET ended_at = '2020-01-01T00:00:00+00:00' WHERE run_id = ?",
    "record": "UPDATE runs SET record = replace(record, '\"handoff_requested\"',"
    " '\"completed\"') WHERE run_id = ?",
}


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(params=list(EDITS))
def edited(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str, str]:
    """(run id, journal, edit name): a run that halted handoff_requested, its row then
    edited by hand."""
    record = lab_run(tmp_path, [HANDOFF])
    assert record.halt_reason.value == "handoff_requested"
    db = str(tmp_path / "j.db")
    with sqlite3.connect(db) as conn:
        query = "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'runs'"
        triggers = [r[0] for r in conn.execute(query)]
        for name in triggers:
            conn.execute(f"DROP TRIGGER {name}")
        changed = conn.execute(EDITS[request.param], (record.run_id,)).rowcount
    assert changed == 1
    return record.run_id, db, request.param


def test_every_surface_marks_an_edited_row(edited: tuple[str, str, str], tmp_path: Path) -> None:
    run_id, db, edit = edited
    shown = invoke("show", run_id, "--db", db)
    assert "UNVERIFIED" in shown.output, (edit, shown.output)
    assert "DOES NOT VERIFY" in shown.output

    report = invoke("report", run_id, "--db", db, "-o", str(tmp_path / "r.html"))
    assert report.exit_code == 1, (edit, report.output)
    header = html.unescape((tmp_path / "r.html").read_text("utf-8").split("</header>")[0])
    assert "UNVERIFIED: the run's row says" in header, (edit, header)
    assert "replay NOT proven" in header

    replay = invoke("replay", run_id, "--db", db)
    assert replay.exit_code == 1, (edit, replay.output)
    assert "NOT proven" in replay.output
    assert "halt completed proven" not in replay.output

    assert invoke("export", run_id, "--db", db, "-o", str(tmp_path / "x.json")).exit_code == 1

    listed = invoke("runs", "--db", db)
    assert listed.exit_code == 0, listed.output
    row = next(line for line in listed.output.splitlines() if line.startswith(run_id))
    assert "!" in row.split()[2], (edit, row)  # the HALT column is marked
    assert "unverified: the run's chain does not verify" in listed.output
    as_json = json.loads(invoke("runs", "--db", db, "--json").output)
    assert as_json[0]["verified"] is False
    assert as_json[0]["unverified"]

    stats = json.loads(invoke("stats", "--db", db, "--json").output)
    machine = stats["machines"][0]
    assert machine["unverified"] == 1, (edit, machine)
    assert machine["halt_reasons"] == {}
    assert machine["runs"] == 0
    assert "1 unverified" in invoke("stats", "--db", db).output


def test_an_untouched_row_is_shown_as_fact(tmp_path: Path) -> None:
    record = lab_run(tmp_path, [HANDOFF])
    db = str(tmp_path / "j.db")
    listed = invoke("runs", "--db", db)
    row = next(line for line in listed.output.splitlines() if line.startswith(record.run_id))
    assert row.split()[2] == "handoff_requested"
    assert "Find the lab password" in row  # the task column
    assert "unverified" not in listed.output
    assert "UNVERIFIED" not in invoke("show", record.run_id, "--db", db).output
    report = invoke("report", record.run_id, "--db", db, "-o", str(tmp_path / "r.html"))
    assert report.exit_code == 0, report.output
    stats = json.loads(invoke("stats", "--db", db, "--json").output)["machines"][0]
    assert stats["unverified"] == 0
    assert stats["halt_reasons"] == {"handoff_requested": 1}
