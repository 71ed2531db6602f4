"""`fsm-agent simulate`: runs drawn from a tape on a virtual clock, through the real runtime
into a real SQLite journal, crashed and resumed, each checked; failing runs shrunk to a run
file. Planted defects (a machine that completes without receipts, an impure guard, a
tampered journal, a call the world saw twice) must each be caught."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner, Result

from fsm_agent.cli.main import cli
from fsm_agent.declaration import load
from fsm_agent.declaration.load import load_machine, machine_path, parse_machine
from fsm_agent.errors import MachineSpecError
from fsm_agent.journal.runfile import export_run, run_file_json
from fsm_agent.runtime.deadline import Call, run_call
from fsm_agent.runtime.tools import ToolResult, load_tools
from fsm_agent.simulation.clock import VirtualClock
from fsm_agent.simulation.invariants import check_run, reissued
from fsm_agent.simulation.runner import Crash, RunOutcome, Simulator, run_tape, simulate_many
from fsm_agent.simulation.session import simulate
from fsm_agent.simulation.shrink import candidates, normal
from fsm_agent.simulation.tape import Tape
from fsm_agent.stores.sqlite import SqliteStore

REPO = Path(__file__).resolve().parent.parent
SIM_TOOLS = "tests.fixture_sim_tools"
LAB_TOOLS = "fsm_agent.examples.halt_lab.tools"
CANONICAL = machine_path("agent_loop").read_text(encoding="utf-8")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def variant(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """The canonical machine with one line changed (a planted defect)."""
    assert old in CANONICAL
    path = tmp_path / f"{name}.yaml"
    path.write_text(CANONICAL.replace(old, new), encoding="utf-8")
    return path


def run_files(db: Path) -> dict[str, str]:
    store = SqliteStore(db)
    try:
        return {rid: run_file_json(export_run(store, rid)) for rid in store.run_ids()}
    finally:
        store.close()


def simulator(journal: SqliteStore, crash: Crash = None, tools: str = SIM_TOOLS) -> Simulator:
    return Simulator(load_machine("agent_loop"), load_tools(tools), journal, crash)


# --- determinism ------------------------------------------------------------------------------


def test_the_same_random_seed_gives_the_same_runs_byte_for_byte(tmp_path: Path) -> None:
    spec, tools = load_machine("agent_loop"), load_tools(SIM_TOOLS)
    for name in ("a", "b"):
        simulate(spec, tools, runs=60, seed=11, crash="random", db=str(tmp_path / f"{name}.db"))
    simulate(spec, tools, runs=60, seed=12, crash="random", db=str(tmp_path / "c.db"))
    a, b, c = (run_files(tmp_path / f"{n}.db") for n in "abc")
    assert len(a) > 50  # every run file identical, hashes and wall times included
    assert a == b
    assert a != c
    first = json.loads(next(iter(a.values())))
    assert first["run"]["started_at"].startswith("2026-01-01T00:00:00")  # virtual wall time
    assert first["run"]["pid"] is None
    assert first["run"]["host"] is None


def test_another_process_gives_the_same_bytes(tmp_path: Path) -> None:
    """Nothing of the process (pid, host, the journal's path, the time) reaches a journal."""
    args = ["agent_loop", "--tools", SIM_TOOLS, "--runs", "25", "--seed", "4", "--crash",
            "random", "-q", "--json"]  # fmt: skip
    here = invoke("simulate", *args, "--db", str(tmp_path / "here.db"))
    child = subprocess.run(
        [sys.executable, "-m", "fsm_agent", "simulate", *args, "--db", str(tmp_path / "there.db")],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert here.exit_code == 0
    assert child.returncode == 0, child.stderr
    assert run_files(tmp_path / "here.db") == run_files(tmp_path / "there.db")
    mine, theirs = json.loads(here.output), json.loads(child.stdout)
    for data in (mine, theirs):
        del data["seconds"], data["runs_per_s"]
    assert mine == theirs


def test_a_run_is_reproduced_from_its_tape_alone(tmp_path: Path) -> None:
    journal = SqliteStore(tmp_path / "j.db")
    sim = simulator(journal, "random")
    outcomes = simulate_many(sim, seed=3, runs=12)
    again = sim.simulate("again", Tape(fixed=outcomes[7].tape))
    assert again.tape == outcomes[7].tape
    assert (again.halt, again.crashed_at) == (outcomes[7].halt, outcomes[7].crashed_at)
    assert run_tape(3, 7).choose(1000) == run_tape(3, 7).choose(1000)


# --- the world ---------------------------------------------------------------------------------


def test_draws_cover_the_hostile_shapes_and_every_run_holds(tmp_path: Path) -> None:
    journal = SqliteStore(tmp_path / "j.db")
    outcomes = simulate_many(simulator(journal, tools=LAB_TOOLS), seed=2, runs=300)
    assert not [o for o in outcomes if o.violations]
    halts = {o.halt for o in outcomes}
    assert {"completed", "schema_fail", "tool_refused", "tool_error", "tool_timeout",
            "handoff_requested"} <= halts  # fmt: skip
    replies, results = set(), set()
    for rid in journal.run_ids():
        for event in journal.events(rid):
            facts = event.facts
            if facts is not None and facts.action == "model":
                replies.add(json.dumps(facts.reply, sort_keys=True)[:20])
            if facts is not None and facts.tool is not None:
                results.add((facts.tool.status, (facts.tool.error or "")[:14]))
    assert '{"done": true}' in replies
    assert '"I have looked into ' in replies
    assert any(r.startswith('"{\\"tool_call') for r in replies)  # truncated JSON
    assert ("timed_out", "finished after") in results  # a hang: refused as late
    assert ("failed", "ToolError: sim") in results


def test_a_hang_is_the_virtual_clock_passing_the_timeout() -> None:
    """`run_call` measures an inline call on the run's clock: no real time passes."""
    clock = VirtualClock()

    def hangs() -> ToolResult:
        clock.advance(5001)
        return ToolResult()

    late = run_call(Call(hangs, timeout_s=5.0, isolation="inline", clock=clock))
    assert (late.status, late.fate, late.elapsed_ms) == ("timeout", "late (inline)", 5001)
    on_time = run_call(Call(lambda: clock.advance(20), timeout_s=5.0, clock=clock))
    assert on_time.status == "ok"
    assert on_time.elapsed_ms in (19, 20)  # 20 ms of virtual time (float seconds, truncated)


def test_shrink_candidates_are_simpler() -> None:
    tape = (3, 0, 7, 1)
    for candidate in candidates(tape):
        assert (len(candidate), candidate) < (len(tape), tape)
    assert normal((1, 0, 2, 0, 0)) == (1, 0, 2)


def test_a_declaration_is_parsed_once_per_text_whatever_its_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = parse_machine(CANONICAL, source="a")
    with monkeypatch.context() as patched:
        patched.setattr(load, "_parse", lambda *args: pytest.fail("parsed again"))
        second = parse_machine(CANONICAL, source="b")
    assert (first.source, second.source) == ("a", "b")  # where each says it came from
    assert attrs.evolve(first, source="b") == second
    with pytest.raises(MachineSpecError, match="first-name"):
        parse_machine("name: [", source="first-name")
    with pytest.raises(MachineSpecError, match="second-name"):
        parse_machine("name: [", source="second-name")


# --- crashes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("write", range(1, 9))
def test_a_crash_at_each_write_is_resumed_without_reissuing(tmp_path: Path, write: int) -> None:
    journal = SqliteStore(tmp_path / "j.db")
    outcomes = simulate_many(simulator(journal, write), seed=8, runs=60)
    assert not [o for o in outcomes if o.violations]
    crashed = [o for o in outcomes if o.crashed_at is not None]
    assert crashed
    assert all(o.crashed_at == write for o in crashed)
    if write == 1:
        assert {o.halt for o in crashed} == {"never_started"}  # no write landed
        assert journal.run_ids() == [o.run_id for o in outcomes if o.halt != "never_started"]


def test_a_payment_whose_result_a_crash_lost_is_never_made_again(tmp_path: Path) -> None:
    """Over many crashes: whenever `pay` was called and its result never journaled, the
    resumed run halts side_effect_unknown and the world saw exactly one call."""
    journal = SqliteStore(tmp_path / "j.db")
    sim = simulator(journal, "random")
    lost = 0
    for index in range(400):
        outcome = sim.simulate(f"r{index}", run_tape(21, index), index)
        assert not outcome.violations, outcome
        world_calls = [c for c in sim.last_ledger if c[0] == "pay"]
        if outcome.halt == "never_started" or not world_calls:
            continue
        journaled = [e for e in journal.events(outcome.run_id)
                     if e.facts is not None and e.facts.tool is not None
                     and e.facts.tool.name == "pay" and e.facts.action == "tool"]  # fmt: skip
        if len(journaled) < len(world_calls):
            lost += 1
            assert outcome.halt == "side_effect_unknown"
            assert len(world_calls) == len(journaled) + 1
    assert lost >= 3


# --- planted defects ---------------------------------------------------------------------------


def test_a_declaration_without_the_grounding_guard_still_never_completes_ungrounded(
    tmp_path: Path,
) -> None:
    # The answer edge into done has no guard at all: the runtime's contract refuses every
    # answer that receipted results do not back (ungrounded_answer), so simulate finds no
    # run that completes without receipts or grounding, and every such run replays.
    machine = variant(tmp_path, "unguarded",
                      "dest: done, guards: [answer_grounded, judge_agrees], halt: completed}",
                      "dest: done, halt: completed}")  # fmt: skip
    result = invoke("simulate", str(machine), "--tools", LAB_TOOLS, "--runs", "40",
                    "--seed", "1", "-o", str(tmp_path / "out"), "--json", "-q")  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ok"]
    assert data["violations"]["receipts"] == 0
    assert data["violations"]["replay"] == 0
    assert data["halts"]["ungrounded_answer"] > 0
    assert data["halts"]["completed"] > 0


def test_an_impure_guard_fails_the_replay(tmp_path: Path) -> None:
    old = "- {trigger: handoff, source: drafting, dest: handoff, halt: handoff_requested}"
    new = (
        "- {trigger: handoff, source: drafting, dest: handoff,"
        " guards: [tests.fixture_sim_guards:flip], halt: handoff_requested}\n"
        "  - {trigger: handoff, source: drafting, dest: handoff, halt: schema_fail}"
    )
    spec = load_machine(str(variant(tmp_path, "impure", old, new)))
    summary = simulate(spec, load_tools(LAB_TOOLS), runs=60, seed=5, out_dir=tmp_path / "out")
    assert summary.violations["replay"] > 0
    shrunk = [f for f in summary.failures if f.shrunk is not None]
    assert shrunk
    for failure in shrunk:
        assert failure.shrunk is not None
        assert "replay" in {v.invariant for v in failure.shrunk.violations}
    assert shrunk[0].run_file is not None
    assert Path(shrunk[0].run_file).is_file()


def _one_run(tmp_path: Path, want: str) -> tuple[SqliteStore, Simulator, RunOutcome]:
    journal = SqliteStore(tmp_path / "j.db")
    sim = simulator(journal)
    for index in range(200):
        outcome = sim.simulate(f"r{index}", run_tape(6, index), index)
        if outcome.halt == want and any(c[0] == "pay" for c in sim.last_ledger):
            return journal, sim, outcome
    raise AssertionError(f"no {want} run with a payment")


def _check(journal: SqliteStore, sim: Simulator, run_id: str, ledger: list) -> set[str]:
    _, found = check_run(journal, run_id, sim.spec, ledger, sim.tools)
    return {v.invariant for v in found}


def test_a_tampered_journal_fails_the_chain_and_the_named_halt(tmp_path: Path) -> None:
    journal, sim, outcome = _one_run(tmp_path, "completed")
    ledger = list(sim.last_ledger)
    assert _check(journal, sim, outcome.run_id, ledger) == set()
    with sqlite3.connect(tmp_path / "j.db") as db:  # what anyone with the file can do
        db.execute("DROP TRIGGER events_no_update")
        db.execute("UPDATE events SET at_ms = at_ms + 1 WHERE run_id = ? AND seq = 1",
                   (outcome.run_id,))  # fmt: skip
    assert "chain" in _check(journal, sim, outcome.run_id, ledger)
    with sqlite3.connect(tmp_path / "j.db") as db:
        db.execute("UPDATE runs SET status = 'running', halt_reason = NULL WHERE run_id = ?",
                   (outcome.run_id,))  # fmt: skip
    assert "named_halt" in _check(journal, sim, outcome.run_id, ledger)


def test_a_run_that_raises_instead_of_halting_is_a_violation(tmp_path: Path) -> None:
    """A journal that refuses every write: the runtime raises out of `run` (no halt)."""
    SqliteStore(tmp_path / "j.db").close()
    read_only = SqliteStore(tmp_path / "j.db", read_only=True)
    outcome = simulator(read_only).simulate("r0", run_tape(1, 0))
    assert outcome.halt == "missing"
    assert [v.invariant for v in outcome.violations] == ["named_halt", "named_halt"]
    assert "the run raised JournalError" in outcome.violations[0].detail


def test_a_payment_the_world_saw_twice_is_a_reissue(tmp_path: Path) -> None:
    journal, sim, outcome = _one_run(tmp_path, "completed")
    ledger = list(sim.last_ledger)
    pay = next(c for c in ledger if c[0] == "pay")
    assert _check(journal, sim, outcome.run_id, [*ledger, pay]) == {"no_reissue", "receipts"}
    read = ("look", '{"q": "a"}')  # a read, or an idempotent call, may be made again
    capture = ("capture", '{"order": "a"}')
    assert "no_reissue" not in _check(journal, sim, outcome.run_id, [*ledger, read, capture])


def test_a_payment_journaled_without_its_proposal_is_a_reissue(tmp_path: Path) -> None:
    """From the journal alone (an empty ledger): a made call no proposal allows."""
    journal, sim, outcome = _one_run(tmp_path, "completed")
    events = journal.events(outcome.run_id)
    assert reissued(sim.spec, events, [], sim.tools) == []
    proposals = [e for e in events if e.dest == "tool_pending" and e.kind == "transition"]
    pay = next(e for e in proposals if getattr(e.snapshot.proposal, "name", None) == "pay")
    [found] = reissued(sim.spec, [e for e in events if e is not pay], [], sim.tools)
    assert found.invariant == "no_reissue"
    assert "pay(" in found.detail


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no_such_machine", "--tools", LAB_TOOLS], "no_such_machine"),
        (["agent_loop", "--tools", "no_such_module_here"], "no_such_module_here"),
        (["agent_loop"], "Missing option '--tools'"),
        (["agent_loop", "--tools", LAB_TOOLS, "--runs", "0"], "--runs"),
        (["agent_loop", "--tools", LAB_TOOLS, "--runs", "many"], "--runs"),
        (["agent_loop", "--tools", LAB_TOOLS, "--crash", "0"], "numbered from 1"),
        (["agent_loop", "--tools", LAB_TOOLS, "--crash", "sometimes"], "neither 'random'"),
    ],
)
def test_bad_input_exits_2_saying_why(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["simulate", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_journal_that_holds_runs_is_refused(tmp_path: Path) -> None:
    args = ["simulate", "agent_loop", "--tools", LAB_TOOLS, "--runs", "3", "-q"]
    assert invoke(*args, "--db", str(tmp_path / "j.db")).exit_code == 0
    again = CliRunner().invoke(cli, [*args, "--db", str(tmp_path / "j.db")])
    assert again.exit_code == 2
    assert "already holds runs" in again.output


def test_progress_goes_to_stderr_and_the_summary_to_stdout(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["simulate", "agent_loop", "--tools", LAB_TOOLS, "--runs", "40", "--seed", "2"]
    )
    assert result.exit_code == 0, result.output
    assert "run 40/40" in result.stderr
    assert "run 2/40" in result.stderr
    assert "invariant violations: 0" in result.output
    assert "runs/s" in result.output
    assert "completed" in result.output.split("halts:")[1]
