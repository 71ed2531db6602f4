"""The hash chain against a real journal: every kind of tampering a person could do with
`sqlite3` shows at its first sequence number, in the journal and in an exported file."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fsm_agent.cli.main import cli
from fsm_agent.journal import chain_hash
from fsm_agent.journal.chain import verify_chain, verify_run
from fsm_agent.journal.chain_hash import link_for
from fsm_agent.journal.runfile import (
    RunFileError,
    export_run,
    import_run,
    read_run_file,
    verify_run_file,
    write_run_file,
)
from fsm_agent.runtime.record import read_record
from fsm_agent.stores.sqlite import SqliteStore
from tests.lab import LOOKUP, lab_run

ANSWER = {"answer": "swordfish"}


@pytest.fixture(params=[2, 3, 4], ids=["chain-v2", "chain-v3", "chain-v4"])
def version(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """The chain version the journal's new runs are written in: each tampering shows in
    versions 2 and 3 (what runs were chained with before) and version 4 (new runs) alike."""
    monkeypatch.setattr(chain_hash, "CURRENT_VERSION", request.param)
    return int(request.param)


@pytest.fixture
def journal(tmp_path: Path, version: int) -> tuple[Path, str]:
    """A completed lab run: events 0..4 (started, tool_pending, awaiting_receipts,
    drafting, done)."""
    record = lab_run(tmp_path, [LOOKUP, ANSWER])
    assert record.halt_reason == "completed"
    return tmp_path / "j.db", record.run_id


def tamper(db: Path, *statements: str) -> None:
    """What someone with the file and `sqlite3` can do: drop the append-only triggers."""
    conn = sqlite3.connect(db)
    conn.execute("DROP TRIGGER events_no_update")
    conn.execute("DROP TRIGGER events_no_delete")
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()


def rehash(row: dict[str, Any], names: list[str], prev: str, version: int) -> dict[str, Any]:
    """A forged events row, chained onto `prev` as a careful forger would, in `version`."""
    cols = tuple(row[n] for n in names if n not in ("prev_hash", "hash", "digest"))
    digest = link_for(version)(prev, cols, None)
    if version >= 3:
        return row | {"prev_hash": None, "hash": None, "digest": bytes.fromhex(digest)}
    return row | {"prev_hash": prev, "hash": digest, "digest": None}


def hash_column(version: int, digest: str) -> str:
    """An SQL assignment of an event's stored hash, as `version` stores it."""
    return f"digest = X'{digest}'" if version >= 3 else f"hash = '{digest}'"


def findings(db: Path, run_id: str) -> list[tuple[str, int]]:
    store = SqliteStore(db)
    try:
        return [(f.kind, f.seq) for f in verify_run(store, run_id).findings]
    finally:
        store.close()


def test_an_untouched_run_verifies_and_its_record_anchors_the_head(
    journal: tuple[Path, str], tmp_path: Path
) -> None:
    db, run_id = journal
    store = SqliteStore(db)
    report = verify_run(store, run_id)
    _, links, head = store.chain(run_id)
    store.close()
    assert report.ok, report.findings
    assert report.events == 5
    assert head == links[-1].hash
    assert read_record(tmp_path / "r.json").journal_head == head


def test_an_edited_payload_shows_at_its_seq(journal: tuple[Path, str]) -> None:
    db, run_id = journal
    tamper(db, f"UPDATE events SET note = 'all fine' WHERE run_id = '{run_id}' AND seq = 2")  # noqa: S608
    assert findings(db, run_id) == [("edited", 2)]


def test_an_edit_with_a_recomputed_hash_still_breaks_the_next_link(
    journal: tuple[Path, str], version: int
) -> None:
    db, run_id = journal
    store = SqliteStore(db)
    links = store.chain(run_id)[1]
    store.close()
    x, prev = links[2], links[1].hash
    forged = (*x.columns[:14], "all fine", x.columns[15])  # the note, edited
    assert prev is not None
    forged_hash = link_for(version)(prev, forged, None)
    assign = hash_column(version, forged_hash)
    tamper(db, f"UPDATE events SET note = 'all fine', {assign} WHERE seq = 2")  # noqa: S608
    # version 2 stores each event's prev_hash: seq 3 is chained onto an event not there;
    # version 3 does not: seq 3 does not chain onto the rewritten seq 2
    assert findings(db, run_id) == [("deleted" if version == 2 else "edited", 3)]


def test_a_deleted_event_shows_as_the_missing_seq(journal: tuple[Path, str]) -> None:
    db, run_id = journal
    tamper(db, "DELETE FROM events WHERE seq = 2")
    assert findings(db, run_id) == [("deleted", 2)]


def test_a_deleted_event_shows_even_when_the_rest_are_renumbered(
    journal: tuple[Path, str], version: int
) -> None:
    db, run_id = journal
    tamper(
        db,
        "DELETE FROM events WHERE seq = 2",
        "UPDATE events SET seq = seq + 100 WHERE seq > 2",
        "UPDATE events SET seq = seq - 101 WHERE seq > 100",
    )
    # version 3 stores no prev_hash: the event after the gap does not chain onto the one
    # before it, which is all that can be told
    assert findings(db, run_id) == [("deleted" if version == 2 else "edited", 2)]


def test_an_inserted_event_shows_at_its_seq(journal: tuple[Path, str], version: int) -> None:
    db, run_id = journal
    store = SqliteStore(db)
    head_1 = store.chain(run_id)[1][1].hash
    store.close()
    assert head_1 is not None
    conn = sqlite3.connect(db)
    row = conn.execute("SELECT * FROM events WHERE seq = 1").fetchone()
    names = [d[0] for d in conn.execute("SELECT * FROM events").description]
    conn.close()
    fake = dict(zip(names, row, strict=True)) | {"seq": 2, "note": "approved by ops"}
    fake = rehash(fake, names, head_1, version)  # a careful forger chains it onto seq 1
    values = ", ".join("?" * len(names))
    tamper(
        db,
        "UPDATE events SET seq = seq + 100 WHERE seq >= 2",
        "UPDATE events SET seq = seq - 99 WHERE seq >= 100",
    )
    conn = sqlite3.connect(db)
    conn.execute(f"INSERT INTO events VALUES ({values})", [fake[n] for n in names])  # noqa: S608
    conn.commit()
    conn.close()
    assert findings(db, run_id) == [("inserted", 2)]


def test_reordered_events_show_where_the_order_breaks(journal: tuple[Path, str]) -> None:
    db, run_id = journal
    tamper(
        db,
        "UPDATE events SET seq = 100 WHERE seq = 2",
        "UPDATE events SET seq = 2 WHERE seq = 3",
        "UPDATE events SET seq = 3 WHERE seq = 100",
    )
    assert findings(db, run_id) == [("reordered", 2)]


def test_a_truncated_tail_shows_by_the_head_hash(journal: tuple[Path, str]) -> None:
    db, run_id = journal
    tamper(db, "DELETE FROM events WHERE seq >= 3")
    assert findings(db, run_id) == [("truncated", 3)]


def test_an_edited_run_row_breaks_the_genesis(journal: tuple[Path, str]) -> None:
    db, run_id = journal
    tamper(db, "UPDATE runs SET task = 'something harmless'")
    assert findings(db, run_id) == [("run_edited", 0)]


def test_verify_cli_reports_each_run_and_exits_non_zero_on_tampering(
    journal: tuple[Path, str], tmp_path: Path
) -> None:
    db, run_id = journal
    other = lab_run(tmp_path, [LOOKUP, ANSWER]).run_id
    runner = CliRunner()
    ok = runner.invoke(cli, ["verify", "--all", "--db", str(db)])
    assert ok.exit_code == 0, ok.output
    assert ok.output.splitlines()[-1] == "2 of 2 runs verify"
    tamper(db, f"UPDATE events SET note = 'x' WHERE run_id = '{other}' AND seq = 1")  # noqa: S608
    bad = runner.invoke(cli, ["verify", "--all", "--db", str(db)])
    assert bad.exit_code == 1
    assert f"TAMPERED  {other}  5 events" in bad.output
    assert "  seq 1: edited: the event's bytes do not match its hash" in bad.output
    assert bad.output.splitlines()[-1] == "1 of 2 runs verify; 1 do not"
    one = runner.invoke(cli, ["verify", run_id, "--db", str(db), "--json"])
    assert one.exit_code == 0
    assert json.loads(one.output)[0]["ok"] is True


def test_verify_needs_a_run_or_all(journal: tuple[Path, str]) -> None:
    db, _ = journal
    result = CliRunner().invoke(cli, ["verify", "--db", str(db)])
    assert result.exit_code == 2
    assert "give a RUN_ID, a run FILE, or --all" in result.output


def test_an_exported_file_carries_the_chain_and_verifies_the_same_way(
    journal: tuple[Path, str], tmp_path: Path
) -> None:
    db, run_id = journal
    store = SqliteStore(db)
    run_file = export_run(store, run_id)
    store.close()
    path = write_run_file(run_file, tmp_path / "run.json")
    assert verify_run_file(read_run_file(path)).ok
    data = json.loads(path.read_text())
    data["events"][2]["note"] = "edited in the file"
    path.write_text(json.dumps(data))
    edited = read_run_file(path, checked=False)
    assert [(f.kind, f.seq) for f in verify_run_file(edited).findings] == [("edited", 2)]
    result = CliRunner().invoke(cli, ["verify", str(path)])
    assert result.exit_code == 1
    assert "seq 2: edited" in result.output
    target = SqliteStore(tmp_path / "other.db")
    with pytest.raises(RunFileError, match=r"hash chain does not verify: seq 2"):
        import_run(target, edited, source=str(path))
    assert target.list_runs() == []
    target.close()


def test_a_file_with_a_deleted_event_is_read_for_verify_and_says_so(
    journal: tuple[Path, str], tmp_path: Path
) -> None:
    db, run_id = journal
    store = SqliteStore(db)
    path = write_run_file(export_run(store, run_id), tmp_path / "run.json")
    store.close()
    data = json.loads(path.read_text())
    del data["events"][1], data["chain"][1]
    path.write_text(json.dumps(data))
    with pytest.raises(RunFileError):
        read_run_file(path)  # refused for use ...
    report = verify_run_file(read_run_file(path, checked=False))  # ... but verify says why
    assert [(f.kind, f.seq) for f in report.findings] == [("deleted", 1)]


def test_an_imported_run_keeps_its_chain(journal: tuple[Path, str], tmp_path: Path) -> None:
    db, run_id = journal
    store = SqliteStore(db)
    run_file = export_run(store, run_id)
    store.close()
    target = SqliteStore(tmp_path / "copy.db")
    import_run(target, run_file)
    _, links, head = target.chain(run_id)
    assert verify_run(target, run_id).ok
    assert head == run_file.head_hash
    assert [x.hash for x in links] == [h.hash for h in run_file.chain]
    target.close()


def test_verify_chain_of_an_empty_run_is_a_finding(journal: tuple[Path, str]) -> None:
    db, run_id = journal
    store = SqliteStore(db)
    run, _, head = store.chain(run_id)
    store.close()
    assert [f.kind for f in verify_chain(run, [], head).findings] == ["truncated"]


def test_an_event_forged_onto_the_head_shows_against_the_record(
    journal: tuple[Path, str], version: int
) -> None:
    # A halted run's head is kept with its sealed record; an INSERT after it does not move it.
    db, run_id = journal
    store = SqliteStore(db)
    head = store.chain(run_id)[2]
    store.close()
    assert head is not None
    conn = sqlite3.connect(db)
    row = conn.execute("SELECT * FROM events WHERE seq = 4").fetchone()
    names = [d[0] for d in conn.execute("SELECT * FROM events").description]
    fake = dict(zip(names, row, strict=True)) | {"seq": 5, "note": "refund approved"}
    fake = rehash(fake, names, head, version)
    values = ", ".join("?" * len(names))
    conn.execute(f"INSERT INTO events VALUES ({values})", [fake[n] for n in names])  # noqa: S608
    conn.commit()
    conn.close()
    # and past a halt no person's decision continued, the chain going on is a reopening
    assert findings(db, run_id) == [("inserted", 5), ("reopened", 5)]
