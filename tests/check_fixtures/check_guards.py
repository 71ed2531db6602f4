"""A user guard for the check fixtures: the checker takes it as a free boolean."""

from __future__ import annotations

from fsm_agent import Snapshot


def approves(snapshot: Snapshot) -> bool:
    """A reviewer's approval that never comes (so a real run never takes its edge)."""
    return False
