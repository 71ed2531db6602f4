"""What the console reads from the journal: a page of the run list, one step of a run,
and the numbers its charts draw. Plain data (dicts of str, int, float, None) ready for
JSON; nothing here writes.

The run list pages by key (`Store.list_runs(before=…)`): a cursor is the (started_at,
run_id) of the last run shown, so a deep page reads what the first one does. `running` and
`interrupted` are one status in the journal, told apart by the run's process: those pages
read the journal's running runs a page at a time, by key, until one is full.

Nothing unverified is shown as fact (`fsm_agent.review.truth`): each run listed carries its
truth and shows a live run's state and steps from its newest chained event (the row's
columns of a live run are not chained); the charts count only runs whose chain verifies,
and say how many they left out.
"""

from __future__ import annotations

import datetime
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Sequence
from typing import Any

import attrs

from fsm_agent.halt import HaltReason
from fsm_agent.journal import serde
from fsm_agent.journal.store import RunRow, RunSummary, Store
from fsm_agent.review.truth import Truth, Truths, run_now
from fsm_agent.review.usage import run_usage
from fsm_agent.runtime.run_status import shown_runs

#: Runs on one page of the list.
PAGE_SIZE = 50
#: What the status filter offers (as `fsm-agent runs --status`).
STATUSES = ("running", "interrupted", "paused", "waiting", "halted")
#: The slowest-tools chart reads the events of this many of the newest halted runs.
TOOL_WINDOW = 50
#: The cost and tokens chart shows this many of the newest runs.
COST_WINDOW = 200


@attrs.frozen
class RunFilters:
    """The run list's filters, as the query string gives them (None: not filtered)."""

    machine: str | None = None
    halt_reason: HaltReason | None = None
    status: str | None = None
    since: str | None = None
    until: str | None = None
    text: str | None = None


@attrs.frozen
class RunPage:
    """One page of the list, newest first; `next_cursor` is None on the last page."""

    runs: tuple[RunRow, ...]
    next_cursor: tuple[str, str] | None


def run_page(
    store: Store, filters: RunFilters, cursor: tuple[str, str] | None, size: int = PAGE_SIZE
) -> RunPage:
    """The page of runs after `cursor` (None: the first page) that pass `filters`."""
    f = filters
    common: dict[str, Any] = {"machine": f.machine, "halt_reason": f.halt_reason,
                              "since": f.since, "until": f.until, "task_contains": f.text,
                              "before": cursor}  # fmt: skip
    if f.status is not None:
        rows = shown_runs(store, f.status, size + 1, **common)
    else:
        rows = store.list_runs(size + 1, **common)
    more = len(rows) > size
    rows = rows[:size]
    nxt = (rows[-1].started_at, rows[-1].run_id) if more and rows else None
    return RunPage(tuple(rows), nxt)


@attrs.frozen
class Listed:
    """One run as the list shows it: its row, its truth, and where it stands (a halted
    run's row, else its newest chained event's state, steps and step cap)."""

    row: RunRow
    truth: Truth
    state: str
    steps_used: int
    max_steps: int


def listed(store: Store, rows: Sequence[RunRow], known: Truths) -> tuple[Listed, ...]:
    """`rows` as the list shows them (see `Listed`)."""
    verdicts = known.of(store, [r.run_id for r in rows if r.status == "halted"])
    found = []
    for r in rows:
        if r.status == "halted":
            found.append(Listed(r, verdicts[r.run_id], r.state, r.steps_used, run_cap(r)))
            continue
        now = run_now(store, r.run_id)  # the row's state and steps of a live run are not chained
        cap = now.last.snapshot.budgets.max_steps
        found.append(Listed(now.row, now.truth, now.state, now.steps_used, cap))
    return tuple(found)


def run_cap(run: RunRow) -> int:
    """The run's step cap: its record's (raised caps included), else its frozen budget."""
    return run.record.max_steps if run.record is not None else run.budgets.max_steps


def step_detail(store: Store, run_id: str, seq: int) -> dict[str, Any] | None:
    """One journaled transition as JSON data (snapshot, guards, facts …), or None: that
    event alone is read, however long the run."""
    ev = store.event_at(run_id, seq)
    if ev is None:
        return None
    data: dict[str, Any] = serde.unstructure(ev)
    return data


def _bucket(started_at: str, hourly: bool) -> str:
    return started_at[:13] + ":00" if hourly else started_at[:10]


def _over_time(runs: Sequence[RunSummary]) -> dict[str, Any]:
    """Halt reasons per day (per hour when the runs span under two days)."""
    times = sorted(r.started_at for r in runs)
    hourly = bool(times) and _days_between(times[0], times[-1]) < 2
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for r in runs:
        if r.halt_reason is not None:
            counts[r.halt_reason.value][_bucket(r.started_at, hourly)] += 1
    labels = sorted({b for c in counts.values() for b in c})
    series = {reason: [c.get(b, 0) for b in labels] for reason, c in sorted(counts.items())}
    return {"labels": labels, "series": series}


def _days_between(first: str, last: str) -> float:
    try:
        a = datetime.datetime.fromisoformat(first)
        b = datetime.datetime.fromisoformat(last)
    except ValueError:
        return 0.0
    return (b - a).total_seconds() / 86400


def _per_machine(runs: Sequence[RunSummary]) -> dict[str, Any]:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for r in runs:
        if r.halt_reason is not None:
            counts[r.halt_reason.value][r.machine] += 1
    machines = sorted({r.machine for r in runs})
    series = {reason: [c.get(m, 0) for m in machines] for reason, c in sorted(counts.items())}
    return {"labels": machines, "series": series}


def _steps_share(runs: Sequence[RunSummary]) -> dict[str, Any]:
    """steps_used / max_steps of halted runs in tenths, per machine; the last bin is the cap
    hit exactly (a cap always hit, or never approached, shows at a glance)."""
    labels = [f"{10 * i}-{10 * i + 9}%" for i in range(10)] + ["at the cap"]
    series: dict[str, list[int]] = {}
    for r in runs:
        if r.status != "halted" or r.max_steps <= 0:
            continue
        bins = series.setdefault(r.machine, [0] * len(labels))
        share = r.steps_used / r.max_steps
        bins[10 if share >= 1 else min(int(share * 10), 9)] += 1
    return {"labels": labels, "series": dict(sorted(series.items()))}


def _cost(runs: Sequence[RunSummary]) -> dict[str, Any]:
    newest = sorted(runs, key=lambda r: (r.started_at, r.run_id))[-COST_WINDOW:]
    return {
        "labels": [r.run_id for r in newest],
        "cost": [r.cost or 0.0 for r in newest],
        "input_tokens": [r.input_tokens or 0 for r in newest],
        "output_tokens": [r.output_tokens or 0 for r in newest],
    }


class ToolTimes:
    """The slowest tools over the newest halted runs whose chain verifies (the others'
    events may have been edited). A halted run's events never change but by tampering,
    which its truth shows, so each run's tool times are read once and kept (a bounded
    cache)."""

    def __init__(self, window: int = TOOL_WINDOW) -> None:
        self.window = window
        self._runs: OrderedDict[str, dict[str, tuple[int, int, int]]] = OrderedDict()

    def slowest(self, store: Store, known: Truths) -> list[dict[str, Any]]:
        """Per tool: calls, total and max ms over the window, slowest (max) first."""
        totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        runs = store.list_runs(self.window, status="halted")
        verdicts = known.of(store, [r.run_id for r in runs])
        for run in runs:
            if not verdicts[run.run_id].ok:
                continue
            for name, (calls, total, most) in self._of(store, run.run_id).items():
                t = totals[name]
                t[0], t[1], t[2] = t[0] + calls, t[1] + total, max(t[2], most)
        rows = [{"tool": n, "calls": c, "total_ms": s, "max_ms": m}
                for n, (c, s, m) in totals.items()]  # fmt: skip
        return sorted(rows, key=lambda r: (-r["max_ms"], r["tool"]))

    def _of(self, store: Store, run_id: str) -> dict[str, tuple[int, int, int]]:
        if run_id in self._runs:
            self._runs.move_to_end(run_id)
            return self._runs[run_id]
        tools = run_usage(store.events(run_id)).tools
        found = {t.name: (t.calls, t.total_ms, t.max_ms) for t in tools}
        self._runs[run_id] = found
        while len(self._runs) > 4 * self.window:
            self._runs.popitem(last=False)
        return found


def chart_data(store: Store, since: str | None, tools: ToolTimes, known: Truths) -> dict[str, Any]:
    """Everything the charts page draws, for the runs started at or after `since` whose
    chain verifies; `unverified` counts the others, which are in no chart."""
    every = store.run_summaries(since=since)
    verdicts = known.of(store, [r.run_id for r in every])
    runs = [r for r in every if verdicts[r.run_id].ok]
    doubtful = len(every) - len(runs)
    note = (
        f"{doubtful} more UNVERIFIED: their chains do not verify (or the key was not given),"
        " so they are in no chart; `fsm-agent verify --all` says why"
    )
    return {
        "runs": len(runs),
        "unverified": doubtful,
        "unverified_note": note if doubtful else None,
        "over_time": _over_time(runs),
        "per_machine": _per_machine(runs),
        "steps_share": _steps_share(runs),
        "cost": _cost(runs),
        "tools": tools.slowest(store, known),
    }
