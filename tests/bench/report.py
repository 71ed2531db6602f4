"""Summaries, ratios against same-run baselines, the table, the target checklist, the JSON.

Samples are kept per round. A ratio is paired by round: (the case's median in round r) /
(the baseline's median in round r), and the table shows the median of those per-round
ratios with their range — both sides were measured seconds apart under the same noise.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Stat = Literal["median", "max", "ratio"]


@dataclass(frozen=True)
class Metric:
    """One row of the table."""

    name: str
    unit: str
    #: Metrics this one is divided by, round by round.
    baselines: tuple[str, ...] = ()
    fmt: str = "{:.1f}"


@dataclass
class Samples:
    """The samples of one metric, one list per round (or why it was skipped)."""

    metric: Metric
    rounds: list[list[float]]
    skipped: str | None = None

    @property
    def flat(self) -> list[float]:
        return [x for r in self.rounds for x in r]

    @property
    def measured(self) -> bool:
        return self.skipped is None and bool(self.flat)

    def round_medians(self) -> list[float | None]:
        return [statistics.median(r) if r else None for r in self.rounds]


@dataclass(frozen=True)
class Summary:
    median: float
    minimum: float
    maximum: float

    @property
    def spread(self) -> float:
        """max / min (1.00 = no spread); infinite when min is not positive."""
        return self.maximum / self.minimum if self.minimum > 0 else float("inf")


@dataclass(frozen=True)
class Ratio:
    baseline: str
    median: float
    low: float
    high: float
    per_round: tuple[float, ...]


def summarize(samples: Samples) -> Summary | None:
    values = samples.flat
    if not samples.measured:
        return None
    return Summary(statistics.median(values), min(values), max(values))


def ratio(case: Samples, base: Samples) -> Ratio | None:
    """Median of the per-round ratios case/base, over the rounds where both were measured."""
    if not (case.measured and base.measured):
        return None
    pairs = zip(case.round_medians(), base.round_medians(), strict=True)
    per_round = tuple(c / b for c, b in pairs if c is not None and b)
    if not per_round:
        return None
    return Ratio(
        base.metric.name, statistics.median(per_round), min(per_round), max(per_round), per_round
    )


# --- the table ------------------------------------------------------------------------------


def _ratio_text(r: Ratio) -> str:
    if len(r.per_round) == 1:
        return f"{r.median:.2f}x {r.baseline}"
    return f"{r.median:.2f}x {r.baseline} ({r.low:.2f}-{r.high:.2f})"


def _row(samples: Samples, table: dict[str, Samples]) -> list[str]:
    m = samples.metric
    s = summarize(samples)
    if s is None:
        return [m.name, "-", "-", "-", m.unit, "0", samples.skipped or "not measured"]
    ratios = [ratio(samples, table[b]) for b in m.baselines if b in table]
    shown = ", ".join(_ratio_text(r) for r in ratios if r is not None)
    return [
        m.name,
        m.fmt.format(s.median),
        m.fmt.format(s.maximum),
        f"{s.spread:.2f}",
        m.unit,
        str(len(samples.flat)),
        shown,
    ]


def render_table(table: dict[str, Samples]) -> str:
    """Fixed-width text: case, median, max, spread (max/min), unit, samples, ratios."""
    head = ["case", "median", "max", "spread", "unit", "n", "ratio (median of rounds)"]
    rows = [head] + [_row(s, table) for s in table.values()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
    right = {1, 2, 3, 5}
    lines = []
    for row in rows:
        cells = [
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=False))
        ]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


# --- targets --------------------------------------------------------------------------------

#: How a target's figure is judged: at most / at least / exactly the bound, or only reported.
Direction = Literal["at_most", "at_least", "equal", "report"]
Verdict = Literal["met", "missed", "reported", "not measured"]
_SIGN = {"at_most": "<=", "at_least": ">=", "equal": "=", "report": ""}


@dataclass(frozen=True)
class Target:
    """One line of the issue's checklist: a statistic of a metric against a bound.

    `stat` "ratio" is the median of the per-round ratios metric / `baseline`; "median" and
    "max" are over every sample of the metric. A "report" target has no bound: its figure
    is stated, never judged.
    """

    label: str
    metric: str
    stat: Stat
    bound: float
    direction: Direction = "at_most"
    baseline: str | None = None
    fmt: str = "{:.1f}"

    def figure(self, table: dict[str, Samples]) -> float | None:
        samples = table.get(self.metric)
        if samples is None:
            return None
        if self.stat == "ratio":
            base = table.get(self.baseline or "")
            r = None if base is None else ratio(samples, base)
            return None if r is None else r.median
        s = summarize(samples)
        if s is None:
            return None
        return s.median if self.stat == "median" else s.maximum

    def judge(self, value: float) -> Verdict:
        """The verdict on a figure."""
        if self.direction == "report":
            return "reported"
        if self.direction == "at_most":
            ok = value <= self.bound
        elif self.direction == "at_least":
            ok = value >= self.bound
        else:
            ok = value == self.bound
        return "met" if ok else "missed"

    def verdict(self, table: dict[str, Samples]) -> tuple[Verdict, float | None]:
        value = self.figure(table)
        if value is None:
            return "not measured", None
        return self.judge(value), value

    @property
    def wanted(self) -> str:
        """The bound as text (`<= 2.00x`), empty for a report."""
        if self.direction == "report":
            return ""
        return f"{_SIGN[self.direction]} {self.fmt.format(self.bound)}"


def _why_not(target: Target, table: dict[str, Samples]) -> str:
    """Why a target's figure is missing: its metric's or its baseline's skip note."""
    for name in (target.metric, target.baseline):
        samples = table.get(name or "")
        if samples is not None and samples.skipped:
            return f" ({name}: {samples.skipped})"
    return ""


def render_targets(targets: Sequence[Target], table: dict[str, Samples]) -> str:
    """One line per target: mark, what is measured, the bound, the verdict, the figure."""
    lines = []
    for t in targets:
        verdict, value = t.verdict(table)
        mark = {"met": "[x]", "missed": "[ ]", "reported": "[i]"}.get(verdict, "[-]")
        wanted = f" {t.wanted}" if t.wanted else ""
        figure = _why_not(t, table) if value is None else f", {t.fmt.format(value)}"
        lines.append(f"{mark} {t.label}{wanted}: {verdict}{figure}")
    return "\n".join(lines)


# --- JSON -----------------------------------------------------------------------------------


def _metric_json(samples: Samples, table: dict[str, Samples]) -> dict[str, Any]:
    s = summarize(samples)
    ratios = [ratio(samples, table[b]) for b in samples.metric.baselines if b in table]
    return {
        "unit": samples.metric.unit,
        "skipped": samples.skipped,
        "samples_by_round": samples.rounds,
        "median": None if s is None else s.median,
        "min": None if s is None else s.minimum,
        "max": None if s is None else s.maximum,
        "spread": None if s is None else s.spread,
        "ratios": {
            r.baseline: {"median": r.median, "min": r.low, "max": r.high, "by_round": r.per_round}
            for r in ratios
            if r is not None
        },
    }


def to_json(
    table: dict[str, Samples], targets: Sequence[Target], header: dict[str, Any]
) -> dict[str, Any]:
    checklist: list[dict[str, Any]] = []
    for t in targets:
        verdict, value = t.verdict(table)
        checklist.append({
            "target": t.label, "metric": t.metric, "stat": t.stat, "baseline": t.baseline,
            "direction": t.direction, "bound": None if t.direction == "report" else t.bound,
            "verdict": verdict, "figure": value,
        })  # fmt: skip
    return {
        **header,
        "metrics": {name: _metric_json(s, table) for name, s in table.items()},
        "targets": checklist,
    }
