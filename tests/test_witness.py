"""The witness: every writer with the chain key appends each committed head, signed, to a file
outside the journal (FSM_AGENT_WITNESS), and `fsm-agent verify` checks the journal against
it — so an insider who cuts a run back, reopens a halted one, rewrites one or deletes one
whole is found, and a keyed run whose record is not sealed is never ok without it.

The insider's edits are made with `sqlite3` after dropping the append-only triggers."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from fsm_agent.cli.main import cli
from fsm_agent.errors import JournalError
from fsm_agent.journal.chain_key import KEY_ENV, KEY_FILE_ENV
from fsm_agent.journal.witness import (
    WITNESS_ENV,
    WitnessError,
    line,
    open_witness,
    read_log,
)
from fsm_agent.runtime.record import read_record
from fsm_agent.stores.sqlite import SqliteStore
from tests.insider import REOPEN, insider, rechain
from tests.lab import LOOKUP, lab_run

ANSWER = {"answer": "swordfish"}
KEY = "w" * 32
OTHER = b"o" * 32


def invoke(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


@pytest.fixture
def witnessed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path, Path]:
    """A completed keyed lab run (events 0..4, the halt at seq 4), its journal and its
    witness; the key stays in the environment, the witness variable does not."""
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    monkeypatch.setenv(KEY_ENV, KEY)
    witness = tmp_path / "witness.log"
    monkeypatch.setenv(WITNESS_ENV, str(witness))
    record = lab_run(tmp_path, [LOOKUP, ANSWER])
    monkeypatch.delenv(WITNESS_ENV)
    return record.run_id, tmp_path / "j.db", witness


def verify(db: Path, *args: str) -> tuple[int, list[dict[str, object]]]:
    result = invoke("verify", *args, "--db", str(db), "--json")
    return result.exit_code, json.loads(result.output)


def kinds(report: dict[str, object]) -> list[tuple[object, object, object]]:
    found = report["findings"]
    assert isinstance(found, list)
    return [(f["kind"], f["seq"], f["field"]) for f in found]


# --- the writer ------------------------------------------------------------------------------


def test_every_commit_and_the_halt_are_witnessed_signed_and_private(
    witnessed: tuple[str, Path, Path],
) -> None:
    run_id, _, path = witnessed
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    store = SqliteStore(path.parent / "j.db")
    try:
        run, links, head = store.chain(run_id)
    finally:
        store.close()
    hashes = {x.seq: x.hash for x in links}
    # one line per commit (a read's result and the receipts check after it share one), in
    # order, each naming the head that commit left; then the halt, sealed onto the last
    assert [x["seq"] for x in lines] == [0, 1, 3, 4, 4]
    assert all(x["run_id"] == run_id and x["head"] == hashes[x["seq"]] for x in lines)
    assert [x["seal"] for x in lines] == [None] * 4 + [run.record_hash]
    assert lines[-1]["head"] == head
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    witness = read_log([path], KEY.encode())
    assert (witness.lines, len(witness.seen[run_id]), witness.forged) == (5, 5, {})


def test_a_witness_without_a_key_is_refused_and_a_reader_appends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(WitnessError, match="signs each head with the chain key"):
        open_witness(tmp_path / "w.log", None)
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    monkeypatch.setenv(WITNESS_ENV, str(tmp_path / "w.log"))
    script = tmp_path / "script.json"
    script.write_text(json.dumps([ANSWER]))
    result = invoke("run", "agent_loop", "--task", "t", "--model", f"scripted:{script}",
                    "--db", str(tmp_path / "j.db"))  # fmt: skip
    assert result.exit_code == 2
    assert "signs each head with the chain key" in result.output
    assert not (tmp_path / "w.log").exists()
    monkeypatch.setenv(KEY_ENV, KEY)
    SqliteStore(tmp_path / "k.db").close()  # made, and migrated, by a writer
    reader = SqliteStore(tmp_path / "k.db", read_only=True)
    reader.close()
    assert reader.witness is None


def test_a_witness_that_cannot_be_opened_or_written_stops_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv(WITNESS_ENV, str(tmp_path / "no" / "such" / "dir" / "w.log"))
    with pytest.raises(WitnessError, match="cannot open it to append"):
        lab_run(tmp_path, [LOOKUP, ANSWER])  # refused before anything is written
    assert not (tmp_path / "j.db").exists()
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here to make a write fail")
    monkeypatch.setenv(WITNESS_ENV, "/dev/full")  # opens, and every write is ENOSPC
    with pytest.raises(JournalError, match="witness /dev/full could not be appended to"):
        lab_run(tmp_path, [LOOKUP, ANSWER])
    record = read_record(tmp_path / "r.json")
    assert record.halt_reason == "journal_failed"
    assert "could not be appended to" in (record.error or "")


# --- reading it ------------------------------------------------------------------------------


def test_forged_foreign_and_cut_lines(witnessed: tuple[str, Path, Path]) -> None:
    run_id, db, path = witnessed
    forged = json.loads(line(run_id, 9, "a" * 64, None, KEY.encode(), "2026-01-01T00:00:00Z"))
    forged["seq"] = 7  # edited after signing
    with path.open("a") as f:
        f.write(json.dumps(forged) + "\n")
        f.write(line(run_id, 8, "b" * 64, None, OTHER, "2026-01-01T00:00:00Z").decode())
        f.write('{"witness": 1, "run_id"')  # a writer stopped in the middle of a line
    witness = read_log([path], KEY.encode())
    assert [s.seq for s in witness.forged[run_id]] == [7]
    assert witness.foreign == {run_id: 1}
    assert witness.partial == (f"{path}:8",)
    assert "1 line with another key; incomplete last line ignored" in witness.describe()
    code, [report] = verify(db, run_id, "--witness", str(path))
    assert (code, kinds(report)) == (1, [("witness_forged", 7, "witness")])
    not_one = db.parent / "record.json"
    not_one.write_text('{"answer": 1}\n{}\n')
    result = invoke("verify", run_id, "--db", str(db), "--witness", str(not_one))
    assert result.exit_code == 2
    assert "line 1 is not a witness line" in result.output
    result = invoke("verify", run_id, "--db", str(db), "--witness", str(path),
                    env={KEY_ENV: None})  # fmt: skip
    assert result.exit_code == 2
    assert "checked with the chain key" in result.output


# --- what verify finds with it, and says without it --------------------------------------------


def test_a_reopened_run_is_found_with_the_witness_and_not_proven_without(
    witnessed: tuple[str, Path, Path],
) -> None:
    run_id, db, path = witnessed
    assert verify(db, "--all", "--witness", str(path))[0] == 0
    insider(db, *REOPEN)
    code, [report] = verify(db, "--all", "--require-keyed")  # the command
    assert (code, report["ok"], report["findings"]) == (1, False, [])
    assert report["unproven"] == (
        "keyed, not sealed: truncation after seq 0 cannot be ruled out without a witness"
    )
    text = invoke("verify", "--all", "--db", str(db)).output
    assert text.splitlines()[0].startswith(f"UNPROVEN  {run_id}  1 events  keyed, not sealed")
    assert "note: no witness (--witness FILE)" in text
    assert text.splitlines()[-1] == "0 of 1 runs verify; 1 not proven (keyed, not sealed)"
    page = db.parent / "report.html"
    invoke("report", run_id, "--db", str(db), "-o", str(page))
    assert "chain: not proven (keyed, not sealed: truncation after seq 0" in page.read_text()
    code, [report] = verify(db, "--all", "--witness", str(path))
    assert code == 1
    assert kinds(report) == [("truncated", 1, "witness"), ("reopened", 4, "witness")]
    text = invoke("verify", "--all", "--db", str(db), "--witness", str(path)).output
    assert text.splitlines()[0] == (
        f"witness: {path} (5 lines on 1 run, key id {report_key_id(path)})"
    )
    assert f"witness: witnessed to seq 4, halted ({path}:5)" in text
    shown = invoke("show", run_id, "--db", str(db), env={WITNESS_ENV: str(path)}).output
    assert "chain: DOES NOT VERIFY at seq 1: truncated (witness)" in shown
    assert invoke("replay", run_id, "--db", str(db)).exit_code == 1


def report_key_id(path: Path) -> str:
    return str(json.loads(path.read_text().splitlines()[0])["key"])


def test_a_reopened_run_is_not_resumed_where_the_witness_is(
    witnessed: tuple[str, Path, Path], tmp_path: Path
) -> None:
    run_id, db, path = witnessed
    insider(db, *REOPEN, "UPDATE runs SET pid = 2147483647")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([LOOKUP, ANSWER]))
    result = invoke(
        "resume", run_id, "--model", f"scripted:{script}", "--db", str(db),
        "--record", str(tmp_path / "again.json"), env={WITNESS_ENV: str(path)},
    )  # fmt: skip
    assert result.exit_code == 2
    assert "reopened" in result.output or "truncated" in result.output
    assert "it is not resumed" in result.output


def test_a_deleted_run_is_found_by_the_witness_by_id_and_with_all(
    witnessed: tuple[str, Path, Path],
) -> None:
    run_id, db, path = witnessed
    insider(db, f"DELETE FROM events WHERE run_id = '{run_id}'",  # noqa: S608
            f"DELETE FROM runs WHERE run_id = '{run_id}'")  # fmt: skip  # noqa: S608
    assert verify(db, "--all") == (0, [])  # nothing is left to check
    for args in (["--all"], [run_id]):
        code, [report] = verify(db, *args, "--witness", str(path))
        assert (code, report["run_id"], kinds(report)) == (
            1, run_id, [("run_deleted", 4, "witness")],
        )  # fmt: skip
    text = invoke("verify", run_id, "--db", str(db), "--witness", str(path)).output
    assert f"TAMPERED  {run_id}  not in the journal" in text


def test_a_run_rechained_as_unkeyed_is_rewritten(
    witnessed: tuple[str, Path, Path],
) -> None:
    # An insider recomputes the whole run with sha256 and calls it unkeyed: every hash is
    # consistent, and verify without --require-keyed says ok; the witness saw other heads.
    run_id, db, path = witnessed
    rechain(db, run_id, "sha256/4")
    assert verify(db, run_id)[0] == 0
    code, [report] = verify(db, run_id, "--witness", str(path))
    assert code == 1
    assert ("rewritten", 0, "witness") in kinds(report)


def test_a_live_run_witnessed_at_its_head_is_ok_and_cut_back_is_truncated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    path = tmp_path / "w.log"
    monkeypatch.setenv(WITNESS_ENV, str(path))
    record = lab_run(tmp_path, [LOOKUP, ANSWER])
    monkeypatch.delenv(WITNESS_ENV)
    db = tmp_path / "j.db"
    # the record never written (the process stopped just after its halting event) ...
    insider(db, "UPDATE runs SET status = 'running', record = NULL, record_hash = NULL,"
                " halt_reason = NULL, ended_at = NULL, pid = 2147483647")  # fmt: skip
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n")  # ... nor its witness line
    code, [report] = verify(db, record.run_id, "--witness", str(path))
    assert (code, report["unproven"]) == (0, None)
    assert report["witness"] == f"witnessed to seq 4 ({path}:4)"
    code, [report] = verify(db, record.run_id)  # the same run, without its witness
    assert (code, report["findings"]) == (1, [])
    insider(db, "DELETE FROM events WHERE seq > 2")
    code, [report] = verify(db, record.run_id, "--witness", str(path))
    assert kinds(report) == [("truncated", 3, "witness")]
    os.chmod(path, 0o600)


# --- anchor: witnessing runs written before the witness ----------------------------------------


def test_anchor_witnesses_runs_written_without_one_and_refuses_a_tampered_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.delenv(WITNESS_ENV, raising=False)
    done = lab_run(tmp_path, [LOOKUP, ANSWER]).run_id  # no witness while these ran
    killed = lab_run(tmp_path, [LOOKUP, ANSWER]).run_id
    db, path = tmp_path / "j.db", tmp_path / "anchor.log"
    unseal = (
        "UPDATE runs SET status = 'running', record = NULL, record_hash = NULL,"
        " halt_reason = NULL, ended_at = NULL WHERE run_id = "
    )
    insider(db, f"{unseal}'{killed}'")
    assert verify(db, killed)[1][0]["unproven"] is not None
    result = invoke("anchor", "--all", "--db", str(db), "--witness", str(path))
    assert result.exit_code == 0, result.output
    assert f"anchored  {done}  at seq 4 (halted, sealed)" in result.output
    assert f"anchored  {killed}  at seq 4 (not halted)" in result.output
    assert result.output.splitlines()[-1] == f"anchored 2 of 2 runs in {path}"
    assert verify(db, "--all", "--witness", str(path))[0] == 0  # the killed run: proven now
    insider(db, f"DELETE FROM events WHERE run_id = '{done}' AND seq > 2", f"{unseal}'{done}'")  # noqa: S608
    code, reports = verify(db, done, "--witness", str(path))
    assert code == 1
    assert kinds(reports[0]) == [("truncated", 3, "witness"), ("reopened", 4, "witness")]
    again = invoke("anchor", done, "--db", str(db), "--witness", str(path), "--json")
    assert again.exit_code == 1  # a run the witness shows cut back is not anchored again
    data = json.loads(again.output)
    assert (data["anchored"], data["refused"][0]["run_id"]) == ([], done)
    assert len(path.read_text().splitlines()) == 2
    keyless = invoke("anchor", "--all", "--db", str(db), "--witness", str(path),
                     env={KEY_ENV: None})  # fmt: skip
    assert keyless.exit_code == 2
    assert "signed with the chain key" in keyless.output
