"""`fsm-agent check`: every shipped machine is proven; each fixture's one defect is found with
the expected counterexample, written as a run file that replays, draws and reports; the
exit codes; lint's CK findings; and the checker's gap verdict against concrete runs."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from fsm_agent.checking.checker import check_machine, check_paths
from fsm_agent.checking.explore import explore
from fsm_agent.checking.model import Bounds
from fsm_agent.checking.report import format_text, step_line
from fsm_agent.cli.main import cli
from fsm_agent.declaration.lint import lint_paths
from fsm_agent.declaration.load import load_machine, parse_machine
from fsm_agent.declaration.policy import default_policy_path
from fsm_agent.halt import HaltReason
from fsm_agent.journal.runfile import read_run_file
from fsm_agent.review.replay import replay_events
from tests.lab import granted

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "check_fixtures"
SHIPPED = [
    *sorted(str(p) for p in (ROOT / "machines").glob("*.yaml")),
    *sorted(str(p) for p in (ROOT / "examples").rglob("*.yaml")),
]


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.mark.parametrize("machine", SHIPPED, ids=[Path(p).name for p in SHIPPED])
def test_every_shipped_machine_is_proven(machine: str) -> None:
    report = check_paths(machine)
    assert [(v.name, v.proven) for v in report.verdicts] == [
        ("halts", True),
        ("no-gap", True),
        ("receipts", True),
        ("privileged", True),
        ("dead", True),
    ]
    assert report.longest is not None
    assert report.longest[1] == report.bounds.max_steps


def test_the_canonical_machine_s_longest_run_as_a_function_of_the_budgets() -> None:
    report = check_paths("agent_loop")
    assert report.longest == (25, 8)
    assert report.growth is not None
    assert report.growth.formula(report.growth.transitions) == "3*max_steps + 1"
    assert report.growth.formula(report.growth.calls) == "max_steps"
    bigger = check_paths("agent_loop", budgets={"max_steps": 16, "max_retries": 4}, growth=False)
    assert bigger.longest == (3 * 16 + 1, 16)


#: fixture -> (the one refuted property, the path's lines, the run file's halt reason)
EXPECTED = {
    "cycle": (
        "halts",
        [
            "drafting --tool_call[]--> tool_pending",
            "tool_pending --tool_returned[]--> awaiting_receipts",
            "awaiting_receipts --collected[not receipts_complete]--> awaiting_receipts",
        ],
        "wall_clock",
    ),
    "gap": (
        "no-gap",
        [
            "drafting --answer[retries_left]--> drafting (retry)",
            "drafting --answer[retries_left]--> drafting (retry)",
            "drafting --answer[no edge passes]--> no transition: handoff (no_transition)",
        ],
        "no_transition",
    ),
    "privileged": ("privileged", ["drafting --tool_call[]--> tool_pending"], "handoff_requested"),
    "dead": ("dead", [], None),
}


def test_an_answer_edge_without_a_grounding_guard_is_refuted_and_linted_as_hp001() -> None:
    # receipts.yaml's answer edge into done has no grounding guard: the runtime refuses its
    # ungrounded answers (ungrounded_answer), so success is decided by the model's reply
    # there, not by receipts. check refutes receipts for that edge and names lint's rule;
    # lint reports that one finding (no CK003 besides it).
    machine = str(FIXTURES / "receipts.yaml")
    report = check_paths(machine, growth=False)
    assert [v.name for v in report.verdicts if not v.proven] == ["receipts"]
    verdict = report.verdicts[2]
    assert [(c.code, c.transition) for c in verdict.causes] == [("HP001", 4)]
    assert verdict.summary.endswith("(the run halts ungrounded_answer) (lint HP001)")
    assert [step_line(s).split("    (")[0] for s in verdict.path] == [
        "drafting --answer[side_effects_receipted, judge_agrees]--> handoff (ungrounded_answer)"
    ]
    findings = lint_paths(machine, str(default_policy_path()), check=True)
    assert [(f.code, f.key) for f in findings] == [("HP001", "$.transitions[4]")]
    e = explore(load_machine(machine), Bounds(8, 2))
    refused = {s.refused for s in e.all_steps() if s.refused is not None}
    assert HaltReason.UNGROUNDED_ANSWER in refused


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_fixture_s_defect_is_found_with_its_counterexample(name: str, tmp_path: Path) -> None:
    prop, lines, halt = EXPECTED[name]
    machine = str(FIXTURES / f"{name}.yaml")
    report = check_paths(machine, growth=False)
    assert [v.name for v in report.verdicts if not v.proven] == [prop]
    verdict = next(v for v in report.verdicts if v.name == prop)
    assert [step_line(s).split("    (")[0] for s in verdict.path] == lines
    code, out = invoke("check", machine, "-o", str(tmp_path))
    assert code == 1
    assert f"{prop:<11} COUNTEREXAMPLE" in out
    files = list(tmp_path.glob("*.json"))
    if halt is None:  # a dead edge has no path to show
        assert files == []
        return
    (path,) = files
    assert f"run file: {path}\n" in out  # the run followed the path: no divergence note
    run_file = read_run_file(path)
    assert run_file.record is not None
    assert run_file.record.halt_reason.value == halt
    assert replay_events(run_file.run, run_file.events).ok
    code, picture = invoke("diagram", machine, "--run", str(path))
    assert code == 0
    assert "<br>taken " in picture  # the path, labelled
    assert "linkStyle " in picture  # and coloured
    code, _ = invoke("report", str(path), "-o", str(tmp_path / "r.html"))
    assert code == 0
    assert (tmp_path / "r.html").stat().st_size > 0
    code, _ = invoke("replay", str(path), "--step")
    assert code == 0


def test_the_dead_fixture_names_the_shadowed_edge_at_its_line() -> None:
    report = check_paths(str(FIXTURES / "dead.yaml"), growth=False)
    text = format_text(report)
    assert "dead.yaml:39: 4 never reachable: transition 11 'rejected' drafting → drafting" in text
    assert "drafting on 'rejected': order picks" not in text.split("dead.yaml:39")[0]


def test_exit_codes_and_json() -> None:
    assert invoke("check", "agent_loop")[0] == 0
    code, out = invoke("check", "agent_loop", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["proven"]
    assert data["longest"] == {"transitions": 25, "model_calls": 8}
    assert [p["name"] for p in data["properties"]] == [
        "halts",
        "no-gap",
        "receipts",
        "privileged",
        "dead",
    ]
    code, out = invoke("check", str(FIXTURES / "gap.yaml"), "--json")
    gap = next(p for p in json.loads(out)["properties"] if p["name"] == "no-gap")
    assert code == 1
    assert gap["proven"] is False
    assert gap["path"][-1]["transition"] is None
    code, out = invoke("check", "no_such_machine")
    assert code == 2
    assert out.startswith("Error: ")
    assert "Traceback" not in out
    code, out = invoke("check", "agent_loop", "--max-steps", "0")
    assert code == 2
    assert "max_steps" in out


def test_a_broken_declaration_is_invalid_input_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (ROOT / "machines" / "agent_loop.yaml")
        .read_text()
        .replace("dest: awaiting_receipts}", "dest: nowhere}")
    )
    code, out = invoke("check", str(bad))
    assert code == 2
    assert f"{bad}:" in out
    assert "unknown state 'nowhere'" in out


def test_lint_reports_the_refuted_properties_once_each() -> None:
    # privileged.yaml enters its tool state with no local halt check: check's privileged
    # names that edge under HP010, and lint reports it once, as HP010 (not CK004 too)
    findings = lint_paths(str(FIXTURES / "privileged.yaml"), str(default_policy_path()), check=True)
    assert [(f.code, f.line, f.key) for f in findings] == [("HP010", 29, "$.transitions[2]")]
    assert "(fsm-agent check: privileged)" in findings[0].message
    # a property no lint rule names a cause of is a CK finding
    findings = lint_paths(str(FIXTURES / "cycle.yaml"), str(default_policy_path()), check=True)
    assert [f.code for f in findings] == ["CK001"]
    assert lint_paths("agent_loop", str(default_policy_path()), check=True) == []


def test_a_registry_without_privileged_tools_proves_the_privileged_fixture() -> None:
    from fsm_agent.runtime.tools import Tool, ToolRegistry

    tools = ToolRegistry((Tool("lookup", lambda q="": None),))
    report = check_paths(str(FIXTURES / "privileged.yaml"), tools=tools, growth=False)
    assert report.proven


# --- the gap verdict against concrete runs --------------------------------------------------

ANSWER_EDGES = [
    "{trigger: answer, source: drafting, dest: drafting, guards: [retries_left], retry: true}",
    "{trigger: answer, source: drafting, dest: handoff, guards: [reply_empty], halt: schema_fail}",
    "{trigger: answer, source: drafting, dest: handoff, halt: schema_fail}",
    "{trigger: handoff, source: drafting, dest: handoff, halt: handoff_requested}",
    "{trigger: rejected, source: drafting, dest: drafting, guards: [retries_left], retry: true}",
    "{trigger: rejected, source: drafting, dest: handoff, guards: [reply_empty],"
    " halt: empty_response}",
    "{trigger: rejected, source: drafting, dest: handoff, halt: schema_fail}",
    "{trigger: tool_call, source: drafting, dest: handoff, halt: tool_refused}",
]


def _machine(edges: list[str], retries: int) -> str:
    done = (
        "{trigger: answer, source: drafting, dest: done, guards: [answer_grounded],"
        " halt: completed}"
    )
    body = "\n".join(f"  - {e}" for e in [done, *edges])
    return (
        "name: generated\ninitial: drafting\n"
        f"budgets: {{max_steps: 4, wall_clock_ms: 60000, max_cost: 1.0, tool_timeout_ms: 1000,"
        f" max_retries: {retries}}}\n"
        "states:\n  drafting: {action: model}\n  done: {terminal: true}\n"
        "  budget_exhausted: {terminal: true}\n  handoff: {terminal: true}\n"
        f"transitions:\n{body}\n"
    )


REPLIES = [
    {"answer": "x"},
    "prose",
    None,
    {"handoff": {"why": "w"}},
    {"tool_call": {"name": "t", "args": {}}},
]


#: The replies whose edges can retry (an answer, a prose reply, an empty one): a run of n
#: of them reaches every retry count a run of this machine can have after n model calls.
RETRYING = (0, 1, 2)


@settings(max_examples=20, deadline=None)
@given(
    chosen=st.lists(st.sampled_from(ANSWER_EDGES), min_size=1, max_size=6, unique=True),
    retries=st.integers(0, 3),
)
def test_the_gap_verdict_is_exactly_what_concrete_runs_show(
    chosen: list[str], retries: int
) -> None:
    """A generated machine of one model state, every one of whose edges either halts or
    retries: its reachable configurations are (n model calls, n retries), which the replies
    [P]*n + [K]*… reach for every retrying reply P and every reply K. So the checker's
    no-gap verdict must be exactly whether some such concrete run halts no_transition."""
    from fsm_agent import ScriptedModel, run
    from fsm_agent.errors import MachineSpecError
    from fsm_agent.stores.sqlite import SqliteStore

    try:
        spec = parse_machine(_machine(chosen, retries), source="generated.yaml")
    except MachineSpecError:  # e.g. handoff unreachable: not a machine the loader takes
        return
    verdict = check_machine(spec, growth=False).verdicts[1]
    store = SqliteStore(":memory:")
    halts = set()
    try:
        for prefix in RETRYING:
            for n in range(4):
                for last in range(len(REPLIES)):
                    replies = [REPLIES[prefix]] * n + [REPLIES[last]] * 4
                    record = run(spec, task="t", model=ScriptedModel(replies), store=store,
                                 handle_signals=False)  # fmt: skip
                    halts.add(record.halt_reason.value)
    finally:
        store.close()
    assert verdict.proven == ("no_transition" not in halts), (verdict.summary, sorted(halts))


def test_loading_the_fixtures_is_what_lint_sees() -> None:
    for name in EXPECTED:
        assert load_machine(str(FIXTURES / f"{name}.yaml")).name == f"fixture_{name}"


@pytest.mark.parametrize(
    "machine",
    [*SHIPPED, *sorted(str(p) for p in FIXTURES.glob("*.yaml"))],
    ids=lambda p: Path(p).name,
)
def test_dropping_dead_facts_changes_no_verdict(
    machine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The explorer drops the facts no guard reads before an action overwrites them; with
    every fact kept, every verdict, every path's length and the longest run are the same
    (but a loop's: kept, a dead fact can make its first round a configuration longer)."""
    from fsm_agent.checking.model import Config, Liveness

    def summary() -> list[tuple[str, bool, int]]:
        # every fact kept makes many more configurations: past the default limit
        report = check_paths(machine, growth=False, limit=10_000_000)
        assert report.longest == reduced_longest or not report.verdicts[0].proven
        return [(v.name, v.proven, len(v.path)) for v in report.verdicts]

    reduced = check_paths(machine, growth=False)
    reduced_longest = reduced.longest
    expected = [(v.name, v.proven, len(v.path)) for v in reduced.verdicts]

    def keep_all(self: Liveness, c: Config, state: str) -> Config:
        return c._replace(state=state)

    monkeypatch.setattr(Liveness, "entering", keep_all)
    kept = summary()
    assert [v[:2] for v in kept] == [v[:2] for v in expected]
    for (name, proven, length), (_, _, reduced_length) in zip(kept, expected, strict=True):
        if name == "halts" and not proven:  # a kept dead fact may take one round to repeat
            assert reduced_length <= length <= reduced_length + 1
        else:
            assert length == reduced_length, name


def test_a_path_a_user_guard_decides_is_written_as_a_run_file_that_replays(
    tmp_path: Path,
) -> None:
    """A user guard is a free boolean to the checker: a retry it alone decides is refuted,
    and the path's run file (the real run asks the guard itself) replays."""
    machine = str(FIXTURES / "user_guard.yaml")
    code, out = invoke("check", machine, "-o", str(tmp_path))
    assert code == 1
    assert "drafting --answer[check_guards:approves]--> drafting (retry)" in out
    (path,) = tmp_path.glob("*.json")
    run_file = read_run_file(path)
    assert replay_events(run_file.run, run_file.events).ok
    code, out = invoke("check", machine, "--json", "-o", str(tmp_path / "j"))
    found = next(p for p in json.loads(out)["properties"] if p["name"] == "privileged")
    assert found["run_file"] == str(tmp_path / "j" / "fixture_user_guard-privileged.json")


def test_every_builtin_guard_has_a_meaning_or_is_free() -> None:
    from fsm_agent.checking.model import FREE_BUILTINS, Bounds, Config, guard_value
    from fsm_agent.runtime.guards import BUILTIN_GUARDS

    c = Config("drafting", 0, 0, True)
    for name in set(BUILTIN_GUARDS) - FREE_BUILTINS:
        assert guard_value(name, c, Bounds(1, 1)) in (True, False), name
    assert set(BUILTIN_GUARDS) >= FREE_BUILTINS


def test_a_retry_no_retry_meter_decides_is_a_privileged_counterexample() -> None:
    """The retry budget is a control key: a retry decided by a user guard alone (the retry
    meter never asked) is refuted, with the one-step path that takes it."""
    report = check_paths(str(FIXTURES / "retry.yaml"), growth=False)
    assert [v.name for v in report.verdicts if not v.proven] == ["privileged"]
    verdict = report.verdicts[3]
    assert "without the local retry meter: transition 10" in verdict.summary
    assert [step_line(s).split("    (")[0] for s in verdict.path] == [
        "drafting --rejected[check_guards:approves]--> drafting (retry)"
    ]


# --- every concrete run is one of the abstract runs ----------------------------------------

CANONICAL = (ROOT / "machines" / "agent_loop.yaml").read_text(encoding="utf-8")
#: model replies: an allow-listed call, an unlisted one, the privileged tool, a grounded
#: answer, an ungrounded one, a handoff, prose, nothing
MODEL_REPLIES = [
    {"tool_call": {"name": "work", "args": {"n": 1}}},
    {"tool_call": {"name": "unlisted", "args": {}}},
    {"tool_call": {"name": "admin", "args": {}}},
    {"answer": "V-4242"},
    {"answer": "the answer is 918273645"},
    {"handoff": {"why": "w"}},
    "prose",
    None,
]
#: tool results: complete receipts with and without the final value, a 206 with an empty
#: id, a retryable and a fatal error
TOOL_RESULTS = ["final", "complete", "partial", "retryable", "fatal"]


def _mutant(dropped: set[int]) -> str:
    lines = CANONICAL.splitlines(keepends=True)
    edges = [i for i, line in enumerate(lines) if line.startswith("  - {trigger:")]
    return "".join(line for i, line in enumerate(lines) if i not in {edges[j] for j in dropped})


def _tools(results: list[str]) -> Any:
    from fsm_agent.runtime.receipts import Receipt
    from fsm_agent.runtime.tools import Tool, ToolError, ToolRegistry, ToolResult

    queue = list(results)

    def work(n: int = 0) -> Any:
        kind = queue.pop(0) if queue else "partial"
        if kind in ("retryable", "fatal"):
            raise ToolError(kind, retryable=kind == "retryable")
        receipt = Receipt(200, "r-1") if kind != "partial" else Receipt(206, "")
        final = "V-4242" if kind == "final" else None
        return ToolResult(receipts=(receipt,), observation={"value": "V-4242"}, final=final)

    return ToolRegistry((Tool("work", work), Tool("admin", work, privileged=True)))


@settings(max_examples=40, deadline=None)
@given(
    dropped=st.sets(st.integers(0, 19), max_size=3),
    replies=st.lists(st.integers(0, len(MODEL_REPLIES) - 1), min_size=1, max_size=9),
    results=st.lists(st.sampled_from(TOOL_RESULTS), max_size=6),
)
def test_every_concrete_run_is_an_abstract_run(
    dropped: set[int], replies: list[int], results: list[str]
) -> None:
    """Mutants of the canonical machine (up to three edges dropped) run on scripted replies
    and tool results: each journaled transition (source, trigger, dest, halt) is a step the
    explorer has from a configuration the run could be in, so whatever the checker proves
    of every abstract run holds of this one."""
    from fsm_agent import ScriptedModel, run
    from fsm_agent.checking.explore import Halt, explore
    from fsm_agent.checking.model import Bounds
    from fsm_agent.errors import MachineSpecError
    from fsm_agent.stores.sqlite import SqliteStore

    try:
        spec = parse_machine(_mutant(dropped), source="mutant.yaml")
    except MachineSpecError:  # a state left unreachable or without a way out
        return
    e = explore(spec, Bounds(spec.budgets["max_steps"], spec.budgets["max_retries"]))
    store = SqliteStore(":memory:")
    try:
        record = run(spec, task="t", model=ScriptedModel([MODEL_REPLIES[i] for i in replies]),
                     **granted(_tools(results)), store=store, handle_signals=False,
                     clock=(i / 1000 for i in itertools.count()).__next__)  # fmt: skip
        events = [x for x in store.events(record.run_id) if x.kind == "transition"]
    finally:
        store.close()
    frontier = set(e.starts)
    for x in events:
        moved = set()
        for c in frontier:
            for s in e.steps[c]:
                if (s.source.state, s.trigger, s.dest.state) != (x.source, x.trigger, x.dest):
                    continue
                if isinstance(s.dest, Halt) and x.halt is not None and s.dest.reason != x.halt:
                    continue
                moved.add(s.dest)
        assert moved, f"{x.source} --{x.trigger}--> {x.dest} ({x.halt}) is no abstract step"
        frontier = {n for n in moved if not isinstance(n, Halt)} or moved


def test_a_machine_too_large_to_explore_is_refused_not_hung(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for option in ("--max-work", "--max-configurations"):  # the old name still works
        code, out = invoke("check", "agent_loop", option, "100")
        assert code == 2
        assert "more than 100 units of work (configurations, transitions and" in out
    from fsm_agent.declaration import lint as lint_module

    monkeypatch.setattr(lint_module, "LINT_CHECK_LIMIT", 100)
    findings = lint_paths("agent_loop", str(default_policy_path()), check=True)
    assert [(f.code, f.key) for f in findings] == [("CK000", "$.budgets")]


@pytest.mark.parametrize(
    ("machine", "tools"),
    [
        ("agent_loop", None),
        ("agent_loop", "fsm_agent.examples.halt_lab.tools"),
        ("agent_loop", "fsm_agent.examples.stop_conditions.tools"),
        ("examples/payments_retry/payments.yaml", None),
        ("examples/payments_retry/payments.yaml", "fsm_agent.examples.payments_retry.tools"),
    ],
)
def test_every_shipped_machine_passes_lint_and_check_with_and_without_its_tools(
    machine: str, tools: str | None
) -> None:
    # A defensive edge that only a privileged tool could reach is information, not a failure.
    path = str(Path(__file__).parent.parent / machine) if machine.endswith(".yaml") else machine
    extra = ["--tools", tools] if tools else []
    for command in ("lint", "check"):
        code, out = invoke(command, path, *extra)
        assert code == 0, out
