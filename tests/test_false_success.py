"""No false success: a side-effecting call without complete receipts never ends `done`, and
grounding cannot be faked by citing a receipt. Through the real CLI, as the incidents were
reported (`tests/fixture_tickets.py` holds the desk and the vault)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from fsm_agent.cli.main import cli
from fsm_agent.runtime.record import read_record
from fsm_agent.stores.sqlite import SqliteStore
from tests.fixture_tickets import CLOSE_AFTER_ENV

LOOKUP_T200 = {"tool_call": {"name": "lookup_ticket", "args": {"ticket": "T-200"}}}
CLOSE_T200 = {"tool_call": {"name": "close_ticket", "args": {"ticket": "T-200"}}}
DONE = {"answer": "Done: ticket T-200 is closed."}
VAULT = {"tool_call": {"name": "lookup", "args": {"q": "vault code"}}}
PENDING_CLOSE = 'step 2: close_ticket({"ticket": "T-200"}) -> 206 with an empty id'


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def fsm_run(tmp_path: Path, replies: list[Any], *extra: str, machine: str = "agent_loop") -> Result:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(replies), encoding="utf-8")
    return invoke(
        "run", machine, "--task", "Close ticket T-200", "--model", f"scripted:{script}",
        "--tools", "tests.fixture_tickets",
        "--allow", "lookup_ticket,close_ticket,lookup",
        "--db", str(tmp_path / "j.db"),
        "--record", str(tmp_path / "r.json"), "-q", *extra,
    )  # fmt: skip


def run_id(result: Result) -> str:
    return result.output.split()[1]


def test_a_206_write_followed_by_done_is_not_completed(tmp_path: Path) -> None:
    result = fsm_run(tmp_path, [LOOKUP_T200, CLOSE_T200, DONE, DONE, DONE])
    assert result.exit_code == 4, result.output  # handoff, not done
    record = read_record(tmp_path / "r.json")
    assert record.halt_reason == "side_effect_unknown"
    assert record.answer is None
    assert record.unreceipted == (PENDING_CLOSE,)
    assert record.handoff is not None
    assert PENDING_CLOSE in record.handoff.why
    assert record.handoff.tried == (
        'step 1: lookup_ticket({"ticket": "T-200"}) -> returned',
        'step 2: close_ticket({"ticket": "T-200"}) -> returned (206 with an empty id)',
    )
    assert record.handoff.frozen_args == {"tool": "close_ticket", "args": {"ticket": "T-200"}}
    assert record.meters.retries_used == 2  # the refused answers were retried first
    rid = run_id(result)
    shown = invoke("show", rid, "--db", str(tmp_path / "j.db"))
    assert "halted: side_effect_unknown (handoff)" in shown.output
    assert PENDING_CLOSE in shown.output
    # what on-call looks for: each reply, each call with its arguments, receipts and result
    assert 'reply: {"answer": "Done: ticket T-200 is closed."}' in shown.output
    assert 'call: lookup_ticket({"ticket": "T-200"}) (read) -> returned' in shown.output
    assert 'call: close_ticket({"ticket": "T-200"}) -> returned' in shown.output
    assert "receipts: 206 (no id)" in shown.output
    assert 'returned: {"status": 206}' in shown.output
    replayed = invoke("replay", rid, "--db", str(tmp_path / "j.db"))
    assert replayed.exit_code == 0, replayed.output
    assert "halt side_effect_unknown proven" in replayed.output
    report = tmp_path / "report.html"
    assert invoke("report", rid, "--db", str(tmp_path / "j.db"), "-o", str(report)).exit_code == 0
    html = report.read_text(encoding="utf-8")
    assert 'class="badge ok halt"' not in html  # no green halt badge
    assert "without complete receipts" in html
    assert "lookup_ticket</code> (read)" in html


def test_waiting_for_receipts_completes_once_the_same_call_returns_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CLOSE_AFTER_ENV, "2")  # the second identical close returns 200 + id
    result = fsm_run(tmp_path, [LOOKUP_T200, CLOSE_T200, DONE, CLOSE_T200, DONE])
    assert result.exit_code == 0, result.output
    record = read_record(tmp_path / "r.json")
    assert record.halt_reason == "completed"
    assert record.unreceipted == ()
    assert record.grounded_by == ("step 1: lookup_ticket", "step 4: close_ticket")
    assert "grounded by: step 1: lookup_ticket, step 4: close_ticket" in result.output


def test_a_retry_with_other_arguments_does_not_settle_the_first_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CLOSE_AFTER_ENV, "2")  # a ticket's second close returns 200 + id
    other = {"tool_call": {"name": "close_ticket", "args": {"ticket": "T-201"}}}
    result = fsm_run(tmp_path, [CLOSE_T200, other, other, DONE], "--max-retries", "0")
    record = read_record(tmp_path / "r.json")
    assert record.halt_reason == "side_effect_unknown", result.output
    assert record.unreceipted == (
        'step 1: close_ticket({"ticket": "T-200"}) -> 206 with an empty id',
    )


def test_at_the_cap_a_pending_write_ends_cannot_and_names_the_call(tmp_path: Path) -> None:
    result = fsm_run(tmp_path, [CLOSE_T200] * 10, "--max-steps", "3")
    assert result.exit_code == 3, result.output
    record = read_record(tmp_path / "r.json")
    assert (record.halt_reason, record.answer) == ("max_steps", "cannot: step budget")
    assert record.unreceipted == tuple(  # every call named, a repeat of the same one too
        f'step {n}: close_ticket({{"ticket": "T-200"}}) -> 206 with an empty id' for n in (1, 2, 3)
    )
    assert record.error is not None
    assert "without complete receipts: step 1: close_ticket" in record.error
    assert "; step 3: close_ticket" in record.error


USER_MACHINE = """\
name: bare
initial: drafting
budgets: {max_steps: 6, wall_clock_ms: 15000, max_cost: 1.0, tool_timeout_ms: 5000, max_retries: 0}
states:
  drafting: {action: model}
  tool_pending: {action: tool}
  awaiting_receipts: {action: receipts}
  done: {terminal: true}
  budget_exhausted: {terminal: true}
  handoff: {terminal: true}
transitions:
  - trigger: tool_call
    source: drafting
    dest: handoff
    guards: ['tests.fixture_tickets:ticket_frozen']
    halt: GUARD_HALT
  - {trigger: tool_call, source: drafting, dest: tool_pending}
  - {trigger: answer, source: drafting, dest: done, halt: completed}
  - {trigger: handoff, source: drafting, dest: handoff, halt: handoff_requested}
  - {trigger: rejected, source: drafting, dest: handoff, halt: schema_fail}
  - {trigger: tool_returned, source: tool_pending, dest: awaiting_receipts}
  - {trigger: tool_failed, source: tool_pending, dest: handoff, halt: tool_error}
  - {trigger: tool_timed_out, source: tool_pending, dest: budget_exhausted, halt: tool_timeout}
  - {trigger: collected, source: awaiting_receipts, dest: done, guards: [receipts_complete],
     halt: completed}
  - {trigger: collected, source: awaiting_receipts, dest: drafting}
"""


def user_machine(tmp_path: Path, halt: str = "guard_refused") -> str:
    path = tmp_path / "bare.yaml"
    text = USER_MACHINE.replace("GUARD_HALT", halt)
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_user_machine_that_forgets_the_rule_still_cannot_end_done(tmp_path: Path) -> None:
    # The declaration's answer edge has no guard at all and no fallback: a 206 write must
    # still never end done (the run stops in handoff: no declared edge may take it).
    machine = user_machine(tmp_path)
    assert "side_effects_receipted" not in Path(machine).read_text(encoding="utf-8")
    result = fsm_run(tmp_path, [CLOSE_T200, DONE], machine=machine)
    assert result.exit_code == 4, result.output
    record = read_record(tmp_path / "r.json")
    assert record.halt_reason == "no_transition"
    assert record.unreceipted == (
        'step 1: close_ticket({"ticket": "T-200"}) -> 206 with an empty id',
    )
    assert "without complete receipts: step 1: close_ticket" in result.output


def test_a_stop_by_a_user_guard_names_the_guard_the_state_and_the_trigger(tmp_path: Path) -> None:
    frozen = {"tool_call": {"name": "close_ticket", "args": {"ticket": "T-999"}}}
    result = fsm_run(tmp_path, [frozen], machine=user_machine(tmp_path))
    assert result.exit_code == 4, result.output
    record = read_record(tmp_path / "r.json")
    assert record.halt_reason == "guard_refused"
    packet = record.handoff
    assert packet is not None
    assert packet.guards == ("tests.fixture_tickets:ticket_frozen",)
    assert (packet.state, packet.trigger) == ("drafting", "tool_call")
    assert packet.why == (
        "stopped by guard tests.fixture_tickets:ticket_frozen in state 'drafting' on trigger"
        " 'tool_call'"
    )
    assert packet.frozen_args == {"tool": "close_ticket", "args": {"ticket": "T-999"}}
    assert record.tool_calls == ()  # nothing ran


def test_a_user_guard_behind_tool_refused_does_not_blame_the_allow_list(tmp_path: Path) -> None:
    frozen = {"tool_call": {"name": "close_ticket", "args": {"ticket": "T-999"}}}
    fsm_run(tmp_path, [frozen], machine=user_machine(tmp_path, halt="tool_refused"))
    record = read_record(tmp_path / "r.json")
    assert record.halt_reason == "tool_refused"
    assert record.error is not None
    assert "allow-list" not in record.error
    assert "tests.fixture_tickets:ticket_frozen" in record.error


def test_an_answer_that_is_a_fragment_of_a_read_is_not_grounded(tmp_path: Path) -> None:
    result = fsm_run(tmp_path, [LOOKUP_T200, {"answer": "on fire"}], "--max-retries", "0")
    record = read_record(tmp_path / "r.json")
    assert record.halt_reason == "schema_fail", result.output
    assert record.error == (
        "final answer refused: no value a receipted tool result returned backs it"
    )


def test_citing_a_receipt_does_not_ground_an_invented_value(tmp_path: Path) -> None:
    invented = {"answer": "The vault code is 99999 (source: doc:vault-7)"}
    result = fsm_run(tmp_path, [VAULT, invented], "--max-retries", "0")
    record = read_record(tmp_path / "r.json")
    assert record.halt_reason == "schema_fail", result.output
    assert record.error == (
        "final answer refused: it states '99999', which no receipted tool result returned"
    )
    shown = invoke("show", run_id(result), "--db", str(tmp_path / "j.db")).output
    assert "final answer refused: it states '99999'" in shown  # journaled beside the decision
    honest = {"answer": "The vault code is tangerine-42 (source: doc:vault-7)"}
    result = fsm_run(tmp_path, [VAULT, honest])
    record = read_record(tmp_path / "r.json")
    assert record.halt_reason == "completed"
    assert record.grounded_by == ("step 1: lookup",)
    db = str(tmp_path / "j.db")
    store = SqliteStore(db)
    try:
        assert store.events(run_id(result))[-1].note == "grounded by step 1: lookup"
    finally:
        store.close()
    assert "grounded by step 1: lookup" in invoke("replay", run_id(result), "--db", db).output


def test_a_handoff_request_without_args_freezes_the_last_proposed_call(tmp_path: Path) -> None:
    ask = {"handoff": {"why": "the close did not confirm"}}
    fsm_run(tmp_path, [LOOKUP_T200, CLOSE_T200, ask])
    record = read_record(tmp_path / "r.json")
    assert record.halt_reason == "handoff_requested"
    assert record.handoff is not None
    assert record.handoff.frozen_args == {"tool": "close_ticket", "args": {"ticket": "T-200"}}
    assert record.unreceipted == (PENDING_CLOSE,)


# --- journals recorded under success rules 1 (tests/recorded_v1: exported before the rule) ------

RECORDED_V1 = Path(__file__).parent / "recorded_v1"


@pytest.mark.parametrize("name", ["v1-false-close", "v1-cited-vault", "v1-lab-password"])
def test_an_old_journal_replays_under_the_rules_it_was_recorded_with(name: str) -> None:
    # v1-false-close is the 206 incident, v1-cited-vault the invented code: both completed
    # under the old rules. Replay proves what was decided then, and says under which rules;
    # it never re-judges them as if they had run today.
    result = invoke("replay", str(RECORDED_V1 / f"{name}.json"))
    assert result.exit_code == 0, result.output
    assert result.output.rstrip().endswith(
        "halt completed proven under success rules 1, the rules it was recorded with (before"
        " side effects needed receipts and answers value-level grounding): not re-judged"
    )
    assert invoke("verify", str(RECORDED_V1 / f"{name}.json")).exit_code == 0


def test_an_old_journal_is_shown_as_decided_under_the_old_rules(tmp_path: Path) -> None:
    db = str(tmp_path / "j.db")
    assert invoke("import", str(RECORDED_V1 / "v1-false-close.json"), "--db", db).exit_code == 0
    shown = invoke("show", "6e567b9c4baf", "--db", db)
    assert "decided under success rules 1 (before 3)" in shown.output
    report = tmp_path / "r.html"
    assert invoke("report", "6e567b9c4baf", "--db", db, "-o", str(report)).exit_code == 0
    assert "1 (recorded before rules 3)" in report.read_text(encoding="utf-8")


def test_a_run_recorded_under_the_old_rules_is_not_resumed() -> None:
    from fsm_agent import ScriptedModel, ToolRegistry
    from fsm_agent.declaration.load import parse_machine
    from fsm_agent.errors import InvalidInputError
    from fsm_agent.journal.runfile import read_run_file
    from fsm_agent.runtime.resume import restore_context

    old = read_run_file(RECORDED_V1 / "v1-false-close.json")
    spec = parse_machine(old.run.machine_text, source="v1")
    with pytest.raises(InvalidInputError, match="recorded under success rules 1"):
        restore_context(
            spec, old.run, old.events[:4], model=ScriptedModel([]), tools=ToolRegistry(),
            clock=lambda: 0.0, repair=None, judge=None,
        )  # fmt: skip


def test_runs_columns_fit_every_halt_reason(tmp_path: Path) -> None:
    fsm_run(tmp_path, [LOOKUP_T200, CLOSE_T200, DONE, DONE, DONE])  # side_effect_unknown
    fsm_run(tmp_path, [VAULT, {"answer": "The vault code is tangerine-42."}])  # completed
    lines = invoke("runs", "--db", str(tmp_path / "j.db")).output.splitlines()
    assert "side_effect_unknown" in lines[1] or "side_effect_unknown" in lines[2]
    started = {
        line.index("STARTED") if i == 0 else re.search(r"\d{4}-\d\d-\d\dT", line).start()  # type: ignore[union-attr]
        for i, line in enumerate(lines)
    }
    assert len(started) == 1, lines  # the STARTED column lines up
