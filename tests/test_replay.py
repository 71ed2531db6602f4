"""Replay proves halts from the journal alone, and says where a change would rewrite them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

import pytest
from click.testing import CliRunner

import fsm_agent.declaration.machine as machine_module
import fsm_agent.runtime.guards as guards_module
from fsm_agent import HaltReason, Snapshot
from fsm_agent.cli.main import cli
from fsm_agent.declaration.load import load_machine, parse_machine
from fsm_agent.examples.scenarios import SCENARIOS, run_scenario
from fsm_agent.review.replay import replay_events
from fsm_agent.review.view import format_step
from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.testing import assert_replays
from tests.lab import LOOKUP, MISS, lab_run


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(tmp_path / "j.db")
    yield s
    s.close()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_every_example_run_replays_clean(store: SqliteStore, tmp_path: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    record = run_scenario(scenario, store=store, record_path=tmp_path / "r.json")
    events = store.events(record.run_id)
    report = replay_events(store.get_run(record.run_id), events)
    assert report.ok, report.summary
    assert report.recomputed_halt is record.halt_reason
    assert len(report.steps) == len(events)
    assert report.summary.startswith("replay matches")
    assert_replays(store.path, record.run_id)


def test_a_changed_guard_diverges_at_the_step_it_changes(
    store: SqliteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = lab_run(tmp_path, [LOOKUP, {"answer": "swordfish"}], store=store)
    assert record.halt_reason is HaltReason.COMPLETED

    def stricter(s: Snapshot) -> bool:  # a "fix" that would have refused this answer
        return False

    changed = dict(guards_module.BUILTIN_GUARDS, answer_grounded=stricter)
    monkeypatch.setattr(guards_module, "BUILTIN_GUARDS", MappingProxyType(changed))
    monkeypatch.setattr(machine_module, "_CACHE", {})
    report = replay_events(store.get_run(record.run_id), store.events(record.run_id))
    assert not report.ok
    last = report.steps[-1]
    assert last.verdict == "diverged"
    assert (last.source, last.dest, last.trigger) == ("drafting", "done", "answer")
    assert last.recomputed_dest == "drafting"  # the retry edge now
    assert "now goes to 'drafting'; recorded 'done' halting 'completed'" in report.summary
    grounded = next(g for g in last.guards if g.guard == "answer_grounded")
    assert (grounded.recorded, grounded.recomputed) == (True, False)
    with pytest.raises(AssertionError, match="does not replay"):
        assert_replays(store.path, record.run_id)


def test_a_counterfactual_lower_cap_halts_at_the_new_cap(
    store: SqliteStore, tmp_path: Path
) -> None:
    record = lab_run(tmp_path, [MISS] * 12, store=store)
    assert record.halt_reason is HaltReason.MAX_STEPS
    report = replay_events(
        store.get_run(record.run_id), store.events(record.run_id), budgets={"max_steps": 5}
    )
    assert report.counterfactual
    last = report.steps[-1]
    assert last.verdict == "halted_earlier"
    assert last.recomputed_halt is HaltReason.MAX_STEPS
    assert (last.step, last.max_steps) == (5, 5)
    assert report.summary.startswith("would have halted max_steps at seq")


def test_a_counterfactual_that_needs_unrecorded_facts_says_so(
    store: SqliteStore, tmp_path: Path
) -> None:
    record = lab_run(tmp_path, [MISS] * 12, store=store)
    report = replay_events(
        store.get_run(record.run_id), store.events(record.run_id), budgets={"max_steps": 10}
    )
    assert not report.ok
    assert report.steps[-1].verdict == "needs_facts"
    assert "needs facts the journal does not hold" in report.summary
    assert "step 9's model reply was never recorded" in report.summary


def test_a_counterfactual_machine_with_a_thrash_limit(store: SqliteStore, tmp_path: Path) -> None:
    record = lab_run(tmp_path, [MISS] * 12, store=store)
    text = load_machine("agent_loop").text.replace("thrash_limit: 0", "thrash_limit: 3")
    other = parse_machine(text, source="thrash.yaml")
    report = replay_events(store.get_run(record.run_id), store.events(record.run_id), machine=other)
    last = report.steps[-1]
    assert last.verdict == "halted_earlier"
    assert last.recomputed_halt is HaltReason.THRASHING
    assert last.step == 3


def test_format_step_shows_guards_meters_reply_and_receipts(
    store: SqliteStore, tmp_path: Path
) -> None:
    record = lab_run(tmp_path, [LOOKUP, {"answer": "swordfish"}], store=store)
    report = replay_events(store.get_run(record.run_id), store.events(record.run_id))
    text = "\n".join(format_step(s) for s in report.steps)
    assert "step 1/8  drafting → tool_pending  [tool_call]  ok" in text
    assert "guards (recorded→now): not tool_allowed F→F" in text
    assert "receipts: 200 fact:lab password" in text
    assert 'reply: {"answer": "swordfish"}' in text
    assert "halt: completed  ok" in text


def test_cli_replay_exit_codes_and_json(store: SqliteStore, tmp_path: Path) -> None:
    record = lab_run(tmp_path, [MISS] * 12, store=store)
    db = str(store.path)
    runner = CliRunner()
    ok = runner.invoke(cli, ["replay", record.run_id, "--db", db], catch_exceptions=False)
    assert ok.exit_code == 0
    assert "replay matches: 26 transitions re-decided, halt max_steps proven" in ok.output
    lower = runner.invoke(cli, ["replay", record.run_id, "--db", db, "--max-steps", "4"])
    assert lower.exit_code == 0
    assert "would have halted max_steps" in lower.output
    higher = runner.invoke(cli, ["replay", record.run_id, "--db", db, "--max-steps", "9"])
    assert higher.exit_code == 1
    assert "needs facts the journal does not hold" in higher.output
    lines = runner.invoke(cli, ["replay", record.run_id, "--db", db, "--json"]).output.splitlines()
    objects = [json.loads(line) for line in lines]
    assert [o["seq"] for o in objects[:-1]] == list(range(26))
    assert objects[-1]["ok"] is True
    missing = runner.invoke(cli, ["replay", "nope", "--db", db])
    assert missing.exit_code == 2
    assert "no run 'nope'" in missing.output


def test_cli_export_import_replay_and_stats(store: SqliteStore, tmp_path: Path) -> None:
    record = lab_run(tmp_path, [LOOKUP, {"answer": "swordfish"}], store=store)
    runner = CliRunner()
    db, other, file = str(store.path), str(tmp_path / "other.db"), str(tmp_path / "run.json")
    out = runner.invoke(cli, ["export", record.run_id, "-o", file, "--db", db])
    assert out.exit_code == 0, out.output
    assert f"exported run {record.run_id} (5 events)" in out.output
    assert runner.invoke(cli, ["import", file, "--db", other]).exit_code == 0
    again = runner.invoke(cli, ["import", file, "--db", other])
    assert again.exit_code == 2
    assert "never overwrites" in again.output
    replayed = runner.invoke(cli, ["replay", file])
    assert replayed.exit_code == 0
    assert "halt completed proven" in replayed.output
    assert runner.invoke(cli, ["replay", record.run_id, "--db", other]).exit_code == 0
    assert_replays(file)
    stats = runner.invoke(cli, ["stats", "--db", other, "--json"])
    assert stats.exit_code == 0
    [machine] = json.loads(stats.output)["machines"]
    assert (machine["machine"], machine["runs"], machine["halt_reasons"]) == (
        "agent_loop",
        1,
        {"completed": 1},
    )
