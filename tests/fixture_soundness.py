"""A user action for the soundness test's payments mutants
(`tests.fixture_soundness:webhook_with_extras`): the shipped webhook wait, except that on
some steps it returns an outcome of its own — `late_webhook` (which a mutant may declare,
with or without an edge for it) or `garbled` (never declared: the runtime makes it `failed`).
It decides from the snapshot alone, so a replay sees the same outcomes."""

from __future__ import annotations

from fsm_agent import ActionResult, Snapshot
from fsm_agent.examples.payments_retry.webhook import await_capture_webhook


def webhook_with_extras(snapshot: Snapshot) -> ActionResult:
    """`late_webhook` on every third step, `garbled` on the next, else the real webhook."""
    turn = snapshot.meters.steps_used % 3
    if turn == 1:
        return ActionResult(outcome="late_webhook")
    if turn == 2:
        return ActionResult(outcome="garbled")
    return await_capture_webhook(snapshot)
