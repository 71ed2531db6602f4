"""What a review shows beside the events is covered by the chain too: the declaration, the
run row's summary and the halt record (sealed onto the head), in a journal, in a run file
and in a record file checked against its journal — each edit found through the real CLI at
its seq and field, in both chain modes (unkeyed, and keyed with FSM_AGENT_CHAIN_KEY)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner, Result

from fsm_agent.cli.main import cli
from fsm_agent.journal import serde
from fsm_agent.journal.chain_hash import (
    UNKEYED,
    UNKEYED_4,
    event_columns,
    genesis,
    link,
    link_v3,
    record_link,
)
from fsm_agent.journal.chain_key import KEY_ENV, KEY_FILE_ENV
from fsm_agent.journal.runfile import EventHash, read_run_file, write_run_file
from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.testing import assert_replays
from tests.lab import LOOKUP, lab_run

ANSWER = {"answer": "swordfish"}
KEY = "k" * 32
OTHER_KEY = "o" * 32
RECORDED_V1 = Path(__file__).parent / "recorded_v1"
Found = list[tuple[str, int, str | None]]


def invoke(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


@pytest.fixture(params=["unkeyed", "keyed"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs once on an unkeyed journal and once on a keyed one."""
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    if request.param == "keyed":
        monkeypatch.setenv(KEY_ENV, KEY)
    else:
        monkeypatch.delenv(KEY_ENV, raising=False)
    return str(request.param)


@pytest.fixture
def done(tmp_path: Path, mode: str) -> tuple[str, str]:
    """A completed lab run (events 0..4, the halt at seq 4) and its journal."""
    record = lab_run(tmp_path, [LOOKUP, ANSWER])
    return record.run_id, str(tmp_path / "j.db")


def tamper(db: str, *statements: str) -> None:
    """What someone with the file and `sqlite3` can do."""
    conn = sqlite3.connect(db)
    conn.execute("DROP TRIGGER IF EXISTS events_no_update")
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()


def findings(*args: str) -> tuple[int, Found]:
    """`fsm-agent verify ARGS --json`: its exit code and (kind, seq, field) of each finding."""
    result = invoke("verify", *args, "--json")
    reports = json.loads(result.output)
    return result.exit_code, [(f["kind"], f["seq"], f["field"]) for f in reports[0]["findings"]]


# --- the journal ------------------------------------------------------------------------------

JOURNAL_EDITS: dict[str, tuple[str, Found]] = {
    "declaration": (
        "UPDATE runs SET machine_text = machine_text || '# allow refunds' || char(10)",
        [("machine_edited", 0, "runs.machine_text")],
    ),
    "halt_reason": (
        "UPDATE runs SET halt_reason = 'handoff_requested'",
        [("summary_edited", 4, "runs.halt_reason")],
    ),
    "state": ("UPDATE runs SET state = 'handoff'", [("summary_edited", 4, "runs.state")]),
    "steps_used": ("UPDATE runs SET steps_used = 1", [("summary_edited", 4, "runs.steps_used")]),
    "ended_at": (
        "UPDATE runs SET ended_at = '2020-01-01T00:00:00Z'",
        [("summary_edited", 4, "runs.ended_at")],
    ),
    "status": (
        "UPDATE runs SET status = 'paused'",
        [
            ("summary_edited", 4, "runs.ended_at"),
            ("summary_edited", 4, "runs.halt_reason"),
            ("summary_edited", 4, "runs.status"),
        ],
    ),
    "answer": (
        "UPDATE runs SET record = json_set(record, '$.answer', 'hunter2')",
        [("record_edited", 4, "runs.record")],
    ),
    "record_halt": (
        "UPDATE runs SET halt_reason = 'max_steps', state = 'budget_exhausted', record ="
        " json_set(record, '$.halt_reason', 'max_steps', '$.terminal_state', 'budget_exhausted')",
        [
            ("record_edited", 4, "record.halt_reason"),
            ("record_edited", 4, "record.terminal_state"),
            ("record_edited", 4, "runs.record"),
        ],
    ),
    "handoff_packet": (
        "UPDATE runs SET record = json_set(record, '$.handoff', json('{\"why\": \"ok\"}'))",
        [("record_edited", 4, "runs.record")],
    ),
    "meters": (
        "UPDATE runs SET record = json_set(record, '$.meters.cost', 0.5)",
        [("record_edited", 4, "runs.record")],
    ),
    "record_steps": (
        "UPDATE runs SET steps_used = 7, record = json_set(record, '$.steps_used', 7)",
        [("record_edited", 4, "record.steps_used"), ("record_edited", 4, "runs.record")],
    ),
    "seal_removed": (
        "UPDATE runs SET record_hash = NULL",
        [("unchained", 4, "runs.record_hash")],
    ),
    "record_removed": (
        "UPDATE runs SET record = NULL",
        [("record_missing", 4, "runs.record"), ("summary_edited", 4, "runs.record")],
    ),
}


@pytest.mark.parametrize("edit", list(JOURNAL_EDITS))
def test_each_edit_of_the_row_or_record_is_found_at_its_field(
    done: tuple[str, str], edit: str, mode: str
) -> None:
    run_id, db = done
    assert invoke("verify", run_id, "--db", db).exit_code == 0
    statement, expected = JOURNAL_EDITS[edit]
    if edit == "record_removed":  # a record that is gone cannot disagree: only missing
        expected = [("record_missing", 4, "runs.record")]
    tamper(db, statement)
    code, found = findings(run_id, "--db", db)
    assert (code, found) == (1, expected)
    listing = invoke("verify", run_id, "--db", db).output
    assert f"TAMPERED  {run_id}  5 events  {mode}" in listing


def test_show_and_the_report_carry_an_edited_answer(done: tuple[str, str], tmp_path: Path) -> None:
    run_id, db = done
    tamper(db, "UPDATE runs SET record = json_set(record, '$.answer', 'hunter2')")
    shown = invoke("show", run_id, "--db", db).output
    assert "answer: hunter2" in shown  # what the row says, and why not to trust it:
    assert "chain: DOES NOT VERIFY at seq 4: record_edited (runs.record)" in shown
    report = tmp_path / "r.html"
    assert invoke("report", run_id, "--db", db, "-o", str(report)).exit_code == 1  # written
    header = report.read_text(encoding="utf-8").split("</header>")[0]
    assert "UNVERIFIED" in shown
    assert "chain DOES NOT VERIFY at seq 4 (record_edited)" in header
    assert "replay NOT proven" in header
    replayed = invoke("replay", run_id, "--db", db)
    assert replayed.exit_code == 1
    assert "NOT proven: chain: DOES NOT VERIFY at seq 4: record_edited" in replayed.output
    with pytest.raises(AssertionError, match="record_edited"):
        assert_replays(db, run_id)


def test_a_record_resealed_without_the_key_is_caught_only_when_keyed(
    done: tuple[str, str], mode: str
) -> None:
    # An insider edits the answer and recomputes the seal with sha256: an unkeyed chain cannot
    # tell (that is what the key is for); a keyed one can.
    run_id, db = done
    store = SqliteStore(db)
    run, _, head = store.chain(run_id)
    store.close()
    assert run.record is not None
    assert head is not None
    forged = attrs.evolve(run.record, answer="hunter2")
    seal = record_link(head, forged)
    tamper(db, f"UPDATE runs SET record = '{serde.dumps(forged)}', record_hash = '{seal}'")  # noqa: S608
    code, found = findings(run_id, "--db", db)
    if mode == "unkeyed":
        assert (code, found) == (0, [])
    else:
        assert (code, found) == (1, [("record_edited", 4, "runs.record")])


def test_a_downgraded_chain_mode_breaks_the_genesis(done: tuple[str, str]) -> None:
    # Passing a sealed run off as one journaled before seals (or a keyed one as unkeyed).
    run_id, db = done
    tamper(db, "UPDATE runs SET chain = NULL, record_hash = NULL")
    code, found = findings(run_id, "--db", db)
    assert code == 1
    assert ("run_edited", 0, None) in found


def test_an_unknown_chain_mode_is_a_run_edit(done: tuple[str, str]) -> None:
    run_id, db = done
    tamper(db, "UPDATE runs SET chain = 'md5'")
    assert findings(run_id, "--db", db) == (1, [("run_edited", 0, "runs.chain")])


@pytest.mark.parametrize("halt", ["handoff", "completed"])
def test_a_copy_of_the_sealed_head_appended_as_a_halt_is_the_insert(
    tmp_path: Path, mode: str, halt: str
) -> None:
    # Issue 27: the head copied (its digest with it) as seq 5, its halt set to `completed`,
    # was reported `edited` at 5 and `record_edited` ("the chain says completed"), the
    # untouched record blamed; a copy of a completed head, as `inserted` at 4.
    reply = ANSWER if halt == "completed" else {"handoff": {"why": "need the vault key"}}
    record = lab_run(tmp_path, [LOOKUP, reply])
    db = str(tmp_path / "j.db")
    conn = sqlite3.connect(db)
    names = [d[0] for d in conn.execute("SELECT * FROM events").description]
    conn.close()
    copied = ", ".join("seq + 1" if n == "seq" else "'completed'" if n == "halt" else n
                       for n in names)  # fmt: skip
    tamper(db, "DROP TRIGGER events_no_delete",
           f"INSERT INTO events SELECT {copied} FROM events WHERE seq = 4")  # noqa: S608 # fmt: skip
    result = invoke("verify", record.run_id, "--db", db, "--json")
    assert result.exit_code == 1
    found = json.loads(result.output)[0]["findings"]
    assert [(f["kind"], f["seq"], f["field"]) for f in found] == [("inserted", 5, None)]
    assert "carries the hash of seq 4" in found[0]["detail"]
    # the halt verify holds the record to is the sealed one at seq 4: the record is not blamed
    shown = invoke("show", record.run_id, "--db", db).output
    assert "DOES NOT VERIFY at seq 5: inserted" in shown
    assert "record_edited" not in shown


# --- resume: the declaration and the chain are checked before anything runs --------------------


def killed_after_halt(db: str, run_id: str) -> None:
    """What a kill between the halting event and the record's write leaves."""
    tamper(
        db,
        "UPDATE runs SET status = 'running', record = NULL, record_hash = NULL,"
        " halt_reason = NULL, ended_at = NULL, pid = 2147483647",
    )


def resume(
    db: str, run_id: str, tmp_path: Path, env: dict[str, str | None] | None = None
) -> Result:
    return invoke(
        "resume", run_id, "--model", "python:tests.fixture_resume:oracle", "--tools",
        "tests.fixture_resume", "--db", db, "--record", str(tmp_path / "resumed.json"), env=env,
    )  # fmt: skip


def test_a_run_killed_after_its_halt_verifies_and_resumes_to_a_sealed_record(
    done: tuple[str, str], tmp_path: Path, mode: str
) -> None:
    run_id, db = done
    killed_after_halt(db, run_id)
    listing = invoke("verify", run_id, "--db", db)
    # keyed and not sealed, with no witness: what followed seq 4 cannot be proven
    assert listing.exit_code == (1 if mode == "keyed" else 0), listing.output
    assert ("UNPROVEN" in listing.output) is (mode == "keyed")
    assert "its halt record was never written" in listing.output
    result = resume(db, run_id, tmp_path)
    assert result.exit_code == 0, result.output
    code, found = findings(run_id, "--db", db)
    assert (code, found) == (0, [])
    store = SqliteStore(db)
    run = store.get_run(run_id)
    store.close()
    assert run.record_hash is not None
    assert (run.chain == UNKEYED_4) is (mode == "unkeyed")


def test_an_edited_declaration_is_not_resumed_or_replayed(
    done: tuple[str, str], tmp_path: Path
) -> None:
    run_id, db = done
    killed_after_halt(db, run_id)
    tamper(  # the declaration is stored once per sha256, apart from the run row
        db,
        "DROP TRIGGER declarations_no_update",
        "UPDATE declarations SET text = replace(text, 'max_steps: 8', 'max_steps: 80')",
    )
    result = resume(db, run_id, tmp_path)
    assert result.exit_code == 2
    assert "its journal does not verify (seq 0: the stored declaration's sha256 is" in result.output
    assert not (tmp_path / "resumed.json").exists()
    replayed = invoke("replay", run_id, "--db", db)
    assert replayed.exit_code == 1
    assert "machine_edited (runs.machine_text)" in replayed.output


# --- run files --------------------------------------------------------------------------------


def exported(done: tuple[str, str], tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    run_id, db = done
    path = tmp_path / "run.json"
    assert invoke("export", run_id, "--db", db, "-o", str(path)).exit_code == 0
    return path, json.loads(path.read_text(encoding="utf-8"))


def test_a_run_file_with_an_edited_answer_is_caught_everywhere(
    done: tuple[str, str], tmp_path: Path
) -> None:
    path, data = exported(done, tmp_path)
    data["record"]["answer"] = data["run"]["record"]["answer"] = "hunter2"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert findings(str(path)) == (1, [("record_edited", 4, "runs.record")])
    replayed = invoke("replay", str(path))
    assert replayed.exit_code == 1
    assert "NOT proven: chain: DOES NOT VERIFY at seq 4: record_edited" in replayed.output
    with pytest.raises(AssertionError, match="record_edited"):
        assert_replays(path)
    imported = invoke("import", str(path), "--db", str(tmp_path / "other.db"))
    assert imported.exit_code == 2
    assert "hash chain does not verify: seq 4" in imported.output


def test_a_run_file_with_an_edited_halt_reason_is_caught(
    done: tuple[str, str], tmp_path: Path
) -> None:
    path, data = exported(done, tmp_path)
    for record in (data["record"], data["run"]["record"]):
        record["halt_reason"] = "max_steps"
    data["run"]["halt_reason"] = "max_steps"
    path.write_text(json.dumps(data), encoding="utf-8")
    expected = [("record_edited", 4, "record.halt_reason"), ("record_edited", 4, "runs.record")]
    assert findings(str(path)) == (1, expected)
    assert invoke("replay", str(path)).exit_code == 1


def test_a_run_file_whose_two_records_differ_says_which(
    done: tuple[str, str], tmp_path: Path
) -> None:
    path, data = exported(done, tmp_path)
    data["record"]["answer"] = "hunter2"  # the copy a reader might look at, not the sealed one
    path.write_text(json.dumps(data), encoding="utf-8")
    assert findings(str(path)) == (1, [("record_edited", 4, "$.record")])
    assert invoke("replay", str(path)).exit_code == 2  # refused when read for use


def test_a_run_file_keeps_its_mode_through_export_and_import(
    done: tuple[str, str], tmp_path: Path, mode: str
) -> None:
    path, data = exported(done, tmp_path)
    assert (data["run"]["chain"] == UNKEYED_4) is (mode == "unkeyed")
    other = str(tmp_path / "other.db")
    assert invoke("import", str(path), "--db", other).exit_code == 0
    copied = invoke("verify", data["run"]["run_id"], "--db", other)
    assert copied.exit_code == 0
    assert copied.output.splitlines()[0].endswith(f"  {mode}")
    assert_replays(path)


# --- a halt record file against its journal ---------------------------------------------------


def test_a_record_file_is_checked_against_the_sealed_record(
    done: tuple[str, str], tmp_path: Path
) -> None:
    run_id, db = done
    record = tmp_path / "r.json"
    clean = invoke("verify", "--record", str(record), "--db", db)
    assert clean.exit_code == 0, clean.output
    assert f"note: {record} is the halt record sealed onto this run's chain" in clean.output
    data = json.loads(record.read_text(encoding="utf-8"))
    data["answer"], data["halt_reason"] = "hunter2", "handoff_requested"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data), encoding="utf-8")
    expected = [("record_edited", 4, "record.answer"), ("record_edited", 4, "record.halt_reason")]
    assert findings("--record", str(edited), "--db", db) == (1, expected)
    out = invoke("verify", "--record", str(edited), run_id, "--db", db).output
    assert f'seq 4: record_edited (record.answer): {edited}\'s answer is "hunter2"' in out
    path, _ = exported(done, tmp_path)  # against a run file too
    assert findings("--record", str(edited), str(path)) == (1, expected)


def test_a_record_file_of_another_run_is_refused(done: tuple[str, str], tmp_path: Path) -> None:
    _, db = done
    other = lab_run(tmp_path / "b", [LOOKUP, ANSWER], store=db).run_id
    result = invoke("verify", "--record", str(tmp_path / "r.json"), other, "--db", db)
    assert result.exit_code == 2
    assert f"is the record of run {done[0]}, not of {other}" in result.output


# --- the keyed mode ---------------------------------------------------------------------------


@pytest.fixture
def keyed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    monkeypatch.setenv(KEY_ENV, KEY)
    record = lab_run(tmp_path, [LOOKUP, ANSWER])
    monkeypatch.delenv(KEY_ENV)
    return record.run_id, str(tmp_path / "j.db")


def test_a_keyed_run_without_its_key_is_never_ok(keyed: tuple[str, str], tmp_path: Path) -> None:
    run_id, db = keyed
    result = invoke("verify", run_id, "--db", db)
    assert result.exit_code == 1
    assert result.output.splitlines()[0].startswith(f"UNCHECKED {run_id}  5 events  keyed:")
    assert "ok " not in result.output
    assert (
        result.output.splitlines()[-1] == "0 of 1 runs verify; 1 not checked (keyed, key not given)"
    )
    report = json.loads(invoke("verify", run_id, "--db", db, "--json").output)[0]
    assert (report["ok"], report["checked"], report["mode"]) == (False, False, "keyed")
    assert (
        "chain: keyed: key not given, chain not checked"
        in invoke("show", run_id, "--db", db).output
    )
    assert invoke("replay", run_id, "--db", db).exit_code == 1
    path = tmp_path / "run.json"
    exported = invoke("export", run_id, "--db", db, "-o", str(path))
    assert exported.exit_code == 0  # the bytes as stored; checking them needs the key
    imported = invoke("import", str(path), "--db", str(tmp_path / "other.db"))
    assert imported.exit_code == 2
    assert "keyed and no key was given" in imported.output
    killed_after_halt(db, run_id)
    refused = resume(db, run_id, tmp_path)
    assert refused.exit_code == 2
    assert "key not given" in refused.output


def test_a_keyed_run_verifies_with_its_key_from_a_file_and_fails_with_another(
    keyed: tuple[str, str], tmp_path: Path
) -> None:
    run_id, db = keyed
    key_file = tmp_path / "chain.key"
    key_file.write_text(KEY + "\n", encoding="utf-8")
    good = invoke("verify", run_id, "--db", db, "--key-file", str(key_file))
    assert good.exit_code == 0, good.output
    assert good.output.splitlines()[0].endswith("  keyed")
    assert invoke("verify", run_id, "--db", db, env={KEY_FILE_ENV: str(key_file)}).exit_code == 0
    wrong = tmp_path / "wrong.key"
    wrong.write_text(OTHER_KEY, encoding="utf-8")
    assert findings(run_id, "--db", db, "--key-file", str(wrong)) == (1, [("wrong_key", 0, None)])
    short = tmp_path / "short.key"
    short.write_text("secret", encoding="utf-8")
    refused = invoke("verify", run_id, "--db", db, "--key-file", str(short))
    assert refused.exit_code == 2
    assert "a chain key needs at least 16" in refused.output


def test_an_insider_without_the_key_cannot_rechain_an_edit(keyed: tuple[str, str]) -> None:
    run_id, db = keyed
    store = SqliteStore(db)
    links = store.chain(run_id)[1]
    store.close()
    x, prev = links[2], links[1].hash
    forged = (*x.columns[:14], "all fine", x.columns[15])
    assert prev is not None
    forged_hash = link_v3(prev, forged)  # sha256, as the insider can
    assign = f"digest = X'{forged_hash}'"
    tamper(db, f"UPDATE events SET note = 'all fine', {assign} WHERE seq = 2")  # noqa: S608
    result = invoke("verify", run_id, "--db", db, "--json", env={KEY_ENV: KEY})
    kinds = [(f["kind"], f["seq"]) for f in json.loads(result.output)[0]["findings"]]
    assert ("edited", 2) in kinds


def test_a_keyed_run_rewritten_as_unkeyed_fails_require_keyed(
    keyed: tuple[str, str], tmp_path: Path
) -> None:
    # The one thing an insider without the key can still do: rechain the whole run unkeyed.
    # `verify` says so (mode unkeyed), and `--require-keyed` fails it.
    run_id, db = keyed
    path = tmp_path / "run.json"
    assert invoke("export", run_id, "--db", db, "-o", str(path)).exit_code == 0
    original = read_run_file(path)
    run = attrs.evolve(original.run, chain=UNKEYED)
    prev, chain = genesis(run), []
    for event in original.events:
        h = link(prev, event_columns(event))
        chain.append(EventHash(prev, h))
        prev = h
    assert original.record is not None
    record = attrs.evolve(original.record, journal_head=prev, answer="hunter2")
    run = attrs.evolve(run, record=record, record_hash=record_link(prev, record))
    forged = attrs.evolve(original, run=run, record=record, chain=tuple(chain), head_hash=prev)
    write_run_file(forged, path)
    env = {KEY_ENV: KEY}
    plain = invoke("verify", str(path), env=env)
    assert plain.exit_code == 0
    assert plain.output.splitlines()[0].endswith("  unkeyed")
    strict = invoke("verify", str(path), "--require-keyed", "--json", env=env)
    assert strict.exit_code == 1
    assert json.loads(strict.output)[0]["findings"][0]["kind"] == "not_keyed"


# --- journals written before records were sealed ----------------------------------------------


def test_a_journal_from_before_the_seal_verifies_and_says_its_record_is_not_sealed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    db = str(tmp_path / "old.db")
    assert invoke("import", str(RECORDED_V1 / "v1-lab-password.json"), "--db", db).exit_code == 0
    conn = sqlite3.connect(db)  # the journal as the fsm-agent before the seal wrote it
    conn.execute("ALTER TABLE runs DROP COLUMN chain")
    conn.execute("ALTER TABLE runs DROP COLUMN record_hash")
    conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm006_chain_mode_and_record_seal'")
    conn.commit()
    conn.close()
    refused = invoke("verify", "--all", "--db", db)  # a read command never migrates
    assert refused.exit_code == 70
    assert "fsm-agent migrate" in refused.output
    assert invoke("migrate", "--db", db).exit_code == 0
    result = invoke("verify", "--all", "--db", db)  # then it verifies as before
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].endswith("  unkeyed")
    assert "note: halt record not sealed: the run was journaled before" in result.output
    assert (
        "halt record not sealed (older journal)"
        in invoke("show", "0e9050bff8e8", "--db", db).output
    )
    assert invoke("replay", "0e9050bff8e8", "--db", db).exit_code == 0
    # its record is still checked against the chained halt
    tamper(db, "UPDATE runs SET halt_reason = 'max_steps', record ="
               " json_set(record, '$.halt_reason', 'max_steps')")  # fmt: skip
    code, found = findings("0e9050bff8e8", "--db", db)
    assert (code, found) == (1, [("record_edited", 4, "record.halt_reason")])


def test_a_trace_copy_is_sealed_as_the_journal_is(tmp_path: Path, mode: str) -> None:
    # The copy is written before the halting event commits: its head and seal are computed
    # ahead, in the run's own mode, and must be what the journal then holds.
    record = lab_run(tmp_path, [LOOKUP, ANSWER], trace_copy=tmp_path / "trace.json")
    copy = read_run_file(tmp_path / "trace.json")
    store = SqliteStore(tmp_path / "j.db")
    row = store.get_run(record.run_id)
    store.close()
    assert (copy.run.chain, copy.run.record_hash) == (row.chain, row.record_hash)
    assert copy.head_hash == record.journal_head
    assert findings(str(tmp_path / "trace.json")) == (0, [])
