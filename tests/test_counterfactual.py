"""`fsm-agent replay RUN --machine OTHER.yaml`: a counterfactual against a declaration that
adds, removes or reorders edges and states still compares each decision with the same edge
(transition identity), and says where the run would have halted or which fact it lacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from fsm_agent.cli.main import cli
from fsm_agent.declaration.load import load_machine

LOOKUP = {"tool_call": {"name": "lookup", "args": {"q": "lab password"}}}
ANSWER = {"answer": "swordfish"}
INVENTED = {"answer": "hunter2"}
AGENT_LOOP = load_machine("agent_loop").text
UNUSED_EDGE = (
    "  - {trigger: handoff, source: drafting, dest: handoff, guards: [thrashing],"
    " halt: handoff_requested}\n"
)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def lab(tmp_path: Path, replies: list[object]) -> str:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(replies), encoding="utf-8")
    result = invoke(
        "run", "agent_loop", "--task", "Find the lab password", "--model", f"scripted:{script}",
        "--tools", "fsm_agent.examples.halt_lab.tools",
        "--allow", "lookup,slow_lookup,hang",
        "--db", str(tmp_path / "j.db"),
        "--record", str(tmp_path / "r.json"), "-q",
    )  # fmt: skip
    return result.output.split()[1]


def replay_against(tmp_path: Path, run_id: str, text: str) -> Result:
    other = tmp_path / "other.yaml"
    other.write_text(text, encoding="utf-8")
    return invoke("replay", run_id, "--db", str(tmp_path / "j.db"), "--machine", str(other))


def _transitions(text: str) -> tuple[str, list[str]]:
    head, body = text.split("transitions:\n")
    return head, [line + "\n" for line in body.splitlines() if line.strip()]


def added_first(text: str) -> str:
    head, lines = _transitions(text)
    return head + "transitions:\n" + UNUSED_EDGE + "".join(lines)


def removed_unused(text: str) -> str:
    # the thrashing edge is never taken by these runs (thrash_limit 0)
    return "".join(line for line in text.splitlines(keepends=True) if "[thrashing]" not in line)


def reordered(text: str) -> str:
    head, lines = _transitions(text)
    edges = [line for line in lines if line.lstrip().startswith("- {")]
    comments = [line for line in lines if not line.lstrip().startswith("- {")]
    by_source: dict[str, list[str]] = {}
    for line in edges:
        source = line.split("source: ")[1].split(",")[0]
        by_source.setdefault(source, []).append(line)
    # sources in reverse order; each source's candidates keep their order (it is semantic)
    return (
        head
        + "transitions:\n"
        + "".join(line for source in reversed(list(by_source)) for line in by_source[source])
        + "".join(comments)
    )


@pytest.mark.parametrize("change", [added_first, removed_unused, reordered])
@pytest.mark.parametrize("replies", [[LOOKUP, ANSWER], [LOOKUP, INVENTED, INVENTED, INVENTED]])
def test_edges_never_taken_change_nothing(
    tmp_path: Path, change: object, replies: list[object]
) -> None:
    run_id = lab(tmp_path, replies)
    other = change(AGENT_LOOP)  # type: ignore[operator]
    assert other != AGENT_LOOP
    result = replay_against(tmp_path, run_id, other)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"counterfactual replay of run {run_id}")
    assert "proven" in result.output.splitlines()[-1]
    assert "DIVERGED" not in result.output


def test_an_other_machine_that_halts_earlier_says_where(tmp_path: Path) -> None:
    run_id = lab(tmp_path, [LOOKUP, INVENTED, ANSWER])  # refused once, then grounded
    no_retry = "".join(
        line for line in AGENT_LOOP.splitlines(keepends=True)
        if "trigger: answer, source: drafting, dest: drafting" not in line
    )  # fmt: skip
    result = replay_against(tmp_path, run_id, no_retry)
    assert result.exit_code == 0, result.output
    last = result.output.splitlines()[-1]
    assert last.startswith("would have halted schema_fail at seq 4 (step 2/8, drafting → drafting)")


def test_an_other_machine_that_leaves_the_recorded_path_names_the_missing_fact(
    tmp_path: Path,
) -> None:
    run_id = lab(tmp_path, [LOOKUP, ANSWER])
    detour = AGENT_LOOP.replace(
        "  tool_pending: {action: tool}\n",
        "  tool_pending: {action: tool}\n  review: {action: model}\n",
    ).replace(
        "  - {trigger: tool_call, source: drafting, dest: tool_pending}\n",
        "  - {trigger: tool_call, source: drafting, dest: review}\n"
        "  - {trigger: tool_call, source: review, dest: tool_pending}\n"
        "  - {trigger: answer, source: review, dest: handoff, halt: schema_fail}\n"
        "  - {trigger: handoff, source: review, dest: handoff, halt: handoff_requested}\n"
        "  - {trigger: rejected, source: review, dest: handoff, halt: schema_fail}\n",
    )
    result = replay_against(tmp_path, run_id, detour)
    assert result.exit_code == 1, result.output
    last = result.output.splitlines()[-1]
    assert "needs facts the journal does not hold, at seq 1" in last
    assert "now goes to 'review'; recorded 'tool_pending'" in last
    assert "what 'review' would have done next was never recorded" in last
    # the first fact it lacks, not a later one: nothing past the recorded halt is named
    assert "past the recorded halt" not in last
    assert "model reply was never recorded" not in last


def test_an_other_machine_with_another_initial_state_diverges_at_the_start(
    tmp_path: Path,
) -> None:
    run_id = lab(tmp_path, [LOOKUP, ANSWER])
    other = AGENT_LOOP.replace("initial: drafting", "initial: tool_pending")
    result = replay_against(tmp_path, run_id, other)
    assert result.exit_code == 1
    assert "this declaration starts in 'tool_pending'; the run started in 'drafting'" in (
        result.output
    )
