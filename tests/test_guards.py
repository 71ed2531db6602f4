"""Guards: pure predicates over a frozen Snapshot, resolved by name; and the decision function
that tries candidates in declaration order and records every guard it evaluated."""

from __future__ import annotations

import builtins
import random
import socket
import time
from typing import Any

import attrs
import pytest

from fsm_agent.declaration.load import load_machine, parse_machine
from fsm_agent.declaration.machine import CompiledMachine, Decision, GuardFailed
from fsm_agent.halt import HaltReason
from fsm_agent.journal.store import GuardResult
from fsm_agent.runtime import guards
from fsm_agent.runtime.budgets import Budgets, Meters
from fsm_agent.runtime.guards import BUILTIN_GUARDS, UnknownGuard, resolve_guard
from fsm_agent.runtime.lanes import ControlPlane, Lane
from fsm_agent.runtime.proposals import FinalAnswer, HandoffRequest, Rejection, ToolCall
from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.snapshot import PendingEffect, Receipted, Snapshot, ToolOutcome

BUDGETS = Budgets(max_steps=4, wall_clock_ms=1000, max_cost=1.0, tool_timeout_ms=100, max_retries=2)
FREE_HTTP = Lane(kind="http", tier="free")
FREE_SERVER = Lane(kind="free_server", tier="free")
PAID_HTTP = Lane(kind="http", tier="paid")
LOOKUP = ToolCall(name="lookup", args={"q": "x"})
PAY = ToolCall(name="pay", args={"amount": 12})
OK = (Receipt(status=200, id="cap_1"),)
TRUNCATED = (Receipt(status=200, id=""),)
PARTIAL = (Receipt(status=206, id=""),)


def snap(**kw: Any) -> Snapshot:
    base: dict[str, Any] = {
        "state": "drafting",
        "outcome": None,
        "next_action": "model",
        "clock_ms": 0,
        "budgets": BUDGETS,
        "meters": Meters(),
    }
    return Snapshot(**(base | kw))


def returned(receipts: tuple[Receipt, ...] = OK, final: str | None = None) -> ToolOutcome:
    return ToolOutcome(name="lookup", args={}, status="returned", receipts=receipts, final=final)


def failed(*, retryable: bool) -> ToolOutcome:
    return ToolOutcome(name="lookup", args={}, status="failed", error="boom", retryable=retryable)


VAULT = (
    Receipted(
        step=1, name="lookup", values=("The vault code is tangerine-42.",), ids=("doc:vault-7",)
    ),
)
PENDING = PendingEffect(
    step=2, name="close_ticket", args={"ticket": "T-200"}, why="206 with an empty id"
)


def v2(proposal: Any, receipted: tuple[Receipted, ...], **kw: Any) -> Snapshot:
    """A snapshot decided under success rules 2."""
    return snap(proposal=proposal, receipted=receipted, rules=2, **kw)


# (guard, snapshot, expected)
CASES: list[tuple[str, Snapshot, bool]] = [
    ("within_budget", snap(), True),
    ("within_budget", snap(meters=Meters(elapsed_ms=1000)), False),
    ("within_budget", snap(meters=Meters(cost=1.0)), False),
    ("within_budget", snap(meters=Meters(steps_used=4)), False),
    ("within_budget", snap(meters=Meters(steps_used=4), next_action="tool"), True),
    ("budget_tripped", snap(), False),
    ("budget_tripped", snap(meters=Meters(elapsed_ms=1000)), True),
    ("budget_tripped", snap(meters=Meters(steps_used=4)), True),
    ("budget_tripped", snap(meters=Meters(steps_used=4), next_action="receipts"), False),
    ("tool_allowed", snap(proposal=LOOKUP, allowlist=("lookup",)), True),
    ("tool_allowed", snap(proposal=LOOKUP, allowlist=("other",)), False),
    ("tool_allowed", snap(proposal=LOOKUP), False),
    ("tool_allowed", snap(proposal=FinalAnswer(text="lookup"), allowlist=("lookup",)), False),
    ("tool_allowed", snap(proposal=None, allowlist=("lookup",)), False),
    ("privileged_cleared", snap(proposal=LOOKUP, privileged=("pay",), halt_lane=FREE_HTTP), True),
    ("privileged_cleared", snap(proposal=PAY, privileged=("pay",)), True),
    ("privileged_cleared", snap(proposal=PAY, privileged=("pay",), halt_lane=FREE_HTTP), False),
    ("privileged_cleared", snap(proposal=PAY, privileged=("pay",), halt_lane=FREE_SERVER), False),
    ("privileged_cleared", snap(proposal=PAY, privileged=("pay",), halt_lane=PAID_HTTP), False),
    (
        "privileged_cleared",
        snap(proposal=PAY, privileged=("pay",), control=ControlPlane(halt="allow_free_lane")),
        False,
    ),
    ("privileged_cleared", snap(proposal=FinalAnswer(text="x")), False),
    ("privileged_cleared", snap(proposal=None), False),
    ("halt_lane_local", snap(), True),
    ("halt_lane_local", snap(halt_lane=Lane(kind="local_fn", tier="paid")), True),
    ("halt_lane_local", snap(halt_lane=Lane(kind="local_fn", tier="free")), False),
    ("halt_lane_local", snap(halt_lane=FREE_SERVER), False),
    ("halt_lane_local", snap(halt_lane=Lane(kind="free_server", tier="local")), False),
    ("halt_lane_local", snap(halt_lane=PAID_HTTP), False),
    ("halt_lane_local", snap(control=ControlPlane(halt="anywhere")), False),
    ("receipts_complete", snap(tool=returned(OK)), True),
    ("receipts_complete", snap(tool=returned(TRUNCATED)), False),
    ("receipts_complete", snap(tool=returned(PARTIAL)), False),
    ("receipts_complete", snap(tool=returned(())), False),
    ("receipts_complete", snap(tool=attrs.evolve(failed(retryable=True), receipts=OK)), False),
    ("receipts_complete", snap(tool=None), False),
    ("goal_satisfied", snap(tool=returned(OK, final="42")), True),
    ("goal_satisfied", snap(tool=returned(OK, final=None)), False),
    ("goal_satisfied", snap(tool=returned(OK, final="")), False),
    ("goal_satisfied", snap(tool=returned(TRUNCATED, final="42")), False),
    ("goal_satisfied", snap(tool=None), False),
    ("evidence_complete", snap(evidence=True), True),
    ("evidence_complete", snap(evidence=False), False),
    (
        "answer_grounded",
        snap(proposal=FinalAnswer(text="The password is Hunter2."), grounded=("hunter2",)),
        True,
    ),
    (
        "answer_grounded",
        snap(proposal=FinalAnswer(text="hunter2"), grounded=("pw: hunter2",)),
        True,
    ),
    ("answer_grounded", snap(proposal=FinalAnswer(text=" HUNTER2 !"), grounded=("hunter2",)), True),
    ("answer_grounded", snap(proposal=FinalAnswer(text="hunter2"), grounded=()), False),
    ("answer_grounded", snap(proposal=FinalAnswer(text="hunter2"), grounded=("swordfish",)), False),
    # an empty grounded value must not back every answer
    ("answer_grounded", snap(proposal=FinalAnswer(text="hunter2"), grounded=("", " . ")), False),
    ("answer_grounded", snap(proposal=FinalAnswer(text="?!"), grounded=("hunter2",)), False),
    ("answer_grounded", snap(proposal=LOOKUP, grounded=("lookup",)), False),
    # containment is by whole words: "1" is not grounded by the receipt id "cap_1"
    ("answer_grounded", snap(proposal=FinalAnswer(text="1"), grounded=("cap_1",)), False),
    ("answer_grounded", snap(proposal=FinalAnswer(text="cap"), grounded=("cap_1",)), False),
    (
        "answer_grounded",
        snap(proposal=FinalAnswer(text="captured cap_1"), grounded=("cap_1",)),
        True,
    ),
    ("answer_grounded", snap(proposal=FinalAnswer(text="7"), grounded=("7",)), True),
    ("answer_grounded", snap(proposal=None, grounded=("hunter2",)), False),
    # success rules 2: grounded by returned values, per call; a cited receipt id is not one
    ("answer_grounded", v2(FinalAnswer(text="The code is tangerine-42."), VAULT), True),
    ("answer_grounded", v2(FinalAnswer(text="tangerine-42 (doc:vault-7)"), VAULT), True),
    ("answer_grounded", v2(FinalAnswer(text="The code is 99999 (doc:vault-7)"), VAULT), False),
    ("answer_grounded", v2(FinalAnswer(text="source: doc:vault-7"), VAULT), False),
    ("answer_grounded", v2(FinalAnswer(text="vault code"), VAULT), False),
    ("answer_grounded", v2(FinalAnswer(text="tangerine-42"), ()), False),
    (
        "answer_grounded",
        v2(FinalAnswer(text="tangerine-42"), VAULT, grounded=("tangerine-42",)),
        True,
    ),
    ("answer_grounded", v2(LOOKUP, VAULT), False),
    ("side_effects_receipted", snap(), True),
    ("side_effects_receipted", snap(unreceipted=(PENDING,)), False),
    ("thrashing", snap(thrash_limit=3, repeats=3), True),
    ("thrashing", snap(thrash_limit=3, repeats=5), True),
    ("thrashing", snap(thrash_limit=3, repeats=2), False),
    ("thrashing", snap(thrash_limit=0, repeats=50), False),
    ("retries_left", snap(meters=Meters(retries_used=1)), True),
    ("retries_left", snap(meters=Meters(retries_used=2)), False),
    ("retries_left", snap(budgets=attrs.evolve(BUDGETS, max_retries=0)), False),
    ("error_retryable", snap(tool=failed(retryable=True)), True),
    ("error_retryable", snap(tool=failed(retryable=False)), False),
    ("error_retryable", snap(tool=attrs.evolve(returned(), retryable=True)), False),
    ("error_retryable", snap(tool=None), False),
    ("reply_empty", snap(proposal=Rejection(kind="empty_response", detail="")), True),
    ("reply_empty", snap(proposal=Rejection(kind="schema_fail", detail="")), False),
    ("reply_empty", snap(proposal=HandoffRequest(why="x")), False),
    ("repair_refused", snap(repair="refused"), True),
    ("repair_refused", snap(repair="failed"), False),
    ("repair_refused", snap(), False),
    ("judge_agrees", snap(), True),
    ("judge_agrees", snap(judge="agree"), True),
    ("judge_agrees", snap(judge="ignored"), True),
    ("judge_agrees", snap(judge="veto"), False),
    ("reply_empty", snap(proposal=None), False),
]


@pytest.mark.parametrize(("name", "snapshot", "expected"), CASES)
def test_builtin_guard(name: str, snapshot: Snapshot, expected: bool) -> None:
    result = BUILTIN_GUARDS[name](snapshot)
    assert type(result) is bool
    assert result is expected


def test_every_builtin_guard_has_true_and_false_cases() -> None:
    seen = {(name, expected) for name, _, expected in CASES}
    for name in BUILTIN_GUARDS:
        assert (name, True) in seen, name
        assert (name, False) in seen, name


@pytest.fixture
def no_io(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make clocks, randomness, files and sockets explode while a guard runs."""

    def forbidden(*_: Any, **__: Any) -> Any:
        raise AssertionError("a guard did I/O, read a clock or drew a random number")

    for target, attr in [
        (time, "time"),
        (time, "monotonic"),
        (time, "perf_counter"),
        (time, "time_ns"),
        (time, "monotonic_ns"),
        (random, "random"),
        (builtins, "open"),
        (socket, "socket"),
    ]:
        monkeypatch.setattr(target, attr, forbidden)


@pytest.mark.usefixtures("no_io")
def test_guards_are_pure() -> None:
    for name, snapshot, _ in CASES:
        guard = BUILTIN_GUARDS[name]
        before = attrs.asdict(snapshot)
        first, second = guard(snapshot), guard(snapshot)
        assert first is second, name
        assert attrs.asdict(snapshot) == before, name
        # an equal but distinct snapshot gives the same answer
        assert guard(attrs.evolve(snapshot)) is first, name


# --- resolve_guard ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BUILTIN_GUARDS))
def test_resolve_builtin_by_name(name: str) -> None:
    assert resolve_guard(name) is getattr(guards, name)
    assert resolve_guard(f"  {name} ") is getattr(guards, name)


def test_resolve_negation() -> None:
    negated = resolve_guard("not tool_allowed")
    allowed, refused = snap(proposal=LOOKUP, allowlist=("lookup",)), snap(proposal=LOOKUP)
    assert negated(allowed) is False
    assert negated(refused) is True
    assert negated.__name__ == "not tool_allowed"
    assert resolve_guard("not   not tool_allowed")(allowed) is True


def test_resolve_dotted_user_guard() -> None:
    from tests import fixture_guards

    assert resolve_guard("tests.fixture_guards:always_true") is fixture_guards.always_true
    assert resolve_guard("not tests.fixture_guards:always_true")(snap()) is False


@pytest.mark.parametrize(
    ("ref", "fragment"),
    [
        ("no_such_guard", "unknown guard 'no_such_guard'"),
        ("not no_such_guard", "unknown guard 'no_such_guard'"),
        ("", "unknown guard"),
        ("Tool_Allowed", "unknown guard"),
        ("no_such_pkg_for_fsm_tests:g", "no module named 'no_such_pkg_for_fsm_tests'"),
        ("tests.fixture_guards:missing", "no callable 'missing'"),
        ("tests.fixture_guards:NOT_CALLABLE", "no callable 'NOT_CALLABLE'"),
    ],
)
def test_resolve_unknown_guard(ref: str, fragment: str) -> None:
    with pytest.raises(UnknownGuard) as info:
        resolve_guard(ref)
    assert fragment in str(info.value)


def test_unknown_guard_lists_the_builtins() -> None:
    with pytest.raises(UnknownGuard) as info:
        resolve_guard("nope")
    for name in BUILTIN_GUARDS:
        assert name in str(info.value)


# --- CompiledMachine.decide -------------------------------------------------------------------


@pytest.fixture(scope="module")
def agent_loop() -> CompiledMachine:
    return CompiledMachine(load_machine("agent_loop"))


def g(transition: int, guard: str, result: bool) -> GuardResult:
    return GuardResult(transition=transition, guard=guard, result=result)


ALLOWED = {"proposal": LOOKUP, "allowlist": ("lookup",)}
DECISIONS: list[tuple[str, str, str, Snapshot, int | None, list[GuardResult]]] = [
    (
        "allowed-tool-runs",
        "drafting",
        "tool_call",
        snap(**ALLOWED),
        3,
        [
            g(0, "not tool_allowed", False),
            g(1, "not privileged_cleared", False),
            g(2, "thrashing", False),
        ],
    ),
    (
        "unknown-tool-refused",
        "drafting",
        "tool_call",
        snap(proposal=LOOKUP),
        0,
        [g(0, "not tool_allowed", True)],
    ),
    (
        "privileged-tool-on-free-halt-lane",
        "drafting",
        "tool_call",
        snap(proposal=PAY, allowlist=("pay",), privileged=("pay",), halt_lane=FREE_HTTP),
        1,
        [g(0, "not tool_allowed", False), g(1, "not privileged_cleared", True)],
    ),
    (
        "thrashing",
        "drafting",
        "tool_call",
        snap(**ALLOWED, thrash_limit=2, repeats=2),
        2,
        [
            g(0, "not tool_allowed", False),
            g(1, "not privileged_cleared", False),
            g(2, "thrashing", True),
        ],
    ),
    (
        "grounded-answer-completes",
        "drafting",
        "answer",
        snap(proposal=FinalAnswer(text="42"), grounded=("42",)),
        4,
        [g(4, "answer_grounded", True), g(4, "judge_agrees", True)],
    ),
    (
        # evidence alone is not enough: the answer itself must be backed by a receipted value
        "ungrounded-answer-retries",
        "drafting",
        "answer",
        snap(proposal=FinalAnswer(text="42"), evidence=True, grounded=("17",)),
        5,
        [g(4, "answer_grounded", False), g(5, "retries_left", True)],
    ),
    (
        "ungrounded-answer-without-retries",
        "drafting",
        "answer",
        snap(proposal=FinalAnswer(text="42"), meters=Meters(retries_used=2)),
        7,
        [
            g(4, "answer_grounded", False),
            g(5, "retries_left", False),
            g(6, "not side_effects_receipted", False),
        ],
    ),
    ("handoff", "drafting", "handoff", snap(proposal=HandoffRequest(why="x")), 8, []),
    (
        "empty-reply-no-retries",
        "drafting",
        "rejected",
        snap(proposal=Rejection(kind="empty_response", detail=""), meters=Meters(retries_used=2)),
        11,
        [g(9, "repair_refused", False), g(10, "retries_left", False), g(11, "reply_empty", True)],
    ),
    (
        "schema-fail-no-retries",
        "drafting",
        "rejected",
        snap(proposal=Rejection(kind="schema_fail", detail=""), meters=Meters(retries_used=2)),
        12,
        [g(9, "repair_refused", False), g(10, "retries_left", False), g(11, "reply_empty", False)],
    ),
    (
        # the second guard of a candidate is not evaluated once the first fails
        "non-retryable-tool-error",
        "tool_pending",
        "tool_failed",
        snap(state="tool_pending", tool=failed(retryable=False)),
        16,
        [g(14, "error_retryable", False), g(15, "error_retryable", False)],
    ),
    (
        "retryable-tool-error-with-retries",
        "tool_pending",
        "tool_failed",
        snap(state="tool_pending", tool=failed(retryable=True)),
        14,
        [g(14, "error_retryable", True), g(14, "retries_left", True)],
    ),
    (
        "retryable-tool-error-without-retries",
        "tool_pending",
        "tool_failed",
        snap(state="tool_pending", tool=failed(retryable=True), meters=Meters(retries_used=2)),
        15,
        [
            g(14, "error_retryable", True),
            g(14, "retries_left", False),
            g(15, "error_retryable", True),
        ],
    ),
    (
        "goal-satisfied",
        "awaiting_receipts",
        "collected",
        snap(state="awaiting_receipts", tool=returned(OK, final="42")),
        18,
        [g(18, "goal_satisfied", True), g(18, "judge_agrees", True)],
    ),
    (
        "truncated-receipts-do-not-halt",
        "awaiting_receipts",
        "collected",
        snap(state="awaiting_receipts", tool=returned(TRUNCATED, final="42")),
        19,
        [g(18, "goal_satisfied", False)],
    ),
    (
        "budget-tripped",
        "drafting",
        "budget",
        snap(meters=Meters(steps_used=4)),
        20,
        [g(20, "budget_tripped", True)],
    ),
    (
        "budget-not-tripped",
        "awaiting_receipts",
        "budget",
        snap(state="awaiting_receipts", meters=Meters(steps_used=4), next_action="receipts"),
        None,
        [g(22, "budget_tripped", False)],
    ),
    (
        # success rules 2: a side-effecting call without receipts blocks done, whatever else
        "answer-while-a-write-lacks-receipts-retries",
        "drafting",
        "answer",
        v2(FinalAnswer(text="The code is tangerine-42."), VAULT, unreceipted=(PENDING,)),
        5,
        [g(4, "side_effects_receipted", False), g(5, "retries_left", True)],
    ),
    (
        "answer-while-a-write-lacks-receipts-hands-off",
        "drafting",
        "answer",
        v2(
            FinalAnswer(text="The code is tangerine-42."),
            VAULT,
            unreceipted=(PENDING,),
            meters=Meters(retries_used=2),
        ),
        6,
        [
            g(4, "side_effects_receipted", False),
            g(5, "retries_left", False),
            g(6, "not side_effects_receipted", True),
        ],
    ),
    (
        "grounded-answer-completes-under-rules-2",
        "drafting",
        "answer",
        v2(FinalAnswer(text="The code is tangerine-42."), VAULT),
        4,
        [
            g(4, "side_effects_receipted", True),
            g(4, "answer_grounded", True),
            g(4, "judge_agrees", True),
        ],
    ),
    (
        "goal-with-a-pending-write-waits",
        "awaiting_receipts",
        "collected",
        snap(
            state="awaiting_receipts",
            tool=returned(OK, final="42"),
            rules=2,
            unreceipted=(PENDING,),
        ),
        19,
        [g(18, "side_effects_receipted", False)],
    ),
    ("trigger-not-from-this-state", "drafting", "collected", snap(), None, []),
    ("unknown-trigger", "drafting", "no_such_trigger", snap(), None, []),
    ("from-a-terminal-state", "done", "answer", snap(state="done"), None, []),
]


@pytest.mark.parametrize(
    ("state", "trigger", "snapshot", "index", "log"),
    [pytest.param(*case[1:], id=case[0]) for case in DECISIONS],
)
def test_decide_first_passing_candidate_in_order(
    agent_loop: CompiledMachine,
    state: str,
    trigger: str,
    snapshot: Snapshot,
    index: int | None,
    log: list[GuardResult],
) -> None:
    decision = agent_loop.decide(state, trigger, snapshot)
    assert decision.guards == tuple(log)
    if index is None:
        assert decision.transition is None
    else:
        assert decision.transition == agent_loop.spec.transitions[index]
        assert decision.transition.source == state
        assert decision.transition.trigger == trigger
    # deciding is pure: the same snapshot gives the same decision
    assert agent_loop.decide(state, trigger, snapshot) == decision


def test_check_budget_is_the_implicit_budget_transition(agent_loop: CompiledMachine) -> None:
    decision = agent_loop.check_budget("tool_pending", snap(meters=Meters(elapsed_ms=1000)))
    assert decision.transition is not None
    assert decision.transition.implicit
    assert (decision.transition.source, decision.transition.dest) == (
        "tool_pending",
        "budget_exhausted",
    )
    assert decision.guards == (g(21, "budget_tripped", True),)


def test_privileged_tool_refused_on_free_lane_ends_as_halt_path_refused(
    agent_loop: CompiledMachine,
) -> None:
    snapshot = snap(proposal=PAY, allowlist=("pay",), privileged=("pay",), halt_lane=FREE_SERVER)
    decision = agent_loop.decide("drafting", "tool_call", snapshot)
    assert decision.transition is not None
    assert decision.transition.halt is HaltReason.HALT_PATH_REFUSED
    assert decision.transition.dest == "handoff"


U = "tests.fixture_guards:"  # prefix of the user guards in tests/fixture_guards.py


def _user_guard_machine(text: str, first: str, second: str) -> CompiledMachine:
    text = text.replace(
        "guards: [evidence_complete], halt: completed}",
        f"guards: ['{first}'], halt: completed}}",
    ).replace(
        "dest: handoff, halt: schema_fail}",
        f"dest: handoff, guards: ['{second}'], halt: schema_fail}}",
    )
    return CompiledMachine(parse_machine(text, source="user-guards.yaml"))


@pytest.mark.parametrize(
    ("first", "second", "dest", "log"),
    [
        ("always_true", "always_true", "done", [g(0, U + "always_true", True)]),
        (
            "always_false",
            "always_true",
            "handoff",
            [g(0, U + "always_false", False), g(1, U + "always_true", True)],
        ),
        (
            "always_false",
            "always_false",
            None,
            [g(0, U + "always_false", False), g(1, U + "always_false", False)],
        ),
    ],
)
def test_decide_with_user_guards_in_declaration_order(
    minimal_machine_text: str, first: str, second: str, dest: str | None, log: list[GuardResult]
) -> None:
    machine = _user_guard_machine(minimal_machine_text, U + first, U + second)
    decision = machine.decide("drafting", "answer", snap())
    assert (None if decision.transition is None else decision.transition.dest) == dest
    assert decision == Decision(transition=decision.transition, guards=tuple(log))


@pytest.mark.parametrize(
    ("broken", "fragment"),
    [("explodes", "raised RuntimeError: kaboom"), ("not_a_bool", "returned 'yes', not a bool")],
)
@pytest.mark.parametrize("position", ["first", "second"])
def test_broken_guard_raises_guard_failed_naming_it(
    minimal_machine_text: str, broken: str, fragment: str, position: str
) -> None:
    ref = U + broken
    if position == "first":
        machine, index = _user_guard_machine(minimal_machine_text, ref, "evidence_complete"), 0
    else:
        machine = _user_guard_machine(minimal_machine_text, U + "always_false", ref)
        index = 1
    with pytest.raises(GuardFailed) as info:
        machine.decide("drafting", "answer", snap())
    err = info.value
    assert err.guard == ref
    assert err.transition == index
    assert ref in str(err)
    assert fragment in str(err)


def test_decide_does_not_keep_runs_as_models(agent_loop: CompiledMachine) -> None:
    before = list(agent_loop.machine.models)
    for _ in range(3):
        agent_loop.decide("drafting", "answer", snap(proposal=FinalAnswer(text="x")))
    assert list(agent_loop.machine.models) == before
