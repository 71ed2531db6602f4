"""Statistics over a journal: how runs of each machine halted, and what they used.

Every halt is named so that the reasons can be counted later. Per machine: how many runs,
how many ended for each halt reason (and how many are still running), the
steps_used/max_steps ratio (if it is always 1.0, the cap is too tight), run duration, cost
and token percentiles, and what the runs of each halt reason cost and used in tokens.

Backend-neutral: one `Store.run_summaries` read gives a narrow row per run (no event is
decoded); the counting and the percentiles happen here. `halt_stats` returns frozen values
that go through the one converter (`serde.unstructure(stats)` is the JSON form) and
`format_stats` renders them as text tables.
"""

from __future__ import annotations

import datetime
import itertools
import re
from collections import Counter
from collections.abc import Sequence

import attrs

from fsm_agent.errors import InvalidInputError
from fsm_agent.halt import HaltReason
from fsm_agent.journal.store import RunSummary, Store
from fsm_agent.runtime.budgets import dollars

_REASON_ORDER = {reason: i for i, reason in enumerate(HaltReason)}
_MS = datetime.timedelta(milliseconds=1)


@attrs.frozen
class Distribution:
    """Nearest-rank percentiles of one measure: every value is one a run really had."""

    count: int
    p50: float
    p90: float
    max: float


@attrs.frozen
class MachineStats:
    """How the runs of one machine (by declared name) halted and what they used.

    `halt_reasons` counts halted runs, most frequent first. The distributions cover halted
    runs only (None when there is none); `at_step_cap` counts halted runs whose
    steps_used/max_steps is 1.0, and `at_step_cap_share` is their share of halted runs.
    """

    machine: str
    runs: int
    halted: int
    running: int
    halt_reasons: dict[HaltReason, int]
    steps_ratio: Distribution | None
    at_step_cap: int
    at_step_cap_share: float | None
    duration_ms: Distribution | None
    cost: Distribution | None
    #: per halted run: the input / output tokens its model calls reported (runs that
    #: reported none are left out)
    input_tokens: Distribution | None = None
    output_tokens: Distribution | None = None
    #: what the halted runs of each halt reason used together, in `halt_reasons`' order
    usage_by_reason: dict[HaltReason, ReasonUsage] = attrs.field(factory=dict)
    #: runs whose chain does not verify (or whose key was not given): counted here only,
    #: in none of the figures above, since their rows may have been edited
    unverified: int = 0
    #: halted runs that wait for a person's decision (counted in `halted` and its reasons
    #: too: their stop is recorded; a decision may continue them)
    waiting: int = 0


@attrs.frozen
class ReasonUsage:
    """What the halted runs of one halt reason used together: cost (of the runs with a
    record) and the tokens their model calls reported."""

    runs: int
    cost: float
    input_tokens: int
    output_tokens: int
    #: how many of the runs reported tokens (0: the token totals mean nothing)
    runs_with_tokens: int = 0


@attrs.frozen
class Stats:
    """Statistics of one journal, one entry per machine in name order, with the filters."""

    journal: str
    machines: tuple[MachineStats, ...]
    machine: str | None = None
    since: str | None = None


# --- computing -------------------------------------------------------------------------------


def percentile(ordered: Sequence[float], p: int) -> float:
    """The nearest-rank `p`th percentile of non-empty, ascending `ordered` (integer math,
    so p90 of 30 values is the 27th, not the 28th)."""
    rank = -(-p * len(ordered) // 100)
    return ordered[max(rank, 1) - 1]


def distribution(values: Sequence[float]) -> Distribution | None:
    """p50, p90 and max of `values`, or None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return Distribution(
        count=len(ordered),
        p50=float(percentile(ordered, 50)),
        p90=float(percentile(ordered, 90)),
        max=float(ordered[-1]),
    )


#: A relative time: N seconds, minutes, hours, days or weeks ago (`90m`, `2d`).
_AGO = re.compile(r"(\d{1,9})([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def time_key(text: str, *, what: str = "since", now: datetime.datetime | None = None) -> str:
    """An ISO date or timestamp, or a relative time (`30m`, `1h`, `2d`, `1w`: that long
    before `now`), as the journal writes `started_at` (UTC, milliseconds), so the two compare
    as text. A timestamp without a zone is taken as UTC. `what` names the option in errors."""
    ago = _AGO.fullmatch(text.strip())
    if ago is not None:
        try:
            moment = (now or datetime.datetime.now(datetime.UTC)) - datetime.timedelta(
                **{_UNITS[ago.group(2)]: int(ago.group(1))}
            )
        except OverflowError as exc:
            raise InvalidInputError(f"{what} {text!r}: before the year 1") from exc
    else:
        try:
            moment = datetime.datetime.fromisoformat(text)
        except ValueError as exc:
            raise InvalidInputError(
                f"{what} {text!r}: not an ISO date or timestamp, nor a relative time"
                " (for example 2025-01-31, 2025-01-31T12:00:00+00:00, 90m, 1h, 2d or 1w)"
            ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.astimezone(datetime.UTC).isoformat(timespec="milliseconds")


def since_key(since: str) -> str:
    """`time_key` of a `since` bound."""
    return time_key(since)


def _duration_ms(run: RunSummary) -> int | None:
    """ended_at - started_at in milliseconds; None without an end or a readable timestamp."""
    if run.ended_at is None:
        return None
    try:
        started = datetime.datetime.fromisoformat(run.started_at)
        ended = datetime.datetime.fromisoformat(run.ended_at)
        return (ended - started) // _MS
    except (TypeError, ValueError):
        return None


def _reason_counts(halted: Sequence[RunSummary]) -> dict[HaltReason, int]:
    counts = Counter(r.halt_reason for r in halted if r.halt_reason is not None)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], _REASON_ORDER[item[0]]))
    return dict(ranked)


def _usage_by_reason(
    halted: Sequence[RunSummary], order: Sequence[HaltReason]
) -> dict[HaltReason, ReasonUsage]:
    groups: dict[HaltReason, list[RunSummary]] = {}
    for r in halted:
        if r.halt_reason is not None:
            groups.setdefault(r.halt_reason, []).append(r)
    return {
        reason: ReasonUsage(
            runs=len(rows),
            cost=sum(r.cost or 0.0 for r in rows),
            input_tokens=sum(r.input_tokens or 0 for r in rows),
            output_tokens=sum(r.output_tokens or 0 for r in rows),
            runs_with_tokens=sum(
                1 for r in rows if r.input_tokens is not None or r.output_tokens is not None
            ),
        )
        for reason in order
        if (rows := groups.get(reason))
    }


def machine_stats(
    machine: str, runs: Sequence[RunSummary], unverified: frozenset[str] = frozenset()
) -> MachineStats:
    """The statistics of one machine's runs; those in `unverified` are only counted."""
    doubtful = sum(1 for r in runs if r.run_id in unverified)
    runs = [r for r in runs if r.run_id not in unverified]
    halted = [r for r in runs if r.status == "halted"]
    at_cap = sum(1 for r in halted if r.steps_used >= r.max_steps)
    durations = [d for d in map(_duration_ms, halted) if d is not None]
    reasons = _reason_counts(halted)
    return MachineStats(
        machine=machine,
        runs=len(runs),
        halted=len(halted),
        running=len(runs) - len(halted),
        halt_reasons=reasons,
        steps_ratio=distribution([r.steps_used / r.max_steps for r in halted]),
        at_step_cap=at_cap,
        at_step_cap_share=at_cap / len(halted) if halted else None,
        duration_ms=distribution(durations),
        cost=distribution([r.cost for r in halted if r.cost is not None]),
        input_tokens=distribution([r.input_tokens for r in halted if r.input_tokens is not None]),
        output_tokens=distribution(
            [r.output_tokens for r in halted if r.output_tokens is not None]
        ),
        usage_by_reason=_usage_by_reason(halted, list(reasons)),
        unverified=doubtful,
        waiting=sum(1 for r in halted if r.awaits is not None),
    )


def halt_stats(store: Store, machine: str | None = None, since: str | None = None) -> Stats:
    """Statistics of the runs in `store`: of one `machine` if given, started at or after
    `since` (an ISO date or timestamp) if given."""
    from fsm_agent.review.truth import truths

    key = None if since is None else since_key(since)
    summaries = store.run_summaries(machine=machine, since=key)
    verdicts = truths(store, (r.run_id for r in summaries))
    doubtful = frozenset(rid for rid, t in verdicts.items() if not t.ok)
    groups = itertools.groupby(summaries, key=lambda r: r.machine)
    return Stats(
        journal=store.location,
        machines=tuple(machine_stats(name, list(rows), doubtful) for name, rows in groups),
        machine=machine,
        since=key,
    )


# --- text -------------------------------------------------------------------------------------


def _percent(share: float) -> str:
    return f"{share * 100:.0f}%"


_REASON_WIDTH = max(len(r.value) for r in HaltReason)


def _reason_lines(m: MachineStats) -> list[str]:
    w = _REASON_WIDTH
    lines = [f"  {'HALT REASON':<{w}}  {'RUNS':>5}  {'SHARE':>5}  {'COST':>9}  {'TOKENS':>11}"]
    for reason, count in m.halt_reasons.items():
        used = m.usage_by_reason.get(reason)
        cost = "" if used is None else dollars(used.cost)
        tokens = "-"
        if used is not None and used.runs_with_tokens:
            tokens = f"{used.input_tokens + used.output_tokens:,}"
        lines.append(
            f"  {reason.value:<{w}}  {count:>5}  {_percent(count / m.halted):>5}"
            f"  {cost:>9}  {tokens:>11}"
        )
    if m.running:
        lines.append(f"  {'(running)':<{w}}  {m.running:>5}")
    if m.waiting:
        lines.append(
            f"  {'(waiting)':<{w}}  {m.waiting:>5}  of these halted runs wait for a person's"
            " decision: fsm-agent runs --status waiting"
        )
    if m.unverified:
        lines.append(
            f"  {'(unverified)':<{w}}  {m.unverified:>5}  their chains do not verify (or the"
            " key was not given): in no figure here; fsm-agent verify --all"
        )
    return lines


def _measure_lines(m: MachineStats) -> list[str]:
    measures = (
        ("steps/max", m.steps_ratio, "{:.2f}".format),
        ("duration ms", m.duration_ms, "{:.0f}".format),
        ("cost", m.cost, dollars),
        ("tokens in", m.input_tokens, "{:,.0f}".format),
        ("tokens out", m.output_tokens, "{:,.0f}".format),
    )
    lines = [f"  {'MEASURE':<12}  {'p50':>9}  {'p90':>9}  {'max':>9}  {'RUNS':>5}"]
    for label, dist, fmt in measures:
        if dist is None:
            continue
        p50, p90, top = (fmt(v) for v in (dist.p50, dist.p90, dist.max))
        lines.append(f"  {label:<12}  {p50:>9}  {p90:>9}  {top:>9}  {dist.count:>5}")
    return lines


def _cap_lines(m: MachineStats) -> list[str]:
    if m.at_step_cap_share is None:
        return []
    lines = [
        f"  at the step cap (steps/max = 1.0): {m.at_step_cap} of {m.halted} halted"
        f" ({_percent(m.at_step_cap_share)})"
    ]
    if m.at_step_cap == m.halted:
        lines.append("  every halted run used its whole step budget: the cap may be too tight")
    return lines


def _machine_block(m: MachineStats) -> list[str]:
    head = f"{m.machine}: {m.runs} run(s), {m.halted} halted, {m.running} running"
    if m.unverified:
        head += f", {m.unverified} unverified"
    if not m.halted:
        return [head, *_reason_lines(m)]
    return [head, *_reason_lines(m), *_measure_lines(m), *_cap_lines(m)]


def format_stats(stats: Stats) -> str:
    """The statistics as text: a header, then one block of tables per machine."""
    filters = "".join(
        f"  {name}: {value}"
        for name, value in (("machine", stats.machine), ("since", stats.since))
        if value is not None
    )
    lines = [f"journal: {stats.journal}{filters}"]
    if not stats.machines:
        lines.append("no runs")
    for m in stats.machines:
        lines.extend(["", *_machine_block(m)])
    return "\n".join(lines) + "\n"
