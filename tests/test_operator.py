"""Only a person raises a cap: raise-budget on a live run in another process, journaled."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fsm_agent import HaltReason, Lane, Prompt, ScriptedModel, load_tools, read_record, run
from fsm_agent.cli.main import cli
from fsm_agent.cli.run_output import progress_line
from fsm_agent.journal.store import Control
from fsm_agent.review.replay import replay_events
from fsm_agent.stores.sqlite import SqliteStore
from tests.lab import LOOKUP, MISS, lab_run

ROOT = Path(__file__).parent.parent
CHILD = Path(__file__).parent / "child_raise.py"


def test_raise_budget_on_a_live_run_in_another_process(tmp_path: Path) -> None:
    db, record = tmp_path / "j.db", tmp_path / "r.json"
    ready, go = tmp_path / "ready", tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(db), str(record), str(ready), str(go)], cwd=ROOT, env=env
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():  # the run is live and inside its first tool call
            assert child.poll() is None, "the child run ended early"
            assert time.monotonic() < deadline, "the child run never got going"
            time.sleep(0.01)
        runner = CliRunner()
        lower = runner.invoke(cli, ["raise-budget", "raise-run", "--max-steps", "2",
                                    "--why", "x", "--db", str(db)])  # fmt: skip
        assert lower.exit_code == 2
        assert "does not raise the current 3" in lower.output
        raised = runner.invoke(cli, ["raise-budget", "raise-run", "--max-steps", "5", "--why",
                                     "incident 42: needs two more lookups", "--who", "alice",
                                     "--db", str(db)])  # fmt: skip
        assert raised.exit_code == 0, raised.output
        assert "max_steps 3 -> 5" in raised.output
        go.touch()
        assert child.wait(timeout=60) == 3  # budget_exhausted, at the raised cap
    finally:
        go.touch()
        if child.poll() is None:
            child.kill()
    halt = read_record(record)
    assert halt.halt_reason is HaltReason.MAX_STEPS
    assert (halt.steps_used, halt.max_steps) == (5, 5)
    store = SqliteStore(db)
    try:
        events = store.events("raise-run")
        row = store.get_run("raise-run")
    finally:
        store.close()
    [act] = [e for e in events if e.kind == "operator"]
    assert act.note == (
        "raise-budget by alice: max_steps 3 -> 5; why: incident 42: needs two more lookups"
    )
    assert act.snapshot.budgets.max_steps == 5
    assert act.snapshot.meters.steps_used == 1  # applied before the second model call
    assert row.budgets.max_steps == 3  # the frozen start budgets are never rewritten
    report = replay_events(row, events)
    assert report.ok, report.summary
    shown = CliRunner().invoke(cli, ["show", "raise-run", "--db", str(db)])
    assert "drafting → drafting  [raise_budget]" in shown.output
    assert "raise-budget by alice: max_steps 3 -> 5" in shown.output
    assert any(s.verdict == "external" and "alice" in (s.detail or "") for s in report.steps)
    # one cap everywhere after the raise: the live line, `runs`, `show`
    lines = []
    for event in events:
        with contextlib.redirect_stderr(io.StringIO()) as err:
            progress_line(quiet=False)(event)
        lines += err.getvalue().splitlines()
    assert lines[-1].startswith("step 5/5  drafting → budget_exhausted  [budget]")
    assert not any("/3" in line for line in lines if line.startswith(("step 4", "step 5")))
    listed = CliRunner().invoke(cli, ["runs", "--db", str(db)]).output.splitlines()
    assert listed[0].split() == ["RUN", "MACHINE", "HALT", "STEPS", "STARTED", "TASK"]
    assert listed[1].split()[:4] == ["raise-run", "agent_loop", "max_steps", "5/5"]
    assert "halted: max_steps (budget_exhausted) after 5/5 steps" in shown.output
    halted = CliRunner().invoke(cli, ["raise-budget", "raise-run", "--max-steps", "9",
                                      "--why", "late", "--db", str(db)])  # fmt: skip
    assert halted.exit_code == 2
    assert "only a live run's caps can be raised" in halted.output


def test_raise_budget_needs_a_cap_and_a_reason(tmp_path: Path) -> None:
    runner = CliRunner()
    db = tmp_path / "j.db"
    SqliteStore(db).close()
    none = runner.invoke(cli, ["raise-budget", "r", "--why", "x", "--db", str(db)])
    assert none.exit_code == 2
    assert "say which cap to raise" in none.output
    missing = runner.invoke(cli, ["raise-budget", "r", "--max-steps", "9", "--db", str(db)])
    assert missing.exit_code == 2
    assert "--why" in missing.output


class RemoteModel:
    """A model adapter on a paid HTTP lane (data plane): a freeze must stop it being called."""

    lane = Lane(kind="http", tier="paid")

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, prompt: object) -> dict[str, object]:
        self.calls += 1
        return {"tool_call": {"name": "lookup", "args": {"q": "again"}}}


def test_a_routing_freeze_stops_non_local_model_calls_until_lifted(tmp_path: Path) -> None:
    db = tmp_path / "j.db"
    runner = CliRunner()
    frozen = runner.invoke(cli, ["freeze-routing", "--why", "provider incident", "--who", "bob",
                                 "--db", str(db)])  # fmt: skip
    assert frozen.exit_code == 0, frozen.output
    remote = RemoteModel()
    record = lab_run(tmp_path, remote, store=db, budgets={"max_steps": 3})
    assert record.halt_reason is HaltReason.ROUTING_FROZEN
    assert record.terminal_state == "handoff"
    assert remote.calls == 0  # refused before the call, not after
    assert record.error is not None
    assert "routing frozen by bob (provider incident)" in record.error
    assert "http/paid is not a local function" in record.error
    # A local model is not affected by the freeze.
    local = lab_run(
        tmp_path,
        [{"tool_call": {"name": "lookup", "args": {}}}] * 5,
        store=db,
        budgets={"max_steps": 3},
    )
    assert local.halt_reason is HaltReason.MAX_STEPS
    store = SqliteStore(db)
    try:
        assert replay_events(store.get_run(record.run_id), store.events(record.run_id)).ok
    finally:
        store.close()
    lifted = runner.invoke(cli, ["unfreeze-routing", "--why", "resolved", "--db", str(db)])
    assert lifted.exit_code == 0
    after = lab_run(tmp_path, RemoteModel(), store=db, budgets={"max_steps": 3})
    assert after.halt_reason is HaltReason.MAX_STEPS


def test_a_freeze_during_a_run_is_journaled_in_it(tmp_path: Path) -> None:
    db = tmp_path / "j.db"
    store = SqliteStore(db)

    class FreezingModel(RemoteModel):
        def __call__(self, prompt: object) -> dict[str, object]:
            if self.calls == 1:  # the operator acts while the run is live
                store.add_control(Control(id=0, run_id=None, kind="freeze_routing", payload={},
                                          who="carol", why="leak", at="now"))  # fmt: skip
            return super().__call__(prompt)

    model = FreezingModel()
    try:
        record = lab_run(tmp_path, model, store=db, budgets={"max_steps": 3})
        events = store.events(record.run_id)
        row = store.get_run(record.run_id)
    finally:
        store.close()
    assert record.halt_reason is HaltReason.ROUTING_FROZEN
    assert model.calls == 2
    [act] = [e for e in events if e.kind == "operator"]
    assert act.note == "routing frozen by carol: leak"
    assert replay_events(row, events).ok


# --- the control poll reads the store only when a control may have been added ---------------


class _CountingStore(SqliteStore):
    reads = 0

    def controls(self, run_id: str, after: int = 0) -> list[Control]:
        self.reads += 1
        return super().controls(run_id, after)


def _raise_budget(run_id: str) -> Control:
    return Control(id=0, run_id=run_id, kind="raise_budget", payload={"max_steps": 9},
                   who="ops", why="more room", at="2026-01-01T00:00:00.000+00:00")  # fmt: skip


@pytest.mark.parametrize("through", ["the run's own store", "another connection"])
def test_an_act_added_between_model_calls_is_applied_before_the_next_one(
    tmp_path: Path, through: str
) -> None:
    store = _CountingStore(tmp_path / "j.db")
    other = SqliteStore(tmp_path / "j.db")
    seen: list[int] = []

    def model(prompt: Prompt) -> Any:
        seen.append(prompt.max_steps)
        if prompt.step == 2:  # the act lands between the 2nd and the 3rd model call
            (store if through == "the run's own store" else other).add_control(
                _raise_budget("poll-1")
            )
        return MISS if prompt.step < 4 else {"answer": "swordfish"}

    try:
        run("agent_loop", task="Find the lab password", model=model,
            tools=load_tools("fsm_agent.examples.halt_lab.tools"),
            allow=("lookup", "slow_lookup", "hang"),
            store=store, run_id="poll-1",
            record_path=tmp_path / "r.json", budgets={"max_retries": 9})  # fmt: skip
        events = store.events("poll-1")
    finally:
        store.close()
        other.close()
    assert seen[:4] == [8, 8, 9, 9]
    (act,) = [e for e in events if e.kind == "operator"]
    assert act.note is not None
    assert "max_steps 8 -> 9" in act.note


def test_no_act_no_read(tmp_path: Path) -> None:
    """Without a control added, the poll before each model call is a pragma, not a query."""
    store = _CountingStore(tmp_path / "j.db")
    try:
        record = run("agent_loop", task="Find the lab password",
                     model=ScriptedModel([MISS, MISS, MISS, LOOKUP, {"answer": "swordfish"}]),
                     tools=load_tools("fsm_agent.examples.halt_lab.tools"),
                     allow=("lookup", "slow_lookup", "hang"),
                     store=store,
                     record_path=tmp_path / "r.json", budgets={"max_retries": 9})  # fmt: skip
    finally:
        store.close()
    assert record.steps_used == 5
    assert store.reads <= 2  # the catch-up at the start, and the first poll


def test_a_long_runs_summary_counts_every_tool_call_not_only_those_the_record_lists(
    tmp_path: Path,
) -> None:
    """The record keeps the last calls and counts the rest (`tool_calls_omitted`): `run`
    and `show` once said "100 tool call(s)" for a run of 3,333."""
    import attrs

    from fsm_agent.cli.run_output import summary
    from fsm_agent.runtime.record import HaltRecord

    record = lab_run(tmp_path, [LOOKUP, {"final_answer": "found it"}])
    assert isinstance(record, HaltRecord)
    assert record.tool_calls_omitted == 0
    listed = len(record.tool_calls)
    longer = attrs.evolve(record, tool_calls_omitted=3233)
    assert f" {listed + 3233} tool call(s)," in summary(longer)
    assert f" {listed} tool call(s)," in summary(record)
