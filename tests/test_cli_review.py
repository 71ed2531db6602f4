"""The review commands a person runs before deploy and after an incident: lint, report, and
run --policy."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from fsm_agent.cli.main import cli

LOOKUP = {"tool_call": {"name": "lookup", "args": {"q": "lab password"}}}
FIXTURES = Path(__file__).parent / "lint_fixtures"


def invoke(*args: str) -> tuple[int, str]:
    """Exit code and stdout (errors and live step lines go to stderr, also checked here)."""
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout if result.exit_code == 0 else result.output


def test_lint_clean_and_failing_declarations() -> None:
    code, out = invoke("lint", "agent_loop")
    assert (code, out) == (0, "ok: agent_loop: no findings\n")
    code, out = invoke("lint", str(FIXTURES / "HP001-fail.yaml"))
    assert code == 1
    assert f"{FIXTURES / 'HP001-fail.yaml'}:11: HP001 " in out
    code, out = invoke("lint", str(FIXTURES / "HP001-fail.yaml"), "--format", "json")
    assert code == 1
    result = CliRunner().invoke(
        cli, ["lint", str(FIXTURES / "HP001-fail.yaml"), "--format", "json"]
    )
    # check's receipts refutes the edge and lint reports that as HP001 (no CK003 besides it),
    # and the edge it blames is not dead besides: CK005 is the answer edge it shadows
    assert [f["code"] for f in json.loads(result.stdout)] == ["CK002", "HP001", "CK005"]
    result = CliRunner().invoke(
        cli, ["lint", str(FIXTURES / "HP001-fail.yaml"), "--json", "--no-check"]
    )
    assert [f["code"] for f in json.loads(result.stdout)] == ["HP001"]


def test_lint_reports_a_broken_policy_as_a_finding() -> None:
    code, out = invoke(
        "lint", "agent_loop", "--policy", str(FIXTURES / "HP002-fail-missing.policy.yml")
    )
    assert code == 1
    assert "HP002" in out


def test_run_with_a_policy_and_with_a_broken_one(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps([LOOKUP, {"answer": "swordfish"}]))
    base = [
        "run", "agent_loop", "--task", "t", "--model", f"scripted:{script}",
        "--tools", "fsm_agent.examples.halt_lab.tools",
        "--allow", "lookup,slow_lookup,hang",
        "--db", str(tmp_path / "j.db"),
        "--record", str(tmp_path / "r.json"), "--quiet",
    ]  # fmt: skip
    code, _ = invoke(*base, "--policy", "machines/halt-policy.yml")
    assert code == 0
    code, out = invoke(*base, "--policy", str(FIXTURES / "HP002-fail-missing.policy.yml"))
    assert code == 2
    assert "required key missing" in out
    assert not (tmp_path / "r2.json").exists()


def test_report_writes_one_html_file(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps([LOOKUP, {"answer": "<script>x</script> swordfish"}]))
    db = str(tmp_path / "j.db")
    code, out = invoke(
        "run", "agent_loop", "--task", "t", "--model", f"scripted:{script}",
        "--tools", "fsm_agent.examples.halt_lab.tools",
        "--allow", "lookup,slow_lookup,hang",
        "--db", db,
        "--record", str(tmp_path / "r.json"), "--json",
    )  # fmt: skip
    assert code == 0
    run_id = json.loads(out)["run_id"]
    html_path = tmp_path / "incident.html"
    code, out = invoke("report", run_id, "--db", db, "-o", str(html_path))
    assert code == 0, out
    html = html_path.read_text()
    assert "completed" in html
    assert "<svg" in html
    assert "<script" not in html
    assert "&lt;script&gt;x&lt;/script&gt; swordfish" in html
