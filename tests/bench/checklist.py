"""The table's rows (metrics) and the targets checklist of issues 16 and 30.

- fsm-agent (default isolation) per journaled transition: <= 2.0x naive (stretch 1.5x)
- against Burr's SQLite persister at the same durability (WAL, synchronous=NORMAL):
  <= 1.0x Burr's time per step (stretch 0.5x)
- durable mode (synchronous=FULL): <= 1.3x the FULL floor
- replay, decode + re-decide: >= 100,000 events/s
- cost at 100,000 transitions against 1,000: <= 1.15x per transition; peak RSS <= 40 MiB
- journal: <= 700 B/transition; each declaration stored once per sha256
- PostgreSQL store, 1 worker, per transition: measured and reported against SQLite
- wall-clock overshoot on a hung call (max of 20): <= 50 ms
- cold `fsm-agent runs` / `show RUN` / `replay RUN` on a small run: <= 5x `python -c pass`

Every ratio is the median of per-round ratios of two cases measured in the same rounds.
The scaling targets take the largest size measured (100,000 in a full run) and the scale's
base (1,000); `--smoke` runs tiny sizes, so its scaling lines compare those instead.
"""

from __future__ import annotations

from tests.bench import declarations, scaling
from tests.bench.processes import REVIEW, review_metric
from tests.bench.report import Metric, Target
from tests.bench.scaling import Scale

US = "µs/transition"
REPLAY = "replay (decode + re-decide)"
OVERSHOOT = "wall-clock overshoot"
PYTHON = "startup: python -c pass"
IMPORT = "startup: import fsm_agent"
HELP = "startup: fsm-agent --help"
POSTGRES = "fsm-agent postgres"


def metrics(scale: Scale) -> tuple[Metric, ...]:
    """Every row of the table, in order (a row a case did not fill is left out)."""
    base = scaling.us_metric(scale.base)
    return (
        Metric("floor", US),
        Metric("naive", US, ("floor",)),
        Metric("fsm-agent", US, ("naive", "Burr")),
        Metric("fsm-agent inline", US, ("naive", "fsm-agent")),
        Metric("Burr", "µs/step", ("naive",)),
        Metric("LangGraph", "µs/step", ("fsm-agent",)),
        Metric("floor FULL", US),
        Metric("fsm-agent durable", US, ("floor FULL",)),
        Metric(POSTGRES, US, ("fsm-agent",)),
        Metric(REPLAY, "events/s", fmt="{:,.0f}"),
        *(
            Metric(scaling.us_metric(s), US, () if s == scale.base else (base,))
            for s in scale.sizes
        ),
        *(Metric(scaling.rss_metric(s), "MiB") for s in scale.sizes),
        Metric(scaling.RSS_IMPORTS, "MiB"),
        *(Metric(scaling.bytes_metric(s), "B/transition", fmt="{:.0f}") for s in scale.sizes),
        Metric(declarations.METRIC, "copies", fmt="{:.0f}"),
        Metric(OVERSHOOT, "ms past 200 ms"),
        Metric(PYTHON, "ms"),
        Metric(IMPORT, "ms", (PYTHON,)),
        Metric(HELP, "ms", (PYTHON,)),
        *(Metric(review_metric(name), "ms", (PYTHON,)) for name in REVIEW),
    )


def _ratio(label: str, metric: str, baseline: str, bound: float) -> Target:
    return Target(label, metric, "ratio", bound, baseline=baseline, fmt="{:.2f}x")


def targets(scale: Scale) -> tuple[Target, ...]:
    """Issue 16's table, one line per bound (stretch goals on lines of their own)."""
    big, base = scale.largest, scale.base
    return (
        _ratio("fsm-agent (default isolation) per journaled transition / naive",
               "fsm-agent", "naive", 2.0),
        _ratio("stretch: fsm-agent / naive", "fsm-agent", "naive", 1.5),
        _ratio("fsm-agent / Burr's time per step (both WAL, synchronous=NORMAL)",
               "fsm-agent", "Burr", 1.0),
        _ratio("stretch: fsm-agent / Burr", "fsm-agent", "Burr", 0.5),
        _ratio("durable (synchronous=FULL) / the FULL floor",
               "fsm-agent durable", "floor FULL", 1.3),
        Target("replay, decode + re-decide", REPLAY, "median", 1e5,
               direction="at_least", fmt="{:,.0f} events/s"),
        _ratio(f"per transition at {big:,} transitions / at {base:,}",
               scaling.us_metric(big), scaling.us_metric(base), 1.15),
        Target(f"peak RSS at {big:,} transitions (max)", scaling.rss_metric(big), "max", 40,
               fmt="{:.1f} MiB"),
        Target(f"journal per transition at {big:,} transitions", scaling.bytes_metric(big),
               "median", 700, fmt="{:.0f} B"),
        Target(f"each declaration stored once per sha256: copies of its text after "
               f"{declarations.RUNS} runs of one machine", declarations.METRIC, "max", 1,
               direction="equal", fmt="{:.0f}"),
        Target("PostgreSQL store, 1 worker, per transition / the SQLite store", POSTGRES,
               "ratio", 0.0, direction="report", baseline="fsm-agent", fmt="{:.2f}x"),
        Target("wall-clock overshoot on a hung call (max of all runs)", OVERSHOOT, "max", 50,
               fmt="{:.1f} ms"),
        *(_ratio(f"cold `fsm-agent {name}` on a small run / python -c pass",
                 review_metric(name), PYTHON, 5.0) for name in REVIEW),
    )  # fmt: skip
