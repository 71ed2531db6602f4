"""A person's decision as an input the machine does not control: `check` explores every
decision a declared edge takes (and nobody deciding, and the wait expiring), and
`simulate` draws decisions and takes them through the real `decide_run`."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from click.testing import CliRunner

from fsm_agent.cli.main import cli
from fsm_agent.declaration.load import load_machine
from fsm_agent.journal.store import Event
from fsm_agent.stores.sqlite import SqliteStore
from tests.test_decisions import MACHINE

ROOT = Path(__file__).parent.parent


def _check(machine: Path) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(cli, ["check", str(machine), "--json"], catch_exceptions=False)
    return result.exit_code, json.loads(result.output)


def test_check_proves_a_machine_a_person_continues_and_reaches_every_decision() -> None:
    code, report = _check(MACHINE)
    assert code == 0, report
    properties = {p["name"]: p for p in report["properties"]}  # type: ignore[union-attr]
    assert all(p["proven"] for p in properties.values())
    # without the waits explored, the three decision edges were dead (CK005)
    assert "reachable" in str(properties["dead"]["summary"])


def test_check_finds_a_defect_only_a_decision_reaches(tmp_path: Path) -> None:
    """An answer that goes on into a state reached through nothing else: a gap there is
    found (a user action with outcomes no edge takes), so the decision was explored."""
    text = MACHINE.read_text(encoding="utf-8").replace(
        "{trigger: answered, source: handoff, dest: drafting}",
        "{trigger: answered, source: handoff, dest: escalated}",
    )
    text = text.replace(
        "  handoff: {terminal: true}\n",
        "  handoff: {terminal: true}\n  escalated: {action: model}\n",
    )
    text += "  - {trigger: answer, source: escalated, dest: drafting}\n"
    machine = tmp_path / "escalated.yaml"
    machine.write_text(text, encoding="utf-8")
    load_machine(str(machine))  # the declaration itself is valid
    code, report = _check(machine)
    gap = next(p for p in report["properties"] if p["name"] == "no-gap")  # type: ignore[union-attr]
    assert code == 1
    assert gap["proven"] is False
    triggers = [step["trigger"] for step in gap["path"]]
    assert "answered" in triggers  # the path to the gap goes through a person's answer


def test_simulate_draws_decisions_and_every_run_holds(tmp_path: Path) -> None:
    db = tmp_path / "sim.db"
    result = CliRunner().invoke(
        cli,
        ["simulate", str(MACHINE), "--tools", "tests.fixture_approvals", "--runs", "300",
         "--seed", "5", "--crash", "random", "--db", str(db), "-q", "--json"],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["violations"] == {} or not any(summary["violations"].values()), summary
    store = SqliteStore(db, read_only=True)
    try:
        decided: list[Event] = [
            e for rid in store.run_ids() for e in store.events(rid) if e.kind == "decided"
        ]
    finally:
        store.close()
    kinds = Counter(e.trigger for e in decided)
    assert kinds["approved"] > 0
    assert kinds["denied"] > 0
    assert kinds["answered"] > 0


def test_a_decided_run_is_one_trace_with_the_decision_as_an_event(tmp_path: Path) -> None:
    from fsm_agent.telemetry.content import TraceOptions
    from fsm_agent.telemetry.root import build_trace
    from tests.test_decisions import MODEL, TOOLS, cli, start

    run_id, call = start(tmp_path)
    approved = cli(tmp_path, "approve", run_id, "--call", call, "--by", "alice", "--why",
                   "ticket 88", *MODEL, *TOOLS, "--db", "j.db")  # fmt: skip
    assert approved.returncode == 0, approved.stderr
    store = SqliteStore(tmp_path / "j.db", read_only=True)
    try:
        spans = build_trace(store.get_run(run_id), store.events(run_id), TraceOptions())
    finally:
        store.close()
    root = spans[0]
    decided = [e for e in root.events if e.name == "fsm_agent.decided"]
    assert [e.attributes["fsm_agent.decision"] for e in decided] == ["approved"]
    assert "approved by alice" in str(decided[0].attributes["fsm_agent.note"])
    assert len({s.trace_id for s in spans}) == 1
    steps = [s for s in spans[1:] if s.start_ns > s.end_ns]
    assert steps == []  # the wait does not stretch a step backwards in time


def test_a_fork_s_trace_names_its_start_from_the_parent(tmp_path: Path) -> None:
    from fsm_agent.telemetry.content import TraceOptions
    from fsm_agent.telemetry.root import build_trace
    from tests.test_decisions import MODEL, TOOLS, cli, start

    run_id, call = start(tmp_path)
    assert cli(tmp_path, "approve", run_id, "--call", call, "--why", "ok", *MODEL, *TOOLS,
               "--db", "j.db").returncode == 0  # fmt: skip
    forked = cli(tmp_path, "fork", run_id, "--at", "3", *MODEL, *TOOLS, "--db", "j.db", "--json")
    assert forked.returncode == 0, forked.stderr
    fork_id = json.loads(forked.stdout)["run_id"]
    store = SqliteStore(tmp_path / "j.db", read_only=True)
    try:
        spans = build_trace(store.get_run(fork_id), store.events(fork_id), TraceOptions())
    finally:
        store.close()
    names = [e.name for e in spans[0].events]
    assert "fsm_agent.forked" in names
    assert "fsm_agent.decided" in names  # the parent's decision, in the fork's own past
    note = next(e for e in spans[0].events if e.name == "fsm_agent.forked").attributes
    assert f"forked from run {run_id} at seq 3" in str(note["fsm_agent.note"])
