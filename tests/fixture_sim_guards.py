"""A guard for simulation tests that is not pure (`tests.fixture_sim_guards:flip`): its
value alternates from one call to the next, so a replay of the run decides differently."""

from __future__ import annotations

from fsm_agent.runtime.snapshot import Snapshot

_calls = [0]


def flip(s: Snapshot) -> bool:
    """True, then False, then True, … whatever the snapshot (a broken guard)."""
    _calls[0] += 1
    return _calls[0] % 2 == 1
