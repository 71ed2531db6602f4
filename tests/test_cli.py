"""The CLI end to end: exact exit codes, the run id, the journal read back, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from fsm_agent.cli.main import cli

EXAMPLES = Path(__file__).parent.parent / "examples"
LOOPING = EXAMPLES / "halt_lab" / "looping.json"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def script(tmp_path: Path, replies: object) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(replies), encoding="utf-8")
    return f"scripted:{path}"


def run_args(tmp_path: Path, model: str, *extra: str) -> list[str]:
    return [
        "run", "agent_loop", "--task", "find the lab password", "--model", model,
        "--tools", "fsm_agent.examples.halt_lab.tools",
        "--allow", "lookup,slow_lookup,hang",
        "--db", str(tmp_path / "j.db"),
        "--record", str(tmp_path / "record.json"), *extra,
    ]  # fmt: skip


def test_looping_stub_exits_3_with_max_steps(tmp_path: Path) -> None:
    result = invoke(*run_args(tmp_path, f"scripted:{LOOPING}"))
    assert result.exit_code == 3
    assert result.output.startswith("run ")
    assert "halted: max_steps (budget_exhausted) after 8/8 steps" in result.output
    assert "answer: cannot: step budget" in result.output
    assert "step 3/8  drafting → tool_pending  [tool_call]" in result.stderr
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["halt_reason"] == "max_steps"
    assert record["steps_used"] == 8


def test_answer_with_receipts_exits_0(tmp_path: Path) -> None:
    model = script(
        tmp_path,
        [{"tool_call": {"name": "lookup", "args": {"q": "lab password"}}}, {"answer": "swordfish"}],
    )
    result = invoke(*run_args(tmp_path, model, "--json"))
    assert result.exit_code == 0
    record = json.loads(result.stdout)
    assert record["halt_reason"] == "completed"
    assert record["answer"] == "swordfish"


def test_handoff_exits_4_and_budget_override_is_frozen(tmp_path: Path) -> None:
    model = script(tmp_path, [{"handoff": {"why": "needs a human"}}])
    result = invoke(*run_args(tmp_path, model, "--max-steps", "3", "--json"))
    assert result.exit_code == 4
    record = json.loads(result.stdout)
    assert record["halt_reason"] == "handoff_requested"
    assert record["handoff"]["why"] == "needs a human"
    assert record["max_steps"] == 3
    assert record["budgets"]["max_steps"] == 3


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--max-steps", "-1"], "budget max_steps: must not be negative"),
        (["--wall-clock-ms", "0"], "budget wall_clock_ms: must be positive"),
        (["--max-cost", "nan"], "budget max_cost: must be finite"),
    ],
)
def test_bad_budget_exits_2_before_anything_runs(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    result = invoke(*run_args(tmp_path, f"scripted:{LOOPING}", *extra))
    assert result.exit_code == 2
    assert f"Error: {message}" in result.output
    assert not (tmp_path / "record.json").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "scripted:/no/such.json"], "cannot read script"),
        (["--model", "gpt:4"], "a model spec is scripted:PATH or python:module:callable"),
        (
            ["--tools", "no_such_module_xyz"],
            "no module named 'no_such_module_xyz' (looked on the import path (sys.path), then in",
        ),
        (["--tools", "json"], "module has no TOOLS"),
    ],
)
def test_bad_adapters_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    base = run_args(tmp_path, f"scripted:{LOOPING}")
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[base.index(flag) + 1] = value
    result = invoke(*base)
    assert result.exit_code == 2
    assert message in result.output


def test_unknown_machine_and_invalid_machine_file(tmp_path: Path) -> None:
    result = invoke("validate", "no_such_machine")
    assert result.exit_code == 2
    assert "no declared machine named 'no_such_machine'" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (Path(__file__).parent.parent / "machines" / "agent_loop.yaml")
        .read_text()
        .replace("guards: [retries_left], retry: true}", "guards: [retries_ok], retry: true}", 1)
    )
    result = invoke("validate", str(bad))
    assert result.exit_code == 2
    assert f"{bad}:" in result.output
    assert "unknown guard 'retries_ok'" in result.output
    assert "@ $.transitions[5].guards[0]" in result.output
    assert invoke("validate", "agent_loop").output.startswith("ok: agent_loop (6 states")


def test_runs_and_show_read_the_journal(tmp_path: Path) -> None:
    first = invoke(*run_args(tmp_path, f"scripted:{LOOPING}", "--json"))
    run_id = json.loads(first.stdout)["run_id"]
    db = str(tmp_path / "j.db")
    listing = invoke("runs", "--db", db)
    assert listing.exit_code == 0
    assert run_id in listing.output
    assert "max_steps" in listing.output
    assert "8/8" in listing.output
    as_json = json.loads(invoke("runs", "--db", db, "--json").output)
    assert [r["run_id"] for r in as_json] == [run_id]
    shown = invoke("show", run_id, "--db", db)
    assert shown.exit_code == 0
    assert "drafting → budget_exhausted  [budget]  halt: max_steps" in shown.output
    detail = json.loads(invoke("show", run_id, "--db", db, "--json").output)
    assert detail["record"]["halt_reason"] == "max_steps"
    assert [e["seq"] for e in detail["events"]] == list(range(len(detail["events"])))


def test_show_unknown_run_and_missing_or_corrupt_db(tmp_path: Path) -> None:
    invoke(*run_args(tmp_path, f"scripted:{LOOPING}"))
    result = invoke("show", "nope", "--db", str(tmp_path / "j.db"))
    assert result.exit_code == 2
    assert "no run 'nope'" in result.output
    result = invoke("runs", "--db", str(tmp_path / "missing.db"))
    assert result.exit_code == 2
    assert "no journal at" in result.output
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database at all" * 100)
    result = invoke("runs", "--db", str(garbage))
    assert result.exit_code == 70
    assert f"journal {garbage}" in result.output
    assert "Traceback" not in result.output


def test_demo_runs_every_scenario_and_says_yes(tmp_path: Path) -> None:
    from fsm_agent.examples.scenarios import SCENARIOS

    result = invoke("demo", "--db", str(tmp_path / "demo.db"), "--records", str(tmp_path / "r"))
    assert result.exit_code == 0, result.output
    for scenario in SCENARIOS:
        line = next(ln for ln in result.output.splitlines() if ln.startswith(scenario.name))
        assert scenario.expected.value in line
        assert " yes " in line
    assert len(list((tmp_path / "r").glob("*.json"))) == len(SCENARIOS)
    # The README shows this table: same rows, apart from the run ids and the temp path.
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    shown = readme.split("<!-- demo-output -->\n```\n", 1)[1].split("```", 1)[0]
    assert [ln.rsplit(None, 1)[0] for ln in shown.splitlines()[1:]] == [
        ln.rsplit(None, 1)[0] for ln in result.output.splitlines()[1:]
    ]
