"""The chain verdict is part of every review artifact: `show`, `replay`, `export` and the
report say when a run's hash chain does not verify, with the first bad seq."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from click.testing import CliRunner, Result

from fsm_agent.cli.main import cli
from tests.lab import LOOKUP, lab_run


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def tampered(tmp_path: Path) -> tuple[str, str]:
    """A completed lab run whose event at seq 2 was edited by hand afterwards."""
    record = lab_run(tmp_path, [LOOKUP, {"answer": "swordfish"}])
    db = str(tmp_path / "j.db")
    conn = sqlite3.connect(db)
    conn.execute("DROP TRIGGER events_no_update")
    conn.execute("UPDATE events SET note = 'nothing to see' WHERE seq = 2")
    conn.commit()
    conn.close()
    return record.run_id, db


BAD = "chain: DOES NOT VERIFY at seq 2: edited"


def test_a_clean_run_says_its_chain_is_ok(tmp_path: Path) -> None:
    record = lab_run(tmp_path, [LOOKUP, {"answer": "swordfish"}])
    db = str(tmp_path / "j.db")
    shown = invoke("show", record.run_id, "--db", db)
    assert "chain: ok (5 events, head " in shown.output
    report = tmp_path / "r.html"
    invoke("report", record.run_id, "--db", db, "-o", str(report))
    assert "chain: ok (5 events)" in report.read_text(encoding="utf-8")


def test_show_says_the_chain_does_not_verify(tmp_path: Path) -> None:
    run_id, db = tampered(tmp_path)
    shown = invoke("show", run_id, "--db", db)
    assert shown.exit_code == 0
    assert BAD in shown.output
    assert f"see `fsm-agent verify {run_id}`" in shown.output
    as_json = invoke("show", run_id, "--db", db, "--json")
    assert '"ok": false' in as_json.output


def test_replay_of_a_tampered_run_is_not_proven(tmp_path: Path) -> None:
    run_id, db = tampered(tmp_path)
    replayed = invoke("replay", run_id, "--db", db)
    assert replayed.exit_code == 1
    last = replayed.output.splitlines()[-1]
    assert "halt completed proven; NOT proven: " + BAD in last


def test_export_of_a_tampered_run_writes_the_file_and_says_so(tmp_path: Path) -> None:
    run_id, db = tampered(tmp_path)
    out = tmp_path / "run.json"
    result = CliRunner().invoke(cli, ["export", run_id, "--db", db, "-o", str(out)])
    assert result.exit_code == 1
    assert f"Error: {BAD}" in result.output
    assert out.exists()  # kept as stored, for the review: verify FILE says the same
    assert invoke("verify", str(out)).exit_code == 1


def test_the_report_header_says_the_chain_does_not_verify(tmp_path: Path) -> None:
    run_id, db = tampered(tmp_path)
    report = tmp_path / "r.html"
    result = invoke("report", run_id, "--db", db, "-o", str(report))
    assert result.exit_code == 1, result.output  # written, and the exit code says it fails
    assert "note: " in result.output
    assert f"NOT proven: {BAD}" in result.output
    html = report.read_text(encoding="utf-8")
    header = html.split("</header>")[0]
    assert "chain DOES NOT VERIFY at seq 2 (edited)" in header
    assert "replay NOT proven" in header
