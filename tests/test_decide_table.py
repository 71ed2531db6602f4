"""The precompiled decide table makes the decisions `transitions` makes: the same chosen edge,
the same guard log (results, order, short-circuit, success-rules gating) and the same
`GuardFailed` for a guard that raises or returns a non-bool — for every shipped machine, on
random states, triggers and snapshots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm_agent.declaration.load import load_machine
from fsm_agent.declaration.machine import CompiledMachine, Decision, GuardFailed
from fsm_agent.declaration.spec import MachineSpec
from tests.test_serde import snapshots

ROOT = Path(__file__).resolve().parent.parent
DECLARATIONS = sorted(
    p
    for folder in ("machines", "examples")
    for p in (ROOT / folder).rglob("*.y*ml")
    if "halt-policy" not in p.name
)
#: Guards that misbehave or always decide one way, spliced into declarations.
FIXTURE_GUARDS = (
    *(
        f"tests.fixture_guards:{name}"
        for name in ("always_true", "always_false", "explodes", "not_a_bool")
    ),
    "not tests.fixture_guards:always_true",
)


def _outcome(decide: Any, state: str, trigger: str, snapshot: Any) -> Decision | tuple[Any, ...]:
    try:
        return decide(state, trigger, snapshot)
    except GuardFailed as exc:
        return ("GuardFailed", str(exc), exc.guard, exc.transition)


def _same(compiled: CompiledMachine, state: str, trigger: str, snapshot: Any) -> None:
    table = _outcome(compiled.decide, state, trigger, snapshot)
    reference = _outcome(compiled.decide_via_machine, state, trigger, snapshot)
    assert table == reference


def _spliced(spec: MachineSpec, data: st.DataObject) -> MachineSpec:
    """`spec` with fixture guards inserted into some edges' guard lists."""
    transitions = []
    for t in spec.transitions:
        guards = list(t.guards)
        for _ in range(data.draw(st.integers(0, 2))):
            at = data.draw(st.integers(0, len(guards)))
            guards.insert(at, data.draw(st.sampled_from(FIXTURE_GUARDS)))
        transitions.append(attrs.evolve(t, guards=tuple(guards)))
    return attrs.evolve(spec, transitions=tuple(transitions))


def _draw_case(spec: MachineSpec, data: st.DataObject) -> tuple[str, str, Any]:
    states = [*(s.name for s in spec.states), "no_such_state"]
    triggers = [*sorted({t.trigger for t in spec.transitions}), "no_such_trigger"]
    state = data.draw(st.sampled_from(states))
    trigger = data.draw(st.sampled_from(triggers))
    snapshot = data.draw(snapshots)
    rules = data.draw(st.sampled_from([1, 2]))
    return state, trigger, attrs.evolve(snapshot, state=state, rules=rules)


def test_every_shipped_declaration_is_covered() -> None:
    names = {p.name for p in DECLARATIONS}
    assert {"agent_loop.yaml", "payments.yaml"} <= names


@pytest.mark.parametrize("path", DECLARATIONS, ids=lambda p: p.name)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_table_decides_as_transitions_does(path: Path, data: st.DataObject) -> None:
    compiled = CompiledMachine(load_machine(str(path)))
    for _ in range(5):
        _same(compiled, *_draw_case(compiled.spec, data))


@pytest.mark.parametrize("path", DECLARATIONS, ids=lambda p: p.name)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_table_decides_as_transitions_does_with_user_guards(
    path: Path, data: st.DataObject
) -> None:
    compiled = CompiledMachine(_spliced(load_machine(str(path)), data))
    for _ in range(5):
        _same(compiled, *_draw_case(compiled.spec, data))


def test_table_candidates_follow_every_declared_edge() -> None:
    """Every (source, trigger) pair has its declared candidates in declared order."""
    for path in DECLARATIONS:
        spec = load_machine(str(path))
        compiled = CompiledMachine(spec)
        for t in spec.transitions:
            edges = compiled._table[(t.source, t.trigger)]
            assert [e.index for e, _ in edges] == [
                c.index for c in spec.candidates(t.source, t.trigger)
            ]


def test_a_raising_guard_fails_the_same_way_through_both() -> None:
    spec = load_machine("agent_loop")
    first = spec.transitions[0]
    broken = attrs.evolve(first, guards=("tests.fixture_guards:explodes", *first.guards))
    compiled = CompiledMachine(attrs.evolve(spec, transitions=(broken, *spec.transitions[1:])))
    snapshot = attrs.evolve(_example_snapshot(), state=first.source)
    with pytest.raises(GuardFailed, match="raised RuntimeError: kaboom") as table:
        compiled.decide(first.source, first.trigger, snapshot)
    with pytest.raises(GuardFailed) as reference:
        compiled.decide_via_machine(first.source, first.trigger, snapshot)
    assert (str(table.value), table.value.transition) == (
        str(reference.value),
        reference.value.transition,
    )


def _example_snapshot() -> Any:
    from tests.test_guards import snap

    return snap()
