"""A user action declares its outcomes (`outcomes:` on its state): the loader holds every edge
to them, `check` proves each one is handled (an outcome no edge takes is a gap, and so is a
user action that declares none), and the runtime turns an outcome the action did not declare
into its `failed` outcome instead of a trigger no edge may handle.

Through the real CLI, with a user action module the test writes.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from fsm_agent.cli.main import cli
from fsm_agent.declaration.load import parse_machine
from fsm_agent.errors import MachineSpecError
from fsm_agent.runtime.record import read_record

#: A user action that returns the outcome the environment names.
ACTIONS = """
import os
from fsm_agent import ActionResult

def settle(snapshot):
    return ActionResult(outcome=os.environ["SETTLE_OUTCOME"])
"""


def spec_text(module: str, outcomes: list[str] | None, handled: tuple[str, ...]) -> str:
    """A machine whose first state runs `module:settle`: the first of `handled` completes
    on a receipted goal, each of `handled` otherwise goes to handoff."""
    declared = "" if outcomes is None else f", outcomes: {json.dumps(outcomes)}"
    edges = "\n".join(
        f"  - {{trigger: {o}, source: settling, dest: handoff, halt: handoff_requested}}"
        for o in handled
    )
    if handled:  # a receipted goal completes; anything else is a person's
        edges = (
            f"  - {{trigger: {handled[0]}, source: settling, dest: done,"
            " guards: [goal_satisfied], halt: completed}\n" + edges
        )
    return f"""
name: settling
initial: settling
budgets: {{max_steps: 2, wall_clock_ms: 5000, max_cost: 1.0, tool_timeout_ms: 2000,
          max_retries: 0}}
states:
  settling: {{action: "{module}:settle"{declared}}}
  done: {{terminal: true}}
  budget_exhausted: {{terminal: true}}
  handoff: {{terminal: true}}
transitions:
{edges}
  - {{trigger: failed, source: settling, dest: handoff, halt: tool_error}}
  - {{trigger: timed_out, source: settling, dest: budget_exhausted, halt: tool_timeout}}
"""


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"settle_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(ACTIONS, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def replies(tmp_path: Path) -> Path:
    path = tmp_path / "replies.json"
    path.write_text("[]", encoding="utf-8")
    return path


def run(tmp_path: Path, machine: str) -> Result:
    db, rec = str(tmp_path / "j.db"), str(tmp_path / "r.json")
    model = f"scripted:{replies(tmp_path)}"
    return invoke("run", machine, "--task", "settle", "--model", model, "--db", db,
                  "--record", rec, "-q")  # fmt: skip


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "settling.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_check_proves_no_gap_when_every_declared_outcome_is_handled(
    tmp_path: Path, module: str
) -> None:
    path = write(tmp_path, spec_text(module, ["settled", "pending"], ("settled", "pending")))
    result = invoke("check", path)
    assert "no-gap      proven" in result.output, result.output


def test_a_declared_outcome_no_edge_handles_is_a_gap_in_check_and_lint(
    tmp_path: Path, module: str
) -> None:
    path = write(tmp_path, spec_text(module, ["settled", "pending"], ("settled",)))
    result = invoke("check", path)
    assert result.exit_code == 1, result.output
    assert "no-gap      COUNTEREXAMPLE" in result.output, result.output
    assert "settling on 'pending'" in result.output
    linted = invoke("lint", path)
    assert linted.exit_code == 1, linted.output
    assert "CK002" in linted.output


def test_a_user_action_that_declares_no_outcomes_is_not_proven_gap_free(
    tmp_path: Path, module: str
) -> None:
    path = write(tmp_path, spec_text(module, None, ("settled", "pending")))
    result = invoke("check", path)
    assert result.exit_code == 1, result.output
    assert "no-gap      COUNTEREXAMPLE" in result.output, result.output
    assert "settling on 'an undeclared outcome'" in result.output


def test_the_incident_a_returned_outcome_no_edge_handles_cannot_be_proven_away(
    tmp_path: Path, module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What check said was gap-free: the action returns an outcome no edge handles and the run
    # halts no_transition. Now check refutes no-gap for that machine (above), and, declared,
    # the same return is the action's failure, named in the record.
    undeclared = write(tmp_path, spec_text(module, None, ("settled",)))
    monkeypatch.setenv("SETTLE_OUTCOME", "refunded")
    ran = run(tmp_path, undeclared)
    assert read_record(tmp_path / "r.json").halt_reason == "no_transition", ran.output
    assert invoke("check", undeclared).exit_code == 1

    declared = write(tmp_path, spec_text(module, ["settled"], ("settled",)))
    ran = run(tmp_path, declared)
    rec = read_record(tmp_path / "r.json")
    assert rec.halt_reason == "tool_error", ran.output
    said = (tmp_path / "r.json").read_text(encoding="utf-8")
    assert "returned outcome 'refunded', not one of its declared outcomes (settled)" in said
    assert invoke("check", declared).exit_code == 0


@pytest.mark.parametrize(
    ("state", "says", "where"),
    [
        ("{action: model, outcomes: [a]}", "only a user action", "$.states.settling.outcomes"),
        ('{action: "M:settle", outcomes: []}', "non-empty list", "$.states.settling.outcomes"),
        ('{action: "M:settle", outcomes: [a, a]}', "declared twice", "outcomes[1]"),
        ('{action: "M:settle", outcomes: [failed]}', "every user action may fire", "outcomes[0]"),
        ('{action: "M:settle", outcomes: [budget]}', "is the runtime's", "outcomes[0]"),
        ('{action: "M:settle", outcomes: [3]}', "a non-empty name", "outcomes[0]"),
    ],
)
def test_bad_outcomes_are_load_errors_that_say_where(
    module: str, state: str, says: str, where: str
) -> None:
    text = spec_text(module, ["settled"], ()).replace(
        f'{{action: "{module}:settle", outcomes: ["settled"]}}', state.replace("M", module)
    )
    with pytest.raises(MachineSpecError, match=says) as caught:
        parse_machine(text, source="settling.yaml")
    assert where in str(caught.value)


def test_an_edge_for_an_outcome_the_action_does_not_declare_is_a_load_error(module: str) -> None:
    text = spec_text(module, ["settled"], ("settled", "pending"))
    with pytest.raises(MachineSpecError, match="never produces 'pending'"):
        parse_machine(text, source="settling.yaml")
