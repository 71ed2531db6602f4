"""Every counterexample `check` writes replays to the violation it names: its run takes the
path, a loop goes round until the wall clock ends it (and the wording says that is what
ends it), a path that halts ends with that halt, and with the tools module every call's
arguments fit the tool's signature. Each run file is held to that here by reading it and
replaying it, not by trusting `fsm_agent.checking.witness` (which must agree)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import msgspec
import pytest
from click.testing import CliRunner

from fsm_agent.checking.checker import check_machine, check_paths
from fsm_agent.checking.counterexample import Counterexample, write_counterexample
from fsm_agent.checking.explore import Exploration, Halt, Step
from fsm_agent.checking.model import base
from fsm_agent.checking.properties import Verdict
from fsm_agent.cli.main import cli
from fsm_agent.declaration.edges import taken_transition
from fsm_agent.declaration.load import load_machine, parse_machine
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.errors import MachineSpecError
from fsm_agent.halt import HaltReason
from fsm_agent.journal.runfile import RunFile, read_run_file
from fsm_agent.journal.store import Event
from fsm_agent.review.replay import replay_events
from fsm_agent.runtime.tool_schema import ArgumentsRefused
from fsm_agent.runtime.tools import ToolRegistry, argument_problem, load_tools

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "check_fixtures"
TESTS = Path(__file__).parent
SHOP = str(FIXTURES / "shop.yaml")
PAYMENTS = ROOT / "examples" / "payments_retry" / "payments.yaml"


def shop_tools() -> ToolRegistry:
    return load_tools("fixture_shop_tools", (str(TESTS),))


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def _moves(rf: RunFile) -> list[Event]:
    return [e for e in rf.events if e.kind == "transition"]


def _edge(x: Event | Step) -> tuple[str | None, str | None, str]:
    if isinstance(x, Event):
        return x.source, x.trigger, x.dest
    return x.source.state, x.trigger, x.dest.state


def _passed(guards: Iterable[Any], names: set[str]) -> bool:
    for g in guards:
        positive, name = base(g.guard)
        if name in names and g.result == positive:
            return True
    return False


def assert_shows(verdict: Verdict, written: Counterexample, tools: ToolRegistry | None) -> None:
    """The run file replays, takes the path, and ends as `verdict` names."""
    assert written.diverged is None, written.diverged
    rf = read_run_file(written.path)
    replay = replay_events(rf.run, rf.events)
    assert replay.ok, replay.summary
    moves, path = _moves(rf), verdict.path
    assert [_edge(e) for e in moves[: len(path)]] == [_edge(s) for s in path]
    spec = parse_machine(rf.run.machine_text, source="run file")
    for e, s in zip(moves, path, strict=False):
        if s.transition is not None and not s.transition.implicit and s.refused is None:
            took = taken_transition(spec, e)
            assert took is not None, _edge(s)
            assert took.index == s.transition.index, _edge(s)
    assert rf.record is not None
    halt, last = rf.record.halt_reason, path[-1]
    if verdict.loop_from is not None:  # round and round until the wall clock ends it
        loop, tail = path[verdict.loop_from :], moves[len(path) :]
        assert halt is HaltReason.WALL_CLOCK
        assert tail[-1].trigger == "budget"
        assert len(tail) - 1 >= len(loop)
        assert [_edge(e) for e in tail[:-1]] == [
            _edge(loop[i % len(loop)]) for i in range(len(tail) - 1)
        ]
        assert "forever" not in verdict.summary
        assert f"until {verdict.ends} does" in verdict.summary
        assert "until the wall clock ends the run (wall_clock)" in written.shows
    elif isinstance(last.dest, Halt):  # ends right there, with that halt
        assert len(moves) == len(path)
        assert halt is last.dest.reason
        assert f"it ends {halt.value} at transition {len(path)}" in written.shows
    else:  # the last transition is the violation (the very edge: checked above)
        e = moves[len(path) - 1]
        if last.after.kind == "tool_call" and last.after.privileged:
            proposal = e.snapshot.proposal
            assert proposal is not None
            assert getattr(proposal, "name", None) in e.snapshot.privileged
            assert not _passed(e.guards, {"privileged_cleared", "halt_lane_local"})
        elif last.transition is not None and last.transition.retry:
            assert e.retry
            assert not _passed(e.guards, {"retries_left"})
        assert f"then ends {halt.value}" in written.shows
    for call in rf.record.tool_calls:
        if tools is not None and call.name in tools:
            tool = tools.get(call.name)
            assert tool is not None
            assert argument_problem(tool, call.args) is None, (call.name, call.args)
        elif ":" not in call.name:  # a user action (`module:function`) takes no arguments
            assert set(call.args) == {"call"}, (call.name, call.args)  # a stand-in's


def write_all(
    spec: MachineSpec, verdicts: Iterable[Verdict], tmp: Path, tools: ToolRegistry | None
) -> list[tuple[Verdict, Counterexample]]:
    caps = {key: int(spec.budgets[key]) for key in ("max_steps", "max_retries")}
    return [
        (v, write_counterexample(spec, v, caps, tmp, tools))
        for v in verdicts
        if not v.proven and v.path
    ]


#: machine, tools module, the refuted properties with a path
CASES = [
    ("cycle", None, ["halts"]),
    ("gap", None, ["no-gap"]),
    ("privileged", None, ["privileged"]),
    ("retry_unmetered", None, ["privileged"]),
    ("tool_loop", None, ["halts", "privileged"]),
    ("shop", None, ["halts", "privileged"]),
    ("shop", "fixture_shop_tools", ["halts", "privileged"]),
]


@pytest.mark.parametrize(
    ("name", "module", "refuted"), CASES, ids=[f"{c[0]}-{c[1] or 'stand-ins'}" for c in CASES]
)
def test_every_counterexample_of_a_fixture_replays_to_its_violation(
    name: str, module: str | None, refuted: list[str], tmp_path: Path
) -> None:
    tools = shop_tools() if module else None
    report = check_paths(str(FIXTURES / f"{name}.yaml"), tools=tools, growth=False)
    written = write_all(report.spec, report.verdicts, tmp_path, tools)
    assert [v.name for v, _ in written] == refuted
    for v, w in written:
        assert_shows(v, w, tools)


def test_a_path_a_user_guard_leaves_is_said_to_be_left(tmp_path: Path) -> None:
    """The checker takes a user guard as free; a real run asks it. Where it decides
    otherwise, even between the same two states, the report says at which step the run
    left the path, and does not claim the run file shows the violation."""
    code, out = invoke("check", str(FIXTURES / "user_guard.yaml"), "-o", str(tmp_path))
    assert code == 1
    assert (
        "(the run leaves the path: step 1: the path takes transition 4, the run took 5 between"
        " the same states (a user guard decides here, as written))"
    ) in out


def test_a_loop_only_the_wall_clock_ends_says_so_and_its_run_file_ends_wall_clock(
    tmp_path: Path,
) -> None:
    """A receipts wait that loops on itself spends nothing: only the wall clock ends it; a
    loop through a tool may also meet the money cap (a tool may report a cost). Neither is
    called a loop forever, and each run file replays to `wall_clock`."""
    code, out = invoke("check", str(FIXTURES / "cycle.yaml"), "-o", str(tmp_path))
    assert code == 1
    assert (
        "a run can loop with no step or retry budget to end it, until the wall clock does:"
        " a loop of 1 transition from 'awaiting_receipts' repeats"
    ) in out
    assert "(steps from 3 repeat until the wall clock ends the run)" in out
    assert "forever" not in out
    run_file = tmp_path / "fixture_cycle-halts.json"
    assert (
        f"  run file: {run_file}\n  replayed, it shows: the loop repeats for 4 more transitions"
        " until the wall clock ends the run (wall_clock)\n"
    ) in out
    code, replayed = invoke("replay", str(run_file))
    assert code == 0
    assert replayed.endswith("replay matches: 9 transitions re-decided, halt wall_clock proven\n")

    code, out = invoke("check", str(FIXTURES / "tool_loop.yaml"), "-o", str(tmp_path))
    assert "until the wall clock or the money cap does: a loop of 1 transition from" in out
    code, replayed = invoke("replay", str(tmp_path / "fixture_tool_loop-halts.json"))
    assert "halt wall_clock proven" in replayed
    code, out = invoke("check", str(FIXTURES / "tool_loop.yaml"), "--json", "-o", str(tmp_path))
    found = {p["name"]: p for p in json.loads(out)["properties"]}
    assert found["halts"]["diverged"] is None
    assert found["halts"]["run_file_shows"][0] == (
        "replayed, it shows: the loop repeats for 4 more transitions until the wall clock ends"
        " the run (wall_clock)"
    )


def test_with_the_tools_module_calls_use_its_tools_with_fitting_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`check --tools`: the counterexample calls the module's tools by name, each with
    arguments that fit its signature (a bounded int, a Literal, a datetime); without it,
    the report and the run's task say the calls are stand-ins with placeholder arguments."""
    monkeypatch.chdir(TESTS)
    code, out = invoke("check", SHOP, "--tools", "fixture_shop_tools", "-o", str(tmp_path))
    assert code == 1
    assert "stand-ins" not in out
    calls = read_run_file(tmp_path / "fixture_shop-privileged.json").record.tool_calls  # type: ignore[union-attr]
    assert {c.name for c in calls} == {"refund"}
    assert calls[0].args == {
        "order_id": "cx-0",
        "amount_cents": 1,
        "reason": "damaged",
        "requested_at": "2024-01-01T00:00:00Z",
    }
    calls = read_run_file(tmp_path / "fixture_shop-halts.json").record.tool_calls  # type: ignore[union-attr]
    assert {(c.name, str(c.args)) for c in calls} == {("lookup_order", "{'order_id': 'cx-0'}")}

    code, out = invoke("check", SHOP, "-o", str(tmp_path / "bare"))
    note = (
        "its tool calls are the checker's stand-ins (lookup_order) with placeholder arguments"
        ' {"call": n}: check with --tools MODULE for calls whose arguments fit the real'
        " tools' signatures"
    )
    assert f"  {note}\n" in out
    rf = read_run_file(tmp_path / "bare" / "fixture_shop-halts.json")
    assert note in rf.run.task
    assert {str(c.args) for c in rf.record.tool_calls} == {"{'call': 0}"}  # type: ignore[union-attr]


# --- the class: every path to every halt, and mutants of the shipped machines ---------------


def _halt_paths(e: Exploration) -> dict[tuple[str, str, str | None], tuple[Step, ...]]:
    """A shortest path to each distinct halt (state, reason, refusing rule)."""
    best: dict[tuple[str, str, str | None], Step] = {}
    for s in e.all_steps():
        if isinstance(s.dest, Halt):
            rule = next((r for _, r, ok in s.log if r.startswith("runtime:") and not ok), None)
            key = (s.dest.state, s.dest.reason.value, rule)
            if key not in best or e.depth[s.source] < e.depth[best[key].source]:
                best[key] = s
    return {k: (*e.path_to(s.source), s) for k, s in sorted(best.items(), key=str)}


#: why a path may not be followed: the contract's call-identity rules are possibilities to
#: the checker (it keeps no calls), and a halt lane off the local tier is refused at start
EXPLAINED = ("it only says the refusal may happen", "halt lane off the local tier")


@pytest.mark.parametrize(
    ("machine", "module"),
    [(str(ROOT / "machines" / "agent_loop.yaml"), None), (str(PAYMENTS), None), (SHOP, "shop")],
    ids=["agent_loop", "payments_retry", "shop-tools"],
)
def test_every_path_to_a_halt_replays_to_that_halt(
    machine: str, module: str | None, tmp_path: Path
) -> None:
    """Whatever path a counterexample is, one that ends in a halt (into done too: the way
    a receipts bypass would be shown) replays to exactly that halt, or the counterexample
    says why not; none is passed off as shown."""
    tools = shop_tools() if module else None
    report = check_paths(machine, tools=tools, growth=False)
    spec = report.spec
    shown = set()
    for key, path in _halt_paths(report.exploration).items():
        v = Verdict("receipts", False, f"a path to {key}", path)
        (written,) = [w for _, w in write_all(spec, [v], tmp_path, tools)]
        if written.diverged is not None:
            assert any(why in written.diverged for why in EXPLAINED), (key, written.diverged)
            assert "as the path does" not in written.shows
            continue
        assert_shows(v, written, tools)
        shown.add(key[1])
    assert {"completed", "wall_clock", "tool_refused", "max_steps", "schema_fail"} <= shown


def _mutants(text: str) -> Iterable[str]:
    """The machine with one edge into a non-model state redirected to another (a loop that
    makes no model call, or none), or with one of those edges dropped (a gap)."""
    lines = text.splitlines(keepends=True)
    edges = [i for i, line in enumerate(lines) if line.startswith("  - {trigger:")]
    for i in edges:
        line = lines[i]
        if "source: drafting" in line:
            continue
        yield "".join(x for j, x in enumerate(lines) if j != i)
        for dest in ("tool_pending", "awaiting_receipts"):
            if f"dest: {dest}" not in line:
                moved = re.sub(r", halt: \w+", "", re.sub(r"dest: \w+", f"dest: {dest}", line))
                yield "".join(moved if j == i else x for j, x in enumerate(lines))


#: every third mutant by default, every one with `-m slow`
SAMPLES = [3, pytest.param(1, marks=pytest.mark.slow)]


@pytest.mark.parametrize("every", SAMPLES, ids=["sample", "all"])
def test_every_counterexample_of_the_canonical_machine_s_mutants_shows_its_violation(
    every: int, tmp_path: Path
) -> None:
    text = (ROOT / "machines" / "agent_loop.yaml").read_text(encoding="utf-8")
    refuted: dict[str, int] = {}
    for n, mutant in enumerate(list(_mutants(text))[::every]):
        try:
            spec = parse_machine(mutant, source=f"mutant{n}.yaml")
        except MachineSpecError:
            continue
        report = check_machine(spec, growth=False)
        for v, written in write_all(spec, report.verdicts, tmp_path / str(n), None):
            assert_shows(v, written, None)
            refuted[v.name] = refuted.get(v.name, 0) + 1
    assert {"halts", "privileged"} <= set(refuted) <= {"halts", "no-gap", "privileged"}
    assert "no-gap" in refuted or every > 1, refuted


@pytest.mark.parametrize("every", SAMPLES, ids=["sample", "all"])
def test_the_payments_mutants_call_capture_payment_with_fitting_arguments(
    every: int, tmp_path: Path
) -> None:
    tools = load_tools("fsm_agent.examples.payments_retry.tools")
    text = PAYMENTS.read_text(encoding="utf-8")
    seen = 0
    for n, mutant in enumerate(list(_mutants(text))[::every]):
        try:
            spec = parse_machine(mutant, source=str(PAYMENTS.parent / f"mutant{n}.yaml"))
        except MachineSpecError:
            continue
        report = check_machine(spec, growth=False)
        for v, written in write_all(spec, report.verdicts, tmp_path / str(n), tools):
            if written.diverged is not None:  # the webhook (a user action) decides as written
                assert "the user action decides here, as written" in written.diverged
                continue
            assert_shows(v, written, tools)
            seen += 1
    assert seen >= 12 // every


def test_a_receipts_counterexample_the_runtime_refuses_is_not_passed_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Were the checker's model to let a run into done that the runtime's success rule
    refuses, its counterexample would not be followed: the run file shows the refusal,
    and the counterexample says where the run left the path instead of claiming it."""
    import fsm_agent.checking.explore as explore

    monkeypatch.setattr(explore, "contract_refusal", lambda c, t, spec: None)
    spec = load_machine(str(FIXTURES / "receipts.yaml"))
    report = check_machine(spec, growth=False)
    (v,) = [v for v in report.verdicts if not v.proven and v.name == "receipts"]
    (pair,) = write_all(spec, [v], tmp_path, None)
    written = pair[1]
    assert written.diverged is not None
    assert f"step {len(v.path)}: the path goes drafting --answer--> done" in written.diverged
    assert "the runtime decided otherwise than the checker's model of it" in written.diverged
    rf = read_run_file(written.path)
    assert rf.record is not None
    assert rf.record.halt_reason is HaltReason.UNGROUNDED_ANSWER
    assert written.shows.startswith("the run ends ungrounded_answer")


# --- arguments that fit ------------------------------------------------------------------


def test_fitting_arguments_fit_every_typed_tool_and_differ_per_call() -> None:
    from fixture_typed_tools import TOOLS

    from fsm_agent.checking.arguments import fitting_arguments

    for tool in TOOLS:
        first = fitting_arguments(tool.fn, tool.name, 0, distinct=True)
        second = fitting_arguments(tool.fn, tool.name, 1, distinct=True)
        assert argument_problem(tool, first) is None, (tool.name, first)
        assert argument_problem(tool, second) is None, (tool.name, second)
        required = tool.fn.__code__.co_argcount - len(tool.fn.__defaults__ or ())
        assert first != second or required == 0, tool.name


def ping() -> None:
    """No parameters."""


def zipcode(code: Annotated[str, msgspec.Meta(pattern="^[0-9]{5}$")]) -> None:
    """A pattern the checker cannot guess."""


def test_a_tool_with_no_parameters_gets_none_and_an_unfittable_one_is_said_plainly() -> None:
    from fsm_agent.checking.arguments import fitting_arguments

    assert fitting_arguments(ping, "ping", 3, distinct=True) == {}
    with pytest.raises(ArgumentsRefused, match=r"no value the checker tried fits parameter 'code'"):
        fitting_arguments(zipcode, "zipcode", 0, distinct=True)
