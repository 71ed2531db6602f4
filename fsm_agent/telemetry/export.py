"""Sending runs from the journal after the fact, so a run recorded before anyone configured
tracing can still be looked at: the same builder as a live run's (`build_trace`), so the
same ids — a run exported twice, or exported after it was traced live, is one trace."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fsm_agent.journal.store import Store
from fsm_agent.telemetry.content import TraceOptions
from fsm_agent.telemetry.live import BATCH
from fsm_agent.telemetry.otlp import Sender
from fsm_agent.telemetry.root import build_trace
from fsm_agent.telemetry.spans import Span

Progress = Callable[[int, int, str], None]


def export_runs(
    store: Store,
    run_ids: Sequence[str],
    sender: Sender,
    options: TraceOptions,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Send each run's trace; return, per run, its id, trace id, how many spans it has,
    whether it has its root span (only a halted run does) and whether the backend took
    them all. The runs after one the backend did not take are not tried (an endpoint that
    is down would make each wait out the exporter's timeout). `progress(n, total, run_id)`
    is called before each run."""
    results = []
    for n, run_id in enumerate(run_ids, 1):
        if progress is not None:
            progress(n, len(run_ids), run_id)
        spans = build_trace(store.get_run(run_id), store.events(run_id), options)
        sent = [sender.send(chunk) for chunk in _chunks(spans)]  # every chunk is tried

        results.append({
            "run_id": run_id,
            "trace_id": spans[0].trace_id.hex() if spans else None,
            "spans": len(spans),
            "root": any(s.parent_id is None for s in spans),
            "sent": all(sent),
            "error": None if all(sent) else sender.error,
        })  # fmt: skip
        if not all(sent):
            break
    return results


def _chunks(spans: list[Span]) -> list[list[Span]]:
    return [spans[i : i + BATCH] for i in range(0, len(spans), BATCH)] or [[]]
