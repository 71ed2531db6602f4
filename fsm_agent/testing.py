"""A pytest helper so teams keep incident histories in their own CI.

    from fsm_agent.testing import assert_replays

    def test_the_march_refund_incident_still_halts_the_same_way():
        assert_replays("incidents/2026-03-refund.json")

A guard change that would have rewritten that history fails the test with the divergence.
"""

from __future__ import annotations

import os

from fsm_agent.replay import ReplayReport, load_run, replay_events
from fsm_agent.replay_view import format_step


def assert_replays(path: str | os.PathLike[str], run_id: str | None = None) -> ReplayReport:
    """Replay a run (from a run file, or a journal file and a run id) with the current code;
    raise AssertionError with the divergent step unless every decision and the halt match."""
    run, events = load_run(path, run_id)
    report = replay_events(run, events)
    if not report.ok:
        last = format_step(report.steps[-1]) if report.steps else ""
        raise AssertionError(f"run {run.run_id} does not replay: {report.summary}\n{last}")
    return report
