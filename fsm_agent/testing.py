"""A pytest helper so teams keep incident histories in their own CI.

    from fsm_agent.testing import assert_replays

    def test_the_march_refund_incident_still_halts_the_same_way():
        assert_replays("incidents/2026-03-refund.json")

A guard change that would have rewritten that history fails the test with the divergence;
so does a run whose hash chain does not verify (decisions can all match on edited facts).
"""

from __future__ import annotations

import os
from pathlib import Path

from fsm_agent.journal.chain import ChainReport, verify_run
from fsm_agent.review.replay import ReplayReport, load_run, replay_events, with_chain
from fsm_agent.review.view import format_step


def _chain(path: str | os.PathLike[str], run_id: str, key: bytes | None) -> ChainReport:
    """The verdict on the chain of the run `load_run` read from `path`."""
    from fsm_agent.stores import open_store
    from fsm_agent.stores.dsn import is_dsn

    if not is_dsn(path) and Path(path).suffix == ".json":
        from fsm_agent.journal.runfile import read_run_file, verify_run_file

        return verify_run_file(read_run_file(path), key=key)
    store = open_store(path)
    try:
        return verify_run(store, run_id, key=key)
    finally:
        store.close()


def assert_replays(
    path: str | os.PathLike[str], run_id: str | None = None, *, key: bytes | None = None
) -> ReplayReport:
    """Replay a run (from a run file, or a journal file and a run id) with the current code;
    raise AssertionError with the divergent step unless every decision and the halt match
    and the run's hash chain verifies (a keyed run's with `key`, else the environment's:
    `FSM_AGENT_CHAIN_KEY`)."""
    run, events = load_run(path, run_id)
    report = with_chain(replay_events(run, events), _chain(path, run.run_id, key))
    if not report.ok:
        last = format_step(report.steps[-1]) if report.steps else ""
        raise AssertionError(f"run {run.run_id} does not replay: {report.summary}\n{last}")
    return report
