"""Lanes and the local halt check: only a local function may own a control key."""

from __future__ import annotations

from typing import Literal

import attrs

from fsm_agent.errors import HaltPathRefused

LaneKind = Literal["local_fn", "http", "free_server"]
LaneTier = Literal["free", "paid", "local"]

#: Decisions that stop work or commit it. Only a local function may own them.
CONTROL_KEYS = frozenset({"halt", "retry_budget", "schema_repair_vote"})


@attrs.frozen
class Lane:
    """Where an adapter runs: its kind and its price tier."""

    kind: LaneKind
    tier: LaneTier

    def __str__(self) -> str:
        return f"{self.kind}/{self.tier}"


LOCAL = Lane(kind="local_fn", tier="local")


@attrs.frozen
class ControlPlane:
    """Who may own each control key. The only accepted value is `local_only`."""

    halt: str = "local_only"
    retry_budget: str = "local_only"
    schema_repair_vote: str = "local_only"
    #: whether each call of a privileged tool also waits for a person's approval (the
    #: policy's `privileged_tools_require`): none, required, or by_another (the approver is
    #: not who started the run)
    privileged_approval: str = "none"


def halt_lane_refusal(control: ControlPlane, key: str, lane: Lane | None) -> str | None:
    """Why `lane` may not own control `key`, or None when it may. Pure; used by guards."""
    if key not in CONTROL_KEYS:
        return None
    if getattr(control, key) != "local_only":
        return f"control key {key!r} is not local_only"
    if lane is None or lane.tier == "free" or lane.kind == "free_server":
        return "free lane cannot own halt path"
    if lane.kind != "local_fn":
        return "halt lane must be a local function"
    return None


def assert_local_halt(control: ControlPlane, key: str, lane: Lane | None) -> None:
    """Raise `HaltPathRefused` unless a local, non-free function owns control `key`."""
    why = halt_lane_refusal(control, key, lane)
    if why is not None:
        raise HaltPathRefused(why, decision_key=key, lane=lane)
