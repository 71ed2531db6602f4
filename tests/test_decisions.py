"""People in the loop through the real CLI: a refund that needs approval waits in handoff,
and a person's decision — from another process, after the first has exited — continues the
same run from the journal; the decision is bound to the frozen call, races have one winner,
a wait is bounded, budgets carry, and verify and replay prove all of it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest

from fsm_agent import HaltReason, decide_run, read_record
from fsm_agent.errors import InvalidInputError
from fsm_agent.journal.runfile import read_run_file, verify_run_file
from fsm_agent.stores.sqlite import SqliteStore
from tests.lab import rechained

ROOT = Path(__file__).parent.parent
MACHINE = ROOT / "tests" / "approval_fixtures" / "shop.yaml"
MODEL = ("--model", "python:tests.fixture_approvals:shop_model")
TOOLS = ("--tools", "tests.fixture_approvals")
TASK = "Refund 500 cents to customer C-17 and tell me the refund id."


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`fsm-agent ARGS` in its own process, in `tmp`, the refunds counted in tmp/refunds."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), FSM_TEST_REFUNDS=str(tmp / "refunds"))
    return subprocess.run(
        [sys.executable, "-m", "fsm_agent", *args], cwd=tmp, env=env, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip


def refunds(tmp: Path) -> list[str]:
    path = tmp / "refunds"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def start(tmp: Path, machine: Path = MACHINE, task: str = TASK) -> tuple[str, str]:
    """Run the task until it waits; its run id and the frozen call's sha256 prefix."""
    done = cli(tmp, "run", str(machine), "--task", task, *MODEL, *TOOLS, "--db", "j.db")
    assert done.returncode == 4, done.stdout + done.stderr
    rid = re.search(r"run (\w+) started", done.stderr + done.stdout)
    assert rid is not None, done.stdout + done.stderr
    call = re.search(r"--call (\w+)", done.stdout)
    return rid.group(1), call.group(1) if call else ""


def events(tmp: Path, run_id: str) -> list[tuple[str, str | None, str | None]]:
    store = SqliteStore(tmp / "j.db")
    try:
        return [(e.kind, e.trigger, e.halt and e.halt.value) for e in store.events(run_id)]
    finally:
        store.close()


def proven(tmp: Path, run_id: str, halt: str) -> None:
    """verify and replay agree the run, decisions and all, ended as recorded."""
    verified = cli(tmp, "verify", run_id, "--db", "j.db")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "1 of 1 runs verify" in verified.stdout
    replayed = cli(tmp, "replay", run_id, "--db", "j.db")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert f"halt {halt} proven" in replayed.stdout


def test_a_refund_waits_for_approval_and_goes_on_from_another_process(tmp_path: Path) -> None:
    run_id, call = start(tmp_path)
    assert refunds(tmp_path) == []  # nothing ran before the approval
    record = read_record(tmp_path / "halt-contract.json")
    packet = record.handoff
    assert packet is not None
    assert record.halt_reason is HaltReason.APPROVAL_REQUIRED
    assert packet.awaits == "approval"
    assert packet.frozen_args == {"tool": "refund", "args": {"customer": "C-17", "cents": 500}}
    assert packet.call_sha256 is not None
    assert packet.call_sha256.startswith(call)
    assert len(call) == 12
    waiting = cli(tmp_path, "runs", "--db", "j.db", "--status", "waiting")
    assert run_id in waiting.stdout
    assert "approval_required (waiting)" in waiting.stdout
    assert run_id not in cli(tmp_path, "runs", "--db", "j.db", "--status", "halted").stdout
    shown = cli(tmp_path, "show", run_id, "--db", "j.db")
    assert "waiting: approval_required" in shown.stdout, shown.stdout
    assert f"fsm-agent approve {run_id} --call {call}" in shown.stdout

    approved = cli(tmp_path, "approve", run_id, "--call", call, "--by", "alice", "--why",
                   "ticket 88 checked", *MODEL, *TOOLS, "--db", "j.db")  # fmt: skip
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert "approved by alice" in approved.stdout
    assert refunds(tmp_path) == ["C-17 500"]  # exactly the frozen call, once
    done = read_record(tmp_path / "halt-contract.json")
    assert done.halt_reason is HaltReason.COMPLETED
    assert done.answer == "refund rf_1_500"
    assert done.steps_used == 2  # the steps before the wait count: no fresh budget
    kinds = events(tmp_path, run_id)
    assert ("decided", "approved", None) in kinds
    assert kinds[1] == ("transition", "tool_call", "approval_required")
    proven(tmp_path, run_id, "completed")


def test_a_denial_reaches_the_model_and_an_answer_needs_a_new_approval(tmp_path: Path) -> None:
    run_id, call = start(tmp_path)
    denied = cli(tmp_path, "deny", run_id, "--call", call, "--why", "over the limit",
                 *MODEL, *TOOLS, "--db", "j.db")  # fmt: skip
    assert denied.returncode == 4, denied.stdout + denied.stderr  # the model asked a person
    assert "waits for: a person's answer" in denied.stdout
    assert refunds(tmp_path) == []
    wrong = cli(tmp_path, "approve", run_id, "--why", "x", *MODEL, *TOOLS, "--db", "j.db")
    assert wrong.returncode == 2
    assert "waits for an answer, not for a decision to approve" in wrong.stderr
    answered = cli(tmp_path, "answer", run_id, "--text", "refund 300 instead", "--why",
                   "policy cap", *MODEL, *TOOLS, "--db", "j.db")  # fmt: skip
    # the model proposes a different call: it needs its own approval
    assert answered.returncode == 4, answered.stdout + answered.stderr
    new_call = re.search(r"--call (\w+)", answered.stdout)
    assert new_call is not None
    assert new_call.group(1) != call
    stale = cli(tmp_path, "approve", run_id, "--call", call, "--why", "x", *MODEL, *TOOLS,
                "--db", "j.db")  # fmt: skip
    assert stale.returncode == 2
    assert "bound to the exact frozen call" in stale.stderr
    approved = cli(tmp_path, "approve", run_id, "--call", new_call.group(1), "--why", "ok",
                   *MODEL, *TOOLS, "--db", "j.db")  # fmt: skip
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert refunds(tmp_path) == ["C-17 300"]
    decided = [k for k in events(tmp_path, run_id) if k[0] == "decided"]
    assert [d[1] for d in decided] == ["denied", "answered", "approved"]
    proven(tmp_path, run_id, "completed")


def test_a_refused_decision_journals_nothing(tmp_path: Path) -> None:
    run_id, call = start(tmp_path)
    before = events(tmp_path, run_id)
    for args in (
        ("approve", run_id, "--call", "0" * 12, "--why", "x"),  # another call
        ("approve", run_id, "--call", call[:4], "--why", "x"),  # too short to bind
        ("answer", run_id, "--text", "hi", "--why", "x"),  # it waits for an approval
        ("approve", run_id, "--why", " "),  # no why
    ):
        refused = cli(tmp_path, *args, *MODEL, *TOOLS, "--db", "j.db")
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        assert refused.stderr.startswith("Error: "), refused.stderr
        assert "Traceback" not in refused.stderr
    assert events(tmp_path, run_id) == before
    resumed = cli(tmp_path, "resume", run_id, *MODEL, *TOOLS, "--db", "j.db")
    assert resumed.returncode == 2
    assert "waits for a person's approval" in resumed.stderr
    assert cli(tmp_path, "approve", run_id, "--why", "ok", *MODEL, *TOOLS,
               "--db", "j.db").returncode == 0  # fmt: skip
    again = cli(tmp_path, "approve", run_id, "--why", "ok", *MODEL, *TOOLS, "--db", "j.db")
    assert again.returncode == 2
    assert "is not waiting for a decision" in again.stderr
    assert refunds(tmp_path) == ["C-17 500"]


def test_of_two_approvals_at_once_one_wins(tmp_path: Path) -> None:
    run_id, call = start(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(ROOT), FSM_TEST_REFUNDS=str(tmp_path / "refunds"))
    args = [sys.executable, "-m", "fsm_agent", "approve", run_id, "--call", call, "--why",
            "race", *MODEL, *TOOLS, "--db", "j.db"]  # fmt: skip
    racers = [
        subprocess.Popen([*args, "--record", f"r{n}.json", "--by", f"p{n}"], cwd=tmp_path,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for n in range(2)
    ]  # fmt: skip
    outs = [r.communicate(timeout=120) for r in racers]
    codes = sorted(r.returncode for r in racers)
    assert codes == [0, 2], outs
    loser = next(o for r, o in zip(racers, outs, strict=True) if r.returncode == 2)
    assert re.search(r"decided first|is not waiting for a decision", loser[1]), loser
    assert refunds(tmp_path) == ["C-17 500"]
    assert [k[1] for k in events(tmp_path, run_id) if k[0] == "decided"] == ["approved"]
    proven(tmp_path, run_id, "completed")


def _variant(tmp: Path, old: str, new: str) -> Path:
    text = MACHINE.read_text(encoding="utf-8")
    assert old in text
    path = tmp / "shop.yaml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def test_a_wait_past_its_limit_ends_the_run_wait_expired(tmp_path: Path) -> None:
    machine = _variant(tmp_path, "wait_limit_ms: 3600000", "wait_limit_ms: 1")
    run_id, call = start(tmp_path, machine)
    time.sleep(0.05)
    late = cli(tmp_path, "approve", run_id, "--call", call, "--why", "late", *MODEL, *TOOLS,
               "--db", "j.db")  # fmt: skip
    assert late.returncode == 2, late.stdout + late.stderr
    assert "past its wait limit (1 ms): it ended wait_expired" in late.stderr
    assert "the decision to approve was not journaled" in late.stderr
    record = read_record(tmp_path / "halt-contract.json")
    assert record.halt_reason is HaltReason.WAIT_EXPIRED
    assert record.answer == "cannot: wait budget"
    assert refunds(tmp_path) == []
    assert events(tmp_path, run_id)[-1] == ("decided", "wait", "wait_expired")
    proven(tmp_path, run_id, "wait_expired")


def test_budgets_carry_across_the_wait(tmp_path: Path) -> None:
    machine = _variant(tmp_path, "max_steps: 8 ", "max_steps: 1 ")
    run_id, call = start(tmp_path, machine)
    approved = cli(tmp_path, "approve", run_id, "--call", call, "--why", "ok", *MODEL, *TOOLS,
                   "--db", "j.db")  # fmt: skip
    assert approved.returncode == 3, approved.stdout + approved.stderr  # budget_exhausted
    record = read_record(tmp_path / "halt-contract.json")
    assert record.halt_reason is HaltReason.MAX_STEPS  # the one step was spent before
    assert (record.steps_used, record.max_steps) == (1, 1)
    assert refunds(tmp_path) == ["C-17 500"]
    proven(tmp_path, run_id, "max_steps")


def test_a_machine_with_no_decision_edge_keeps_handoff_final(tmp_path: Path) -> None:
    text = MACHINE.read_text(encoding="utf-8").split("  # a person's decision continues")[0]
    machine = tmp_path / "final.yaml"
    machine.write_text(text, encoding="utf-8")
    done = cli(tmp_path, "run", str(machine), "--task", TASK, *MODEL, *TOOLS, "--db", "j.db")
    assert done.returncode == 4
    assert "halted: approval_required" in done.stdout
    assert "waits for" not in done.stdout
    record = read_record(tmp_path / "halt-contract.json")
    assert record.handoff is not None
    assert record.handoff.awaits is None
    run_id = record.run_id
    refused = cli(tmp_path, "approve", run_id, "--why", "x", *MODEL, *TOOLS, "--db", "j.db")
    assert refused.returncode == 2
    assert "for good" in refused.stderr


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ("dest: tool_pending}\n  - {trigger: denied", "dest: drafting}\n  - {trigger: denied",
         "'approved' runs the frozen call"),
        ("{trigger: denied, source: handoff, dest: drafting}",
         "{trigger: denied, source: handoff, dest: done, halt: completed}", "continues the run"),
        ("{trigger: answered, source: handoff", "{trigger: collected, source: handoff",
         "only a person's decision leaves handoff"),
        ("{trigger: answered, source: handoff", "{trigger: answered, source: done",
         "transition out of terminal state 'done'"),
        ("wait_limit_ms: 3600000", "wait_limit_ms: 0", "wait_limit_ms must be a whole number"),
    ],
)  # fmt: skip
def test_decision_edges_are_checked_when_the_machine_loads(
    tmp_path: Path, old: str, new: str, says: str
) -> None:
    bad = _variant(tmp_path, old, new)
    checked = cli(tmp_path, "validate", str(bad))
    assert checked.returncode == 2, checked.stdout
    assert says in checked.stderr, checked.stderr
    assert "shop.yaml:" in checked.stderr  # the file and line


def test_a_decision_past_a_final_halt_shows_as_reopened(tmp_path: Path) -> None:
    """A `decided` event forged after a halt no decision may continue is a reopening, even
    with every hash and the seal recomputed (an unkeyed chain)."""
    run_id, call = start(tmp_path)
    assert cli(tmp_path, "approve", run_id, "--call", call, "--why", "ok", *MODEL, *TOOLS,
               "--db", "j.db").returncode == 0  # fmt: skip
    exported = cli(tmp_path, "export", run_id, "--db", "j.db", "-o", "run.json")
    assert exported.returncode == 0, exported.stderr
    run_file = read_run_file(tmp_path / "run.json")
    assert verify_run_file(run_file).ok
    decided = next(e for e in run_file.events if e.kind == "decided")
    forged = attrs.evolve(decided, seq=len(run_file.events))  # after the final `completed`
    edited = rechained(attrs.evolve(run_file, events=(*run_file.events, forged)))
    report = verify_run_file(edited)
    assert ("reopened", forged.seq) in [(f.kind, f.seq) for f in report.findings]
    assert not report.ok


def test_a_decision_only_journaled_waits_paused_and_resume_goes_on(tmp_path: Path) -> None:
    """`decide_run(model=None)` (what the console does) journals the decision and leaves the
    run paused; `resume` rebuilds the model's view with the decision in it."""
    run_id, call = start(tmp_path)
    assert decide_run(run_id, "deny", why="over the limit", by="bob", call=call, model=None,
                      store=tmp_path / "j.db") is None  # fmt: skip
    store = SqliteStore(tmp_path / "j.db")
    try:
        row = store.get_run(run_id)
        assert (row.status, row.pid, row.record) == ("paused", None, None)
    finally:
        store.close()
    resumed = cli(tmp_path, "resume", run_id, *MODEL, *TOOLS, "--db", "j.db")
    # the model saw the denial (rebuilt from the journal) and asked a person
    assert resumed.returncode == 4, resumed.stdout + resumed.stderr
    assert "waits for: a person's answer" in resumed.stdout
    assert refunds(tmp_path) == []
    proven_waiting = cli(tmp_path, "replay", run_id, "--db", "j.db")
    assert "halt handoff_requested proven" in proven_waiting.stdout, proven_waiting.stdout


def test_resume_ends_a_wait_past_its_limit(tmp_path: Path) -> None:
    machine = _variant(tmp_path, "wait_limit_ms: 3600000", "wait_limit_ms: 1")
    run_id, _ = start(tmp_path, machine)
    time.sleep(0.05)
    ended = cli(tmp_path, "resume", run_id, *MODEL, *TOOLS, "--db", "j.db")
    assert ended.returncode == 3, ended.stdout + ended.stderr
    assert "halted: wait_expired (budget_exhausted)" in ended.stdout
    assert cli(tmp_path, "runs", "--db", "j.db", "--status", "waiting").stdout.startswith("no ")
    proven(tmp_path, run_id, "wait_expired")


def test_a_policy_can_have_privileged_calls_approved_by_someone_else(tmp_path: Path) -> None:
    policy = (ROOT / "fsm_agent" / "machines" / "halt-policy.yml").read_text(encoding="utf-8")
    (tmp_path / "policy.yml").write_text(
        policy.replace("privileged_tools_require: local_halt",
                       "privileged_tools_require: local_halt_and_approval_by_another"),
        encoding="utf-8",
    )  # fmt: skip
    machine = _variant(tmp_path, "slow_refund]", "slow_refund, pay]\npolicy: policy.yml")
    run_id, call = start(tmp_path, machine, task="Pay 700 cents to customer C-17.")
    record = read_record(tmp_path / "halt-contract.json")
    assert record.handoff is not None
    assert record.handoff.frozen_args == {"tool": "pay", "args": {"customer": "C-17", "cents": 700}}
    starter = events_notes(tmp_path, run_id)[0]
    assert starter is not None
    assert starter.startswith("started by ")
    me = starter.removeprefix("started by ")
    same = cli(tmp_path, "approve", run_id, "--call", call, "--by", me, "--why", "mine",
               *MODEL, *TOOLS, "--db", "j.db")  # fmt: skip
    assert same.returncode == 2
    assert f"{me} may not approve it" in same.stderr
    other = cli(tmp_path, "approve", run_id, "--call", call, "--by", f"{me}-lead", "--why",
                "four eyes", *MODEL, *TOOLS, "--db", "j.db")  # fmt: skip
    assert other.returncode == 0, other.stdout + other.stderr
    assert refunds(tmp_path) == ["C-17 700"]
    proven(tmp_path, run_id, "completed")


def events_notes(tmp: Path, run_id: str) -> list[str | None]:
    store = SqliteStore(tmp / "j.db")
    try:
        return [e.note for e in store.events(run_id)]
    finally:
        store.close()


def test_a_fork_of_a_decided_run_verifies_with_its_decisions_resealed(tmp_path: Path) -> None:
    """A fork copies a decision with the waiting record it carries; its seal is made again
    onto the fork's own chain, so the fork verifies and replays on its own."""
    run_id, call = start(tmp_path)
    assert cli(tmp_path, "approve", run_id, "--call", call, "--why", "ok", *MODEL, *TOOLS,
               "--db", "j.db").returncode == 0  # fmt: skip
    forked = cli(tmp_path, "fork", run_id, "--at", "3", *MODEL, *TOOLS, "--db", "j.db",
                 "--json")  # fmt: skip
    assert forked.returncode == 0, forked.stdout + forked.stderr
    fork_id = json.loads(forked.stdout)["run_id"]
    assert ("decided", "approved", None) in events(tmp_path, fork_id)
    proven(tmp_path, fork_id, "completed")
    assert refunds(tmp_path) == ["C-17 500"]  # the fork made no call its parent made


def test_expire_waits_ends_only_the_waits_past_their_limit(tmp_path: Path) -> None:
    short = _variant(tmp_path, "wait_limit_ms: 3600000", "wait_limit_ms: 1")
    late, _ = start(tmp_path, short)
    fresh, _ = start(tmp_path)  # waits for an hour
    time.sleep(0.05)
    swept = cli(tmp_path, "expire-waits", "--db", "j.db", "--json")
    assert swept.returncode == 0, swept.stderr
    assert json.loads(swept.stdout) == [late]
    store = SqliteStore(tmp_path / "j.db")
    try:
        assert store.get_run(late).halt_reason is HaltReason.WAIT_EXPIRED
        assert store.get_run(fresh).halt_reason is HaltReason.APPROVAL_REQUIRED
    finally:
        store.close()
    again = cli(tmp_path, "expire-waits", "--db", "j.db")
    assert "0 waiting run(s) past their wait limit" in again.stdout
    proven(tmp_path, late, "wait_expired")


def test_an_approval_killed_inside_its_call_resumes_to_side_effect_unknown(tmp_path: Path) -> None:
    """SIGKILL while the approved call runs: the call took effect, its result is not
    journaled. `resume` does not make it again (the tool is not idempotent): the run ends
    side_effect_unknown, and the refund was made once."""
    run_id, call = start(tmp_path, task="Slowly refund 500 cents to customer C-17.")
    env = dict(os.environ, PYTHONPATH=str(ROOT), FSM_TEST_REFUNDS=str(tmp_path / "refunds"),
               FSM_TEST_SLOW_S="60")  # fmt: skip
    child = subprocess.Popen(
        [sys.executable, "-m", "fsm_agent", "approve", run_id, "--call", call, "--why", "ok",
         *MODEL, *TOOLS, "--db", "j.db"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not refunds(tmp_path):  # the refund took effect; the tool still sleeps
            assert child.poll() is None, "the approval ended before its call"
            assert time.monotonic() < deadline, "the approved call never started"
            time.sleep(0.02)
        child.kill()
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert events(tmp_path, run_id)[-1] == ("decided", "approved", None)
    resumed = cli(tmp_path, "resume", run_id, *MODEL, *TOOLS, "--db", "j.db")
    assert resumed.returncode == 4, resumed.stdout + resumed.stderr
    assert "halted: side_effect_unknown" in resumed.stdout
    assert refunds(tmp_path) == ["C-17 500"]  # made once, never re-issued
    proven(tmp_path, run_id, "side_effect_unknown")


def test_a_repeat_of_a_call_that_took_effect_waits_for_a_person(tmp_path: Path) -> None:
    """The same refund again after its receipt: refused where nobody can approve it
    (repeat_refused, tests/test_contract.py), and where the machine continues approvals the
    repeat stops for one: the second refund is made only once a person approves it."""
    repeat = ("--model", "python:tests.fixture_approvals:repeat_model")
    done = cli(tmp_path, "run", str(MACHINE), "--task", TASK, *repeat, *TOOLS, "--db", "j.db")
    assert done.returncode == 4, done.stdout + done.stderr
    run_id = read_record(tmp_path / "halt-contract.json").run_id
    first = cli(tmp_path, "approve", run_id, "--why", "the first", *repeat, *TOOLS,
                "--db", "j.db")  # fmt: skip
    assert first.returncode == 4, first.stdout + first.stderr  # the repeat waits
    assert "already took effect" in first.stdout
    assert "made again only if a person approves" in first.stdout
    assert refunds(tmp_path) == ["C-17 500"]
    second = cli(tmp_path, "approve", run_id, "--why", "two were ordered", *repeat, *TOOLS,
                 "--db", "j.db")  # fmt: skip
    assert second.returncode == 0, second.stdout + second.stderr
    assert refunds(tmp_path) == ["C-17 500", "C-17 500"]
    proven(tmp_path, run_id, "completed")


def test_a_decision_taken_while_another_reads_the_run_is_named_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row and the chain are read apart: a decision another process journals between
    the two reads shows as events past the sealed head. The late decision is refused as
    decided first (nothing journaled), not as a journal that does not verify."""
    from fsm_agent.runtime import waiting

    run_id, call = start(tmp_path)
    real, raced = waiting.verified, []

    def racing(store: SqliteStore, row: object) -> object:
        if not raced:  # the other decision lands between this one's two reads, once
            raced.append(True)
            decide_run(run_id, "approve", why="first", call=call, model=None,
                       store=tmp_path / "j.db")  # fmt: skip
        return real(store, row)  # type: ignore[arg-type]

    monkeypatch.setattr(waiting, "verified", racing)
    with pytest.raises(InvalidInputError, match="decided first by someone else"):
        decide_run(run_id, "deny", why="late", call=call, model=None, store=tmp_path / "j.db")
    assert [k[1] for k in events(tmp_path, run_id) if k[0] == "decided"] == ["approved"]


def test_a_denial_into_a_spent_step_budget_halts_at_once(tmp_path: Path) -> None:
    """The budget check on entering the decision's dest: a denial sends the run back to the
    model, and with its one step spent before the wait it ends max_steps right there."""
    machine = _variant(tmp_path, "max_steps: 8 ", "max_steps: 1 ")
    run_id, call = start(tmp_path, machine)
    denied = cli(tmp_path, "deny", run_id, "--call", call, "--why", "no", *MODEL, *TOOLS,
                 "--db", "j.db")  # fmt: skip
    assert denied.returncode == 3, denied.stdout + denied.stderr
    record = read_record(tmp_path / "halt-contract.json")
    assert record.halt_reason is HaltReason.MAX_STEPS
    assert record.steps_used == 1
    kinds = events(tmp_path, run_id)
    assert kinds[-2:] == [("decided", "denied", None), ("transition", "budget", "max_steps")]
    proven(tmp_path, run_id, "max_steps")
