"""`entering` builds exactly what `attrs.evolve` would: every field, none forgotten."""

from __future__ import annotations

import attrs

from fsm_agent.runtime.budgets import Budgets, Meters
from fsm_agent.runtime.lanes import ControlPlane, Lane
from fsm_agent.runtime.proposals import ToolCall
from fsm_agent.runtime.snapshot import (
    DoneEffect,
    PendingEffect,
    Receipted,
    Snapshot,
    ToolOutcome,
    entering,
)


def _every_field_set() -> Snapshot:
    return Snapshot(
        state="tool", outcome="tool_call", next_action="tool", clock_ms=7,
        budgets=Budgets(3, 1000, 1.0, 100, 2), meters=Meters(steps_used=1),
        proposal=ToolCall(name="lookup", args={"q": 1}),
        tool=ToolOutcome(name="lookup", args={}, status="returned"), evidence=True,
        grounded=("g",), rules=2, unreceipted=(PendingEffect(1, "w", {}, "why"),),
        unreceipted_omitted=3, receipted=(Receipted(1, "lookup", ("v",)),),
        allowlist=("lookup",), privileged=("p",), halt_lane=Lane(kind="local_fn", tier="paid"),
        control=ControlPlane(), repeats=2, thrash_limit=4, repair="failed", judge="veto",
        effects=(DoneEffect(1, "w", {}, ("i",)),), effects_omitted=1, idempotent=("c",),
        repeatable=("e",), approval=("a",), approved="0" * 64,
        repeat_asks=True,
    )  # fmt: skip


def test_entering_is_evolve_on_every_field() -> None:
    snap, meters = _every_field_set(), Meters(steps_used=2, tool_calls=1)
    built = entering(snap, "receipts", "receipts", meters)
    assert built == attrs.evolve(
        snap, state="receipts", outcome=None, next_action="receipts", meters=meters
    )
    # a field added to Snapshot must be added to `entering` too: every one is set here (the
    # control plane has one value: a distinct instance of it)
    defaults = Snapshot(state="", outcome=None, next_action=None, clock_ms=0,
                        budgets=Budgets(1, 1, 0.0, 1, 0), meters=Meters())  # fmt: skip
    for field in attrs.fields(Snapshot):
        if field.name not in ("outcome", "next_action"):
            ours, default = getattr(snap, field.name), getattr(defaults, field.name)
            assert ours is not default, field.name
            assert ours != default or field.name == "control", field.name
