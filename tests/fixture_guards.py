"""User guards and a user action for test declarations (`tests.fixture_guards:<name>`).

Each is a plain function of a `Snapshot`, as a guard declared in YAML would be.
"""

from __future__ import annotations

from fsm_agent.runtime.actions import ActionResult
from fsm_agent.runtime.snapshot import Snapshot

#: Resolves, but is not callable: a reference to it must fail at load time.
NOT_CALLABLE = 42


def always_true(s: Snapshot) -> bool:
    """Passes on every snapshot."""
    return True


def always_false(s: Snapshot) -> bool:
    """Fails on every snapshot."""
    return False


def explodes(s: Snapshot) -> bool:
    """A broken guard: raises instead of deciding."""
    raise RuntimeError("kaboom")


def not_a_bool(s: Snapshot) -> bool:
    """A broken guard: returns a truthy non-bool."""
    return "yes"  # type: ignore[return-value]


def user_action(snapshot: Snapshot) -> ActionResult:
    """A user action for a non-terminal state (`action: tests.fixture_guards:user_action`)."""
    return ActionResult(outcome="finished")
