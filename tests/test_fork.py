"""Forks through the real CLI (`fsm-agent fork RUN --at SEQ`): a fork under an edited
declaration that completes, verifies and replays on its own (its copied events re-decided
under the parent's declaration, never the fork's); refusals that write nothing (a tampered
parent, a side-effecting call, SEQ out of range, no matching state, a lowered budget);
budgets carried from the parent, never fresh."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result

from fsm_agent import HaltReason, read_record
from fsm_agent.journal.chain import verify_run
from fsm_agent.journal.store import Event
from fsm_agent.runtime.fork_lineage import Lineage, lineages
from fsm_agent.stores import open_store
from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.testing import assert_replays
from tests.console_server import console
from tests.fixture_resume import IDEMPOTENT_ENV, LEDGER_ENV
from tests.insider import insider
from tests.lab import LAB_TOOLS, LOOKUP, MISS
from tests.test_store_contract import pg_location, pg_server  # noqa: F401 - fixtures

ROOT = Path(__file__).parent.parent
AGENT_LOOP = ROOT / "fsm_agent" / "machines" / "agent_loop.yaml"
ANSWER = {"answer": "swordfish"}
ORACLE = "python:tests.fixture_resume:oracle"
#: environment variables a CLI call sets (None: unset during the call)
Env = Mapping[str, str | None] | None


def cli(*args: str, env: Env = None) -> Result:
    from fsm_agent.cli.main import cli as group

    return CliRunner().invoke(group, list(args), env=env)


def script(tmp_path: Path, name: str, replies: list[Any]) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(replies), encoding="utf-8")
    return f"scripted:{path}"


def v2(tmp_path: Path, **edits: str) -> Path:
    """agent_loop edited: renamed, and a thrash limit of 2 (the parent's three identical
    lookups would have thrashed under it)."""
    text = AGENT_LOOP.read_text(encoding="utf-8")
    text = text.replace("name: agent_loop", "name: agent_loop_v2", 1)
    text = text.replace("thrash_limit: 0 ", "thrash_limit: 2 ", 1)
    for old, new in edits.items():
        text = text.replace(old, new)
    path = tmp_path / "v2.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def looping_parent(tmp_path: Path, db: str | None = None, env: Env = None) -> tuple[str, str]:
    """A lab run that looks up the wrong thing until its 8 steps are spent; its id and db
    (a SQLite file under tmp_path unless `db` names one)."""
    db = db or str(tmp_path / "j.db")
    model = script(tmp_path, "loop.json", [MISS] * 12)
    ran = cli("run", "agent_loop", "--task", "Find the lab password", "--model", model,
              "--tools", LAB_TOOLS, "--allow", "lookup", "--db", db, "--quiet",
              "--record", str(tmp_path / "parent.json"), env=env)  # fmt: skip
    assert ran.exit_code == 3, ran.output  # max_steps
    return read_record(tmp_path / "parent.json").run_id, db


def fork(tmp_path: Path, parent: str, db: str, *args: str, env: Env = None,
         record: str = "fork.json") -> Result:  # fmt: skip
    return cli("fork", parent, *args, "--tools", LAB_TOOLS, "--db", db, "--quiet",
               "--record", str(tmp_path / record), env=env)  # fmt: skip


def run_events(db: str, run_id: str) -> list[Event]:
    store = open_store(db, read_only=True)
    try:
        return store.events(run_id)
    finally:
        store.close()


def run_ids(db: str) -> list[str]:
    store = open_store(db, read_only=True)
    try:
        return store.run_ids()
    finally:
        store.close()


def test_a_fork_under_an_edited_declaration_completes_verifies_and_replays(tmp_path: Path) -> None:
    parent, db = looping_parent(tmp_path)
    machine = v2(tmp_path)
    fixed = script(tmp_path, "fix.json", [MISS, MISS, MISS, LOOKUP, ANSWER])

    hint = cli("replay", parent, "--db", db, "--machine", str(machine))
    assert "would have halted thrashing at seq 4" in hint.output
    assert f"act on it: fsm-agent fork {parent} --at 3 --machine {machine}" in hint.output

    forked = fork(tmp_path, parent, db, "--at", "9", "--machine", str(machine), "--model", fixed)
    assert forked.exit_code == 0, forked.output
    record = read_record(tmp_path / "fork.json")
    assert record.halt_reason is HaltReason.COMPLETED
    assert record.answer == "swordfish"
    assert record.steps_used == 5  # the parent's 3 steps, then 2 of its own
    assert f"run {record.run_id} forked from {parent} at seq 9" in forked.output
    assert record.run_id != parent

    store = SqliteStore(db, read_only=True)
    try:
        mine, theirs = store.events(record.run_id), store.events(parent)
        _, links, _ = store.chain(parent)
        assert verify_run(store, record.run_id).ok
        assert verify_run(store, parent).ok
        row = store.get_run(record.run_id)
    finally:
        store.close()
    for copy, original in zip(mine[:10], theirs[:10], strict=True):  # kept as recorded
        assert copy.run_id == record.run_id
        assert (copy.snapshot, copy.facts, copy.guards, copy.dest) == (
            original.snapshot, original.facts, original.guards, original.dest)  # fmt: skip
    [(index, lineage)] = lineages(mine)
    assert (index, mine[index].kind, mine[index].seq) == (10, "forked", 10)
    assert isinstance(lineage, Lineage)
    assert (lineage.parent, lineage.at, lineage.state) == (parent, 9, "drafting")
    assert lineage.parent_hash == links[9].hash
    assert lineage.machine_sha256 == row.machine_sha256 != lineage.parent_machine_sha256
    assert lineage.parent_machine_text is not None
    assert "name: agent_loop\n" in lineage.parent_machine_text
    assert row.machine == "agent_loop_v2"

    assert cli("verify", record.run_id, "--db", db).exit_code == 0
    replayed = cli("replay", record.run_id, "--db", db)
    assert replayed.exit_code == 0, replayed.output
    assert "halt completed proven" in replayed.output
    assert "seq 0..9 under its parent's declaration agent_loop" in replayed.output
    assert "under its own declaration agent_loop_v2" in replayed.output
    # the copied events were not decided by v2: under v2 throughout they diverge
    under_v2 = cli("replay", record.run_id, "--db", db, "--machine", str(machine))
    assert "would have halted thrashing at seq 4" in under_v2.output
    assert_replays(Path(db), record.run_id)

    drawn = cli("diagram", str(machine), "--run", record.run_id, "--db", db, "--format", "dot")
    assert drawn.exit_code == 0, drawn.output
    assert "note:" not in drawn.output  # its copied edges found on v2 too, by identity
    shown = cli("show", record.run_id, "--db", db)
    assert f"fork of run {parent} at seq 9 (step 3/8, drafting)" in shown.output
    assert "agent_loop_v2" in shown.output
    assert "thrash limit → 2" in shown.output
    assert "its event at seq 9 is still the one forked from" in shown.output
    assert "first divergence from the parent: at seq 12 drafting → tool_pending" in shown.output


def test_a_fork_file_verifies_and_replays_alone(tmp_path: Path) -> None:
    parent, db = looping_parent(tmp_path)
    fixed = script(tmp_path, "fix.json", [MISS, MISS, MISS, LOOKUP, ANSWER])
    assert fork(tmp_path, parent, db, "--at", "9", "--machine", str(v2(tmp_path)),
                "--model", fixed).exit_code == 0  # fmt: skip
    run_id = read_record(tmp_path / "fork.json").run_id
    out = str(tmp_path / "fork-run.json")
    assert cli("export", run_id, "-o", out, "--db", db).exit_code == 0
    other = str(tmp_path / "other.db")
    assert cli("import", out, "--db", other).exit_code == 0
    for source in (out, run_id):
        assert cli("verify", source, "--db", other).exit_code == 0
        replayed = cli("replay", source, "--db", other)
        assert replayed.exit_code == 0, replayed.output
    shown = cli("show", run_id, "--db", other)
    assert f"run {parent} is not in this journal" in shown.output
    report = cli("report", run_id, "-o", str(tmp_path / "r.html"), "--db", db)
    assert report.exit_code == 0, report.output
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert '<section id="lineage">' in html
    assert f"fork of run {parent} at seq 9" in html
    assert "first divergence from the parent: at seq 12" in html
    with console(Path(db)) as c:
        page = httpx.get(f"{c.url}/runs/{run_id}").text
        parts = httpx.get(f"{c.url}/api/runs/{run_id}/parts").json()["sections"]
    for text in (page, parts["report-header"]):
        assert f"fork of run {parent} at seq 9 (step 3/8, drafting)" in text
        assert "agent_loop_v2 (" in text


def test_a_fork_of_a_tampered_parent_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    parent, db = looping_parent(tmp_path)
    insider(Path(db), f"UPDATE events SET note = 'edited' WHERE run_id = '{parent}' AND seq = 2")  # noqa: S608
    refused = fork(tmp_path, parent, db, "--at", "9", "--model", script(tmp_path, "m.json", []))
    assert refused.exit_code == 2
    assert (
        f"Error: run {parent} is not forked: its journal does not verify (seq 2" in refused.output
    )
    assert "Traceback" not in refused.output
    assert run_ids(db) == [parent]
    assert not (tmp_path / "fork.json").exists()


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (("--at", "99"), "seq 99 is out of range (its events are 0..25)"),
        (("--at", "25"), "seq 25 is its halt (max_steps); fork earlier (0..24)"),
        (("--at", "24"), "its budgets at seq 24 are spent (max_steps: 8 of 8 steps"),
        (("--at", "9", "--max-steps", "4"), "max_steps 4 would lower the parent's max_steps (8"),
    ],
)
def test_refusals_name_the_problem_and_write_nothing(
    tmp_path: Path, args: tuple[str, ...], why: str
) -> None:
    parent, db = looping_parent(tmp_path)
    refused = fork(tmp_path, parent, db, *args, "--model", script(tmp_path, "m.json", []))
    assert refused.exit_code == 2, refused.output
    assert f"Error: run {parent} is not forked: {why}" in refused.output
    assert run_ids(db) == [parent]


def test_a_declaration_without_the_parents_state_is_refused(tmp_path: Path) -> None:
    parent, db = looping_parent(tmp_path)
    renamed = v2(tmp_path, drafting="thinking")
    refused = fork(tmp_path, parent, db, "--at", "9", "--machine", str(renamed),
                   "--model", script(tmp_path, "m.json", []))  # fmt: skip
    assert refused.exit_code == 2, refused.output
    assert "has no state 'drafting', the parent's state at seq 9" in refused.output
    assert run_ids(db) == [parent]


def test_budgets_carry_on_from_the_parent_and_are_only_raised(tmp_path: Path) -> None:
    parent, db = looping_parent(tmp_path)
    more = fork(tmp_path, parent, db, "--at", "24", "--max-steps", "10",
                "--model", script(tmp_path, "m.json", [MISS] * 12))  # fmt: skip
    assert more.exit_code == 3, more.output  # max_steps
    record = read_record(tmp_path / "fork.json")
    first = read_record(tmp_path / "parent.json")
    assert record.halt_reason is HaltReason.MAX_STEPS
    assert (record.steps_used, record.max_steps) == (10, 10)  # 8 carried, 2 of its own
    assert record.budgets.max_steps == 10
    assert record.meters.tool_calls == first.meters.tool_calls + 2
    assert record.meters.elapsed_ms >= first.meters.elapsed_ms - 5  # the clock carried too
    shown = cli("show", record.run_id, "--db", db)
    assert "changed: max_steps 8 → 10" in shown.output
    assert "none: its" not in shown.output  # it went on past the parent's halt
    assert cli("replay", record.run_id, "--db", db).exit_code == 0


def charge_parent(tmp_path: Path, env: dict[str, str]) -> tuple[str, str]:
    """A run that charged order ord_1 once (tests.fixture_resume), then answered."""
    db = str(tmp_path / "j.db")
    ran = cli("run", "agent_loop", "--task", "charge order ord_1 once", "--tools",
              "tests.fixture_resume", "--allow", "charge", "--db", db, "--quiet",
              "--model", "python:tests.fixture_resume:oracle",
              "--record", str(tmp_path / "parent.json"), env=env)  # fmt: skip
    assert ran.exit_code == 0, ran.output
    return read_record(tmp_path / "parent.json").run_id, db


def test_a_fork_inside_a_side_effecting_call_is_refused_unless_idempotent(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    env = {LEDGER_ENV: str(ledger)}
    parent, db = charge_parent(tmp_path, env)
    assert ledger.read_text().splitlines() == ["ord_1 k-1"]
    store = SqliteStore(db, read_only=True)
    events = store.events(parent)
    store.close()
    at = next(e.seq for e in events if e.dest == "tool_pending")  # about to charge
    args = ("--at", str(at), "--model", ORACLE)
    refused = cli("fork", parent, *args, "--tools", "tests.fixture_resume", "--db", db,
                  "--record", str(tmp_path / "fork.json"), env=env)  # fmt: skip
    assert refused.exit_code == 2, refused.output
    assert f"seq {at} is inside a side-effecting call" in refused.output
    assert (
        f"the parent made that call (seq {at + 1}): the fork would make it again" in refused.output
    )
    assert "'charge' is not declared idempotent" in refused.output
    assert run_ids(db) == [parent]
    assert ledger.read_text().splitlines() == ["ord_1 k-1"]  # never charged twice

    after = cli("fork", parent, "--at", str(at + 1), "--model", ORACLE,
                "--tools", "tests.fixture_resume", "--db", db,
                "--record", str(tmp_path / "after.json"), env=env)  # fmt: skip
    assert after.exit_code == 0, after.output  # after its outcome: nothing is made again
    assert ledger.read_text().splitlines() == ["ord_1 k-1"]

    again = cli("fork", parent, *args, "--tools", "tests.fixture_resume", "--db", db,
                "--record", str(tmp_path / "idem.json"),
                env={**env, IDEMPOTENT_ENV: "1"})  # fmt: skip
    assert again.exit_code == 0, again.output  # idempotent: the same key, made again
    assert ledger.read_text().splitlines() == ["ord_1 k-1", "ord_1 k-1"]
    assert read_record(tmp_path / "idem.json").halt_reason is HaltReason.COMPLETED


def test_the_fork_is_written_before_it_is_driven_and_resumes_like_any_run(tmp_path: Path) -> None:
    """A fork whose process stopped right after it was written is an interrupted run."""
    from fsm_agent import ScriptedModel, load_tools
    from fsm_agent.runtime.fork import plan_fork

    parent, db = looping_parent(tmp_path)
    store = SqliteStore(db)
    try:
        row, events = plan_fork(store, parent, 9, "f0", model=ScriptedModel([]),
                                tools=load_tools(LAB_TOOLS), machine=None, budgets=None,
                                allow=None, clock=lambda: 0.0)  # fmt: skip
        store.import_run(row, events, None)
    finally:
        store.close()
    listed = cli("runs", "--db", db, "--json")
    assert {r["run_id"]: r["shown_status"] for r in json.loads(listed.output)}[
        "f0"
    ] == "interrupted"
    fixed = script(tmp_path, "fix.json", [MISS, MISS, MISS, LOOKUP, ANSWER])
    resumed = cli("resume", "f0", "--model", fixed, "--tools", LAB_TOOLS, "--db", db,
                  "--record", str(tmp_path / "f0.json"))  # fmt: skip
    assert resumed.exit_code == 0, resumed.output
    assert read_record(tmp_path / "f0.json").halt_reason is HaltReason.COMPLETED
    assert cli("replay", "f0", "--db", db).exit_code == 0
    with sqlite3.connect(db) as conn:
        kinds = [
            k for (k,) in conn.execute("SELECT kind FROM events WHERE run_id = 'f0' ORDER BY seq")
        ]
    assert kinds[10:12] == ["forked", "resumed"]


def test_a_keyed_fork_on_postgresql_verifies_and_replays_with_its_key(
    tmp_path: Path,
    pg_location: str,  # noqa: F811
) -> None:
    keyed = {"FSM_AGENT_CHAIN_KEY": "k" * 32}
    parent, db = looping_parent(tmp_path, db=pg_location, env=keyed)
    fixed = script(tmp_path, "fix.json", [MISS, MISS, MISS, LOOKUP, ANSWER])
    args = ("--at", "9", "--machine", str(v2(tmp_path)), "--model", fixed)
    unkeyed: dict[str, str | None] = {"FSM_AGENT_CHAIN_KEY": None}
    refused = fork(tmp_path, parent, db, *args, env=unkeyed)
    assert refused.exit_code == 2, refused.output
    assert "its journal does not verify (keyed (key id" in refused.output
    assert run_ids(db) == [parent]
    forked = fork(tmp_path, parent, db, *args, env=keyed)
    assert forked.exit_code == 0, forked.output
    run_id = read_record(tmp_path / "fork.json").run_id
    listed = {r["run_id"]: r["chain"] for r in json.loads(cli("runs", "--db", db, "--json",
                                                             env=keyed).output)}  # fmt: skip
    assert listed[run_id].startswith("hmac-sha256/4:")
    assert cli("verify", run_id, "--db", db, env=keyed).exit_code == 0
    replayed = cli("replay", run_id, "--db", db, env=keyed)
    assert replayed.exit_code == 0, replayed.output
    assert "halt completed proven" in replayed.output


def test_a_call_the_parent_holds_no_outcome_of_is_refused_and_a_fork_of_a_fork_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fsm_agent import ScriptedModel, load_tools
    from fsm_agent.runtime.fork import plan_fork

    ledger = tmp_path / "ledger"
    env: dict[str, str | None] = {LEDGER_ENV: str(ledger)}
    parent, db = charge_parent(tmp_path, {LEDGER_ENV: str(ledger)})
    monkeypatch.setenv(IDEMPOTENT_ENV, "1")  # a fork written at the call, never driven
    store = SqliteStore(db)
    try:
        row, events = plan_fork(store, parent, 1, "f1", model=ScriptedModel([]),
                                tools=load_tools("tests.fixture_resume"), machine=None,
                                budgets=None, allow=None, clock=lambda: 0.0)  # fmt: skip
        store.import_run(row, events, None)
    finally:
        store.close()
    assert events[-1].dest == "tool_pending"
    monkeypatch.delenv(IDEMPOTENT_ENV)
    refused = cli("fork", "f1", "--at", "2", "--model", ORACLE, "--tools", "tests.fixture_resume",
                  "--db", db, "--record", str(tmp_path / "no.json"), env=env)  # fmt: skip
    assert refused.exit_code == 2, refused.output
    assert (
        "the parent's journal holds no outcome of it: its side effect is unknown" in refused.output
    )
    assert ledger.read_text().splitlines() == ["ord_1 k-1"]

    resumed = cli("resume", "f1", "--model", ORACLE, "--tools", "tests.fixture_resume", "--db", db,
                  "--record", str(tmp_path / "f1.json"),
                  env={**env, IDEMPOTENT_ENV: "1"})  # fmt: skip
    assert resumed.exit_code == 0, resumed.output  # idempotent: made again, the same key
    last = len(run_events(db, "f1")) - 2  # the event before its halt
    again = cli("fork", "f1", "--at", str(last), "--model", ORACLE, "--tools",
                "tests.fixture_resume", "--db", db, "--record", str(tmp_path / "f2.json"),
                env=env)  # fmt: skip
    assert again.exit_code == 0, again.output
    f2 = read_record(tmp_path / "f2.json").run_id
    replayed = cli("replay", f2, "--db", db)
    assert replayed.exit_code == 0, replayed.output
    assert f"a fork of run f1 at seq {last}" in replayed.output
    assert cli("verify", f2, "--db", db).exit_code == 0
