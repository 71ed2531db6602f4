"""The declaration loader: the canonical machine loads, and every invalid declaration fails at
load time with the file (and line where known) and the key path, in the message and on the
error's `.source` / `.key`."""

from __future__ import annotations

import hashlib
import importlib.resources
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from fsm_agent.declaration.load import load_machine, parse_machine
from fsm_agent.declaration.machine import CompiledMachine
from fsm_agent.declaration.spec import BUDGET_TRIGGER, MachineSpec
from fsm_agent.errors import FsmAgentError, InvalidInputError, MachineSpecError
from fsm_agent.halt import TERMINAL_STATE, TERMINAL_STATES, HaltReason
from fsm_agent.runtime.guards import resolve_guard

ROOT = Path(__file__).resolve().parent.parent

MACHINES = Path(str(importlib.resources.files("fsm_agent.machines")))
CANONICAL = MACHINES / "agent_loop.yaml"

T0 = "{trigger: answer, source: drafting, dest: done, guards: [evidence_complete], halt: completed}"
T1 = "{trigger: answer, source: drafting, dest: handoff, halt: schema_fail}"
T2 = "{trigger: handoff, source: drafting, dest: handoff, halt: handoff_requested}"


def line_of(text: str, needle: str) -> int:
    """1-based number of the first line of `text` containing `needle`."""
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in the declaration")


def edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"{old!r} must occur exactly once in the base text"
    return text.replace(old, new)


def add_state(text: str, line: str) -> str:
    return edit(text, "  done: {terminal: true}\n", f"{line}\n  done: {{terminal: true}}\n")


def add_transition(text: str, body: str) -> str:
    return text + f"  - {body}\n"


def load_error(write: Callable[..., Path], text: str) -> tuple[Path, MachineSpecError]:
    path = write(text)
    with pytest.raises(MachineSpecError) as info:
        load_machine(str(path))
    return path, info.value


# --- the canonical machine ------------------------------------------------------------------


def test_canonical_agent_loop_loads_with_its_states() -> None:
    spec = load_machine("agent_loop")

    assert spec.name == "agent_loop"
    assert spec.initial == "drafting"
    assert [s.name for s in spec.states] == [
        "drafting",
        "tool_pending",
        "awaiting_receipts",
        "done",
        "budget_exhausted",
        "handoff",
    ]
    assert {s.name for s in spec.states if s.terminal} == set(TERMINAL_STATES)
    assert all(s.action is None for s in spec.states if s.terminal)
    assert {s.name: s.action for s in spec.states if not s.terminal} == {
        "drafting": "model",
        "tool_pending": "tool",
        "awaiting_receipts": "receipts",
    }
    assert dict(spec.budgets) == {
        "max_steps": 8,
        "wall_clock_ms": 15000,
        "max_cost": 1.0,
        "tool_timeout_ms": 5000,
        "max_retries": 2,
    }
    assert spec.thrash_limit == 0
    assert spec.tools is None


def test_canonical_agent_loop_has_an_implicit_budget_transition_from_each_non_terminal() -> None:
    spec = load_machine("agent_loop")
    implicit = [t for t in spec.transitions if t.implicit]
    declared = [t for t in spec.transitions if not t.implicit]

    assert sorted(t.source for t in implicit) == sorted(
        s.name for s in spec.states if not s.terminal
    )
    for t in implicit:
        assert t.trigger == BUDGET_TRIGGER
        assert t.dest == "budget_exhausted"
        assert t.guards == ("budget_tripped",)
        assert t.halt is None
    # implicit transitions come after the declared ones, indices match positions
    assert spec.transitions == (*declared, *implicit)
    assert [t.index for t in spec.transitions] == list(range(len(spec.transitions)))
    assert not any(t.trigger == BUDGET_TRIGGER for t in declared)


def test_canonical_agent_loop_every_halt_matches_its_terminal_dest() -> None:
    spec = load_machine("agent_loop")
    for t in spec.transitions:
        if t.implicit:
            continue
        dest_terminal = spec.state(t.dest).terminal
        assert (t.halt is not None) == dest_terminal, t
        if t.halt is not None:
            assert TERMINAL_STATE[t.halt] == t.dest
        for ref in t.guards:
            assert callable(resolve_guard(ref))


def test_canonical_agent_loop_records_its_text_and_hash() -> None:
    spec = load_machine("agent_loop")
    text = CANONICAL.read_text(encoding="utf-8")
    assert spec.text == text
    assert spec.sha256 == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert spec.source == str(CANONICAL)


def test_candidates_come_in_declaration_order() -> None:
    spec = load_machine("agent_loop")
    assert [t.index for t in spec.candidates("drafting", "tool_call")] == [0, 1, 2, 3]
    assert spec.candidates("drafting", "collected") == ()
    with pytest.raises(KeyError):
        spec.state("nowhere")


@pytest.mark.parametrize(
    "path", sorted(MACHINES.glob("*.yaml")), ids=lambda p: p.stem if isinstance(p, Path) else p
)
def test_every_declared_machine_loads_by_name(path: Path) -> None:
    spec = load_machine(path.stem)
    assert isinstance(spec, MachineSpec)
    assert spec.source == str(path)


# --- lookup -----------------------------------------------------------------------------------


def test_lookup_by_name_and_by_path_give_the_same_spec() -> None:
    assert load_machine("agent_loop") == load_machine(str(CANONICAL))


def test_lookup_by_path_outside_the_package(
    machine_yaml: Callable[..., Path], minimal_machine_text: str
) -> None:
    path = machine_yaml(minimal_machine_text, "mine.yaml")
    spec = load_machine(str(path))
    assert spec.name == "minimal"
    assert spec.source == str(path)
    # parse_machine on the same text differs only in where it says it came from
    assert parse_machine(minimal_machine_text, source="elsewhere") == attrs.evolve(
        spec, source="elsewhere"
    )


def test_minimal_machine_gets_one_implicit_budget_transition(minimal_machine_text: str) -> None:
    spec = parse_machine(minimal_machine_text, source="minimal.yaml")
    implicit = [t for t in spec.transitions if t.implicit]
    assert [(t.source, t.trigger, t.dest) for t in implicit] == [
        ("drafting", "budget", "budget_exhausted")
    ]
    assert implicit[0].index == 3


def test_unknown_machine_name_lists_the_known_ones() -> None:
    with pytest.raises(MachineSpecError) as info:
        load_machine("no_such_machine")
    err = info.value
    assert err.source == "no_such_machine"
    assert "no_such_machine" in str(err)
    assert "agent_loop" in str(err)
    assert isinstance(err, InvalidInputError)
    assert isinstance(err, FsmAgentError)


@pytest.mark.parametrize("name", ["missing.yaml", "missing.yml", "sub/dir/missing"])
def test_missing_machine_file_names_the_path(tmp_path: Path, name: str) -> None:
    ref = str(tmp_path / name)
    with pytest.raises(MachineSpecError, match="no such machine file") as info:
        load_machine(ref)
    assert info.value.source == ref


def test_unreadable_machine_file_names_the_path(machine_yaml: Callable[..., Path]) -> None:
    path = machine_yaml("")
    path.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(MachineSpecError, match="cannot read") as info:
        load_machine(str(path))
    assert info.value.source == str(path)


# --- invalid declarations ---------------------------------------------------------------------

# (id, mutate, key, needle for the expected line, fragment of the message)
Mutation = Callable[[str], str]
ERROR_CASES: list[tuple[str, Mutation, str, str, str]] = [
    (
        "unknown-guard",
        lambda t: edit(t, "[evidence_complete]", "[evidence_complete, no_such_guard]"),
        "$.transitions[0].guards[1]",
        "no_such_guard",
        "unknown guard 'no_such_guard'",
    ),
    (
        "unknown-negated-guard",
        lambda t: edit(t, "[evidence_complete]", "[not no_such_guard]"),
        "$.transitions[0].guards[0]",
        "no_such_guard",
        "unknown guard 'no_such_guard'",
    ),
    (
        "guards-not-a-list-of-names",
        lambda t: edit(t, "[evidence_complete]", "[1]"),
        "$.transitions[0].guards",
        "guards: [1]",
        "guards must be a list of guard names",
    ),
    (
        "unresolvable-user-guard-attribute",
        lambda t: edit(t, "[evidence_complete]", "['tests.fixture_guards:no_such_guard']"),
        "$.transitions[0].guards[0]",
        "no_such_guard",
        "no_such_guard",
    ),
    (
        "user-guard-not-callable",
        lambda t: edit(t, "[evidence_complete]", "['tests.fixture_guards:NOT_CALLABLE']"),
        "$.transitions[0].guards[0]",
        "NOT_CALLABLE",
        "NOT_CALLABLE",
    ),
    (
        "unresolvable-user-guard-module",
        lambda t: edit(t, "[evidence_complete]", "['no_such_pkg_for_fsm_tests.mod:guard']"),
        "$.transitions[0].guards[0]",
        "no_such_pkg_for_fsm_tests",
        "no_such_pkg_for_fsm_tests",
    ),
    (
        "user-guard-with-empty-module",
        lambda t: edit(t, "[evidence_complete]", "[':always_true']"),
        "$.transitions[0].guards[0]",
        ":always_true",
        "always_true",
    ),
    (
        "user-guard-with-relative-module",
        lambda t: edit(t, "[evidence_complete]", "['.fixture_guards:always_true']"),
        "$.transitions[0].guards[0]",
        ".fixture_guards",
        "fixture_guards",
    ),
    (
        "unknown-dest-state",
        lambda t: edit(t, "dest: done, guards", "dest: finished, guards"),
        "$.transitions[0].dest",
        "dest: finished",
        "unknown state 'finished'",
    ),
    (
        "unknown-source-state",
        lambda t: edit(
            t, "trigger: handoff, source: drafting", "trigger: handoff, source: nowhere"
        ),
        "$.transitions[2].source",
        "source: nowhere",
        "unknown state 'nowhere'",
    ),
    (
        "transition-out-of-terminal",
        lambda t: add_transition(
            t, "{trigger: answer, source: done, dest: handoff, halt: schema_fail}"
        ),
        "$.transitions[3].source",
        "source: done",
        "transition out of terminal state 'done'",
    ),
    (
        "non-terminal-without-a-way-out",
        lambda t: add_transition(
            add_state(t, "  stuck: {action: model}"),
            "{trigger: handoff, source: drafting, dest: stuck}",
        ),
        "$.states.stuck",
        "stuck: {action",
        "'stuck' has no way out",
    ),
    (
        "unreachable-state",
        lambda t: add_transition(
            add_state(t, "  orphan: {action: model}"),
            "{trigger: handoff, source: orphan, dest: handoff, halt: handoff_requested}",
        ),
        "$.states.orphan",
        "orphan: {action",
        "'orphan' is unreachable from 'drafting'",
    ),
    (
        "missing-terminal-done",
        lambda t: edit(t, "  done: {terminal: true}\n", ""),
        "$.states",
        "states:",
        "missing terminal state 'done'",
    ),
    (
        "missing-terminal-budget_exhausted",
        lambda t: edit(t, "  budget_exhausted: {terminal: true}\n", ""),
        "$.states",
        "states:",
        "missing terminal state 'budget_exhausted'",
    ),
    (
        "missing-terminal-handoff",
        lambda t: edit(t, "  handoff: {terminal: true}\n", ""),
        "$.states",
        "states:",
        "missing terminal state 'handoff'",
    ),
    (
        "terminal-name-declared-non-terminal",
        lambda t: edit(t, "  done: {terminal: true}", "  done: {action: model}"),
        "$.states",
        "states:",
        "missing terminal state 'done'",
    ),
    (
        "extra-terminal-state",
        lambda t: add_state(t, "  finished: {terminal: true}"),
        "$.states.finished",
        "finished:",
        "terminal state 'finished' is not one of done, budget_exhausted, handoff",
    ),
    (
        "terminal-state-with-action",
        lambda t: edit(t, "  done: {terminal: true}", "  done: {terminal: true, action: model}"),
        "$.states.done.action",
        "done: {terminal",
        "a terminal state has no action",
    ),
    (
        "budget-negative",
        lambda t: edit(t, "  max_steps: 3", "  max_steps: -1"),
        "$.budgets.max_steps",
        "max_steps:",
        "must not be negative",
    ),
    (
        "budget-zero",
        lambda t: edit(t, "  max_steps: 3", "  max_steps: 0"),
        "$.budgets.max_steps",
        "max_steps:",
        "must be positive",
    ),
    (
        "budget-non-numeric",
        lambda t: edit(t, "  max_steps: 3", "  max_steps: eight"),
        "$.budgets.max_steps",
        "max_steps:",
        "must be a number",
    ),
    (
        "budget-quoted-number",
        lambda t: edit(t, "  max_steps: 3", "  max_steps: '3'"),
        "$.budgets.max_steps",
        "max_steps:",
        "must be a number",
    ),
    (
        "budget-boolean",
        lambda t: edit(t, "  max_steps: 3", "  max_steps: true"),
        "$.budgets.max_steps",
        "max_steps:",
        "must be a number",
    ),
    (
        "budget-nan",
        lambda t: edit(t, "  max_steps: 3", "  max_steps: .nan"),
        "$.budgets.max_steps",
        "max_steps:",
        "must be finite",
    ),
    (
        "budget-fractional-steps",
        lambda t: edit(t, "  max_steps: 3", "  max_steps: 2.5"),
        "$.budgets.max_steps",
        "max_steps:",
        "whole number",
    ),
    (
        "budget-infinite-cost",
        lambda t: edit(t, "  max_cost: 0.5", "  max_cost: .inf"),
        "$.budgets.max_cost",
        "max_cost:",
        "must be finite",
    ),
    (
        "budget-unknown-name",
        lambda t: edit(t, "  max_retries: 1\n", "  max_retries: 1\n  max_tokens: 5\n"),
        "$.budgets.max_tokens",
        "max_tokens:",
        "unknown budget",
    ),
    (
        "budget-missing",
        lambda t: edit(t, "  max_steps: 3\n", ""),
        "$.budgets.max_steps",
        "budgets:",
        "required field missing",
    ),
    (
        "budgets-block-missing",
        lambda t: edit(
            t,
            "budgets:\n  max_steps: 3\n  wall_clock_ms: 1000\n  max_cost: 0.5\n"
            "  tool_timeout_ms: 100\n  max_retries: 1\n",
            "",
        ),
        "$.budgets",
        "name: minimal",
        "'budgets' missing",
    ),
    (
        "unknown-top-level-key",
        lambda t: t + "colour: blue\n",
        "$.colour",
        "colour:",
        "unknown key 'colour'",
    ),
    (
        "unknown-transition-key",
        lambda t: edit(t, "halt: schema_fail}", "halt: schema_fail, when: later}"),
        "$.transitions[1].when",
        "when: later",
        "unknown key 'when'",
    ),
    (
        "trigger-the-action-never-produces",
        lambda t: edit(
            t, "trigger: handoff, source: drafting", "trigger: collected, source: drafting"
        ),
        "$.transitions[2].trigger",
        "trigger: collected",
        "never produces 'collected'",
    ),
    (
        "reserved-trigger-budget",
        lambda t: edit(
            t, "trigger: handoff, source: drafting", "trigger: budget, source: drafting"
        ),
        "$.transitions[2].trigger",
        "trigger: budget",
        "reserved",
    ),
    (
        "into-terminal-without-halt",
        lambda t: edit(t, "dest: handoff, halt: schema_fail}", "dest: handoff}"),
        "$.transitions[1].halt",
        "dest: handoff}",
        "needs 'halt:'",
    ),
    (
        "halt-reason-of-another-terminal",
        lambda t: edit(t, "halt: schema_fail", "halt: completed"),
        "$.transitions[1].halt",
        "dest: handoff, halt: completed",
        "'completed' ends in 'done', not 'handoff'",
    ),
    (
        "halt-budget-reason-into-done",
        lambda t: edit(t, "halt: completed", "halt: max_steps"),
        "$.transitions[0].halt",
        "halt: max_steps",
        "'max_steps' ends in 'budget_exhausted', not 'done'",
    ),
    (
        "halt-reason-outside-the-enum",
        lambda t: edit(t, "halt: schema_fail", "halt: almost"),
        "$.transitions[1].halt",
        "halt: almost",
        "'almost'",
    ),
    (
        "halt-on-non-terminal-dest",
        lambda t: add_transition(
            t, "{trigger: rejected, source: drafting, dest: drafting, halt: schema_fail}"
        ),
        "$.transitions[3].halt",
        "trigger: rejected",
        "only a transition into a terminal state has a halt reason",
    ),
    (
        "retry-into-terminal",
        lambda t: edit(t, "halt: handoff_requested}", "halt: handoff_requested, retry: true}"),
        "$.transitions[2].retry",
        "retry: true",
        "retry must be true or false",
    ),
    (
        "user-action-does-not-import",
        lambda t: edit(t, "{action: model}", "{action: 'no_such_pkg_for_fsm_tests.acts:act'}"),
        "$.states.drafting.action",
        "no_such_pkg_for_fsm_tests",
        "no module named",
    ),
    (
        "user-action-missing-function",
        lambda t: edit(t, "{action: model}", "{action: 'tests.fixture_guards:no_such_action'}"),
        "$.states.drafting.action",
        "no_such_action",
        "no callable 'no_such_action'",
    ),
    (
        "user-action-with-empty-module",
        lambda t: edit(t, "{action: model}", "{action: ':user_action'}"),
        "$.states.drafting.action",
        ":user_action",
        "user_action",
    ),
    (
        "unknown-builtin-action",
        lambda t: edit(t, "{action: model}", "{action: modle}"),
        "$.states.drafting.action",
        "action: modle",
        "needs an action",
    ),
    (
        "initial-not-declared",
        lambda t: edit(t, "initial: drafting", "initial: nowhere"),
        "$.initial",
        "initial: nowhere",
        "'initial' must name a declared state",
    ),
    (
        "initial-terminal",
        lambda t: edit(t, "initial: drafting", "initial: done"),
        "$.initial",
        "initial: done",
        "cannot be terminal",
    ),
    (
        "name-missing",
        lambda t: edit(t, "name: minimal\n", ""),
        "$.name",
        "description:",
        "required field 'name'",
    ),
    (
        "thrash-limit-negative",
        lambda t: t + "thrash_limit: -1\n",
        "$.thrash_limit",
        "thrash_limit:",
        "thrash_limit must be a whole number",
    ),
    (
        "tools-not-a-list",
        lambda t: t + "tools: lookup\n",
        "$.tools",
        "tools:",
        "tools must be a list",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "key", "needle", "fragment"),
    [pytest.param(*case[1:], id=case[0]) for case in ERROR_CASES],
)
def test_invalid_declaration_names_file_line_and_key(
    machine_yaml: Callable[..., Path],
    minimal_machine_text: str,
    mutate: Mutation,
    key: str,
    needle: str,
    fragment: str,
) -> None:
    text = mutate(minimal_machine_text)
    path, err = load_error(machine_yaml, text)

    assert err.key == key
    assert err.source == f"{path}:{line_of(text, needle)}"
    assert fragment in err.detail
    message = str(err)
    assert str(path) in message
    assert key in message
    assert fragment in message


def test_bad_yaml_syntax_names_the_line(
    machine_yaml: Callable[..., Path], minimal_machine_text: str
) -> None:
    text = edit(
        minimal_machine_text,
        "description: smallest valid machine",
        "description: smallest: valid machine",
    )
    path, err = load_error(machine_yaml, text)
    assert err.source == f"{path}:{line_of(text, 'smallest: valid')}"
    assert err.key == "$"
    assert "not valid YAML" in str(err)
    assert f"{path}:2" in str(err)


@pytest.mark.parametrize(
    "text", ["- a\n- list\n", "just a sentence\n", "42\n", ""], ids=["list", "str", "int", "empty"]
)
def test_non_mapping_document_is_refused(machine_yaml: Callable[..., Path], text: str) -> None:
    path, err = load_error(machine_yaml, text)
    assert err.key == "$"
    assert err.source.startswith(str(path))
    assert "must be a mapping" in str(err)


# --- guard and action references that do resolve ---------------------------------------------


def test_negated_builtin_guard_resolves(minimal_machine_text: str) -> None:
    text = edit(minimal_machine_text, "[evidence_complete]", "[not evidence_complete]")
    spec = parse_machine(text, source="m.yaml")
    # the edge halts completed: the loader puts the receipts rule first
    assert spec.transitions[0].guards == ("side_effects_receipted", "not evidence_complete")


def test_user_guard_by_dotted_reference_resolves(minimal_machine_text: str) -> None:
    ref = "tests.fixture_guards:always_true"
    text = edit(minimal_machine_text, "[evidence_complete]", f"['{ref}', 'not {ref}']")
    spec = parse_machine(text, source="m.yaml")
    assert spec.transitions[0].guards == ("side_effects_receipted", ref, f"not {ref}")


@pytest.mark.parametrize(
    "machine", ["agent_loop", str(ROOT / "examples" / "payments_retry" / "payments.yaml")]
)
def test_every_edge_that_halts_completed_carries_the_receipts_rule(machine: str) -> None:
    spec = load_machine(machine)
    completed = [t for t in spec.transitions if t.halt is HaltReason.COMPLETED]
    assert completed
    assert all(t.guards[0] == "side_effects_receipted" for t in completed)
    others = [t for t in spec.transitions if t.halt is not HaltReason.COMPLETED]
    assert all("side_effects_receipted" not in t.guards for t in others)


def test_a_declared_receipts_rule_is_not_added_twice(minimal_machine_text: str) -> None:
    text = edit(
        minimal_machine_text, "[evidence_complete]", "[evidence_complete, side_effects_receipted]"
    )
    spec = parse_machine(text, source="m.yaml")
    assert spec.transitions[0].guards == ("evidence_complete", "side_effects_receipted")


def test_a_spec_built_by_hand_without_the_receipts_rule_is_refused(
    minimal_machine_text: str,
) -> None:
    spec = parse_machine(minimal_machine_text, source="m.yaml")
    bare = tuple(
        attrs.evolve(t, guards=tuple(g for g in t.guards if g != "side_effects_receipted"))
        for t in spec.transitions
    )
    with pytest.raises(MachineSpecError, match="without the guard 'side_effects_receipted'"):
        CompiledMachine(attrs.evolve(spec, transitions=bare))


def test_guard_refused_needs_a_user_guard_to_name(minimal_machine_text: str) -> None:
    text = edit(
        minimal_machine_text,
        "dest: handoff, halt: schema_fail}",
        "dest: handoff, halt: guard_refused}",
    )
    with pytest.raises(MachineSpecError, match="halt 'guard_refused' names the user guard"):
        parse_machine(text, source="m.yaml")


def test_user_action_resolves_and_may_fire_any_trigger(minimal_machine_text: str) -> None:
    ref = "tests.fixture_guards:user_action"
    text = edit(minimal_machine_text, "{action: model}", f"{{action: '{ref}'}}")
    text = edit(text, "trigger: handoff, source: drafting", "trigger: finished, source: drafting")
    spec = parse_machine(text, source="m.yaml")
    assert spec.state("drafting").action == ref
    assert spec.transitions[2].trigger == "finished"


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("  max_steps: 3\n", "  max_steps: 3\n  max_steps: 300\n", "max_steps"),
        ("initial: drafting\n", "initial: drafting\ninitial: done\n", "initial"),
    ],
)
def test_duplicate_keys_are_refused_not_last_one_wins(
    machine_yaml: Callable[..., Path], minimal_machine_text: str, old: str, new: str, key: str
) -> None:
    text = edit(minimal_machine_text, old, new)
    path, err = load_error(machine_yaml, text)
    assert f"found duplicate key {key!r}" in str(err)
    assert err.source.startswith(f"{path}:")
