"""What the benchmark measures: the table's metrics, the issue's targets, and the cases.

A case is the unit of interleaving — one measurement that yields samples of one or more
metrics; a metric is one row of the table; a target is one line of the issue's checklist.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.bench import baselines, peers, processes, runtime, workers
from tests.bench.report import Metric, Target
from tests.bench.workload import Scratch, Workload

US = "µs/transition"
REPLAY = "replay (decode + re-decide)"
OVERSHOOT = "wall-clock overshoot"
PYTHON = "startup: python -c pass"
IMPORT = "startup: import fsm_agent"
HELP = "startup: fsm-agent --help"
PEAK_RSS = "peak RSS, long run"
JOURNAL = "journal bytes/transition"

METRICS = (
    Metric("floor", US),
    Metric("naive", US, ("floor",)),
    Metric("fsm-agent", US, ("floor", "naive")),
    Metric("fsm-agent inline", US, ("floor", "naive", "fsm-agent")),
    Metric("floor FULL", US),
    Metric("fsm-agent durable", US, ("floor FULL",)),
    Metric(REPLAY, "events/s", fmt="{:,.0f}"),
    Metric(OVERSHOOT, "ms past 200 ms"),
    Metric(PYTHON, "ms"),
    Metric(IMPORT, "ms", (PYTHON,)),
    Metric(HELP, "ms", (PYTHON,)),
    Metric(PEAK_RSS, "MiB"),
    Metric("RSS after imports", "MiB"),
    Metric(JOURNAL, "bytes", fmt="{:.0f}"),
    Metric("LangGraph", "µs/step", ("fsm-agent",)),
    Metric("Burr", "µs/step", ("fsm-agent",)),
    *(
        Metric(
            workers.metric(backend, n),
            "transitions/s",
            () if n == 1 else (workers.metric(backend, 1),),
            fmt="{:,.0f}",
        )
        for backend in ("sqlite", "postgres")
        for n in workers.WORKER_COUNTS
    ),
)


def _within(label: str, metric: str, baseline: str, bound: float) -> Target:
    return Target(label, metric, "ratio", bound, baseline=baseline, fmt="{:.2f}x")


def _ahead_of(peer: str) -> Target:
    label = f"ahead of {peer} (its µs/step ÷ ours > 1)"
    return Target(label, peer, "ratio", 1.0, at_most=False, baseline="fsm-agent", fmt="{:.2f}x")


TARGETS = (
    _within("fsm-agent <= 1.5 x naive", "fsm-agent", "naive", 1.5),
    _within("stretch: fsm-agent <= 1.5 x floor", "fsm-agent", "floor", 1.5),
    _within("fsm-agent durable <= 1.1 x floor FULL", "fsm-agent durable", "floor FULL", 1.1),
    Target("replay >= 100,000 events/s", REPLAY, "median", 1e5, at_most=False, fmt="{:,.0f}/s"),
    Target(
        "wall-clock overshoot <= 50 ms (max of all runs)", OVERSHOOT, "max", 50, fmt="{:.1f} ms"
    ),
    Target("fsm-agent --help <= 300 ms", HELP, "median", 300, fmt="{:.0f} ms"),
    Target("import fsm_agent <= 150 ms", IMPORT, "median", 150, fmt="{:.0f} ms"),
    Target("peak RSS <= 40 MiB (long run, max)", PEAK_RSS, "max", 40, fmt="{:.1f} MiB"),
    Target("journal <= 1 KiB per transition", JOURNAL, "median", 1024, fmt="{:.0f} B"),
    _ahead_of("LangGraph"),
    _ahead_of("Burr"),
)


@dataclass(frozen=True)
class Plan:
    """What one round measures, and with what."""

    workload: Workload
    long: Workload
    overshoot_runs: int
    startup_repeats: int
    scratch: Scratch
    replay: runtime.ReplayJournal | None
    #: runs a worker-scaling measurement submits (0: not measured this round)
    worker_runs: int = 0
    #: model calls per run in the worker-scaling measurement
    worker_steps: int = workers.STEPS


Measured = dict[str, list[float]]


def _runnable() -> str | None:
    return None


@dataclass(frozen=True)
class Case:
    """A unit of interleaving: one measurement producing samples of one or more metrics."""

    name: str
    metrics: tuple[str, ...]
    measure: Callable[[Plan], Measured]
    skip: Callable[[], str | None] = _runnable


def _on_fresh_file(plan: Plan, name: str, fn: Callable[[Path], float]) -> Measured:
    path = plan.scratch.fresh(f"{name}.db")
    try:
        return {name: [fn(path)]}
    finally:
        plan.scratch.discard(path)


def _floor(plan: Plan) -> Measured:
    return _on_fresh_file(plan, "floor", lambda p: baselines.floor(plan.workload, p, "NORMAL"))


def _floor_full(plan: Plan) -> Measured:
    return _on_fresh_file(plan, "floor FULL", lambda p: baselines.floor(plan.workload, p, "FULL"))


def _naive(plan: Plan) -> Measured:
    return _on_fresh_file(plan, "naive", lambda p: baselines.naive(plan.workload, p))


def _fsm_agent(plan: Plan) -> Measured:
    return {"fsm-agent": [runtime.per_transition(plan.workload, plan.scratch, "NORMAL")]}


def _inline(plan: Plan) -> Measured:
    value = runtime.per_transition(plan.workload, plan.scratch, "NORMAL", isolation="inline")
    return {"fsm-agent inline": [value]}


def _durable(plan: Plan) -> Measured:
    return {"fsm-agent durable": [runtime.per_transition(plan.workload, plan.scratch, "FULL")]}


def _replay(plan: Plan) -> Measured:
    if plan.replay is None:
        raise RuntimeError("the replay journal was not prepared")
    return {REPLAY: [runtime.replay(plan.replay)]}


def _overshoot(plan: Plan) -> Measured:
    return {OVERSHOOT: runtime.overshoot(plan.scratch, plan.overshoot_runs)}


def _startup(plan: Plan) -> Measured:
    return processes.startup(plan.scratch, plan.startup_repeats)


def _long_run(plan: Plan) -> Measured:
    return processes.long_run(plan.long, plan.scratch)


def _long_run_skip() -> str | None:
    return None if Path("/proc/self/status").exists() else "needs /proc (Linux)"


def _queue_sqlite(plan: Plan) -> Measured:
    return workers.scaling("sqlite", plan.worker_runs, plan.scratch, plan.worker_steps)


def _queue_postgres(plan: Plan) -> Measured:
    return workers.scaling("postgres", plan.worker_runs, plan.scratch, plan.worker_steps)


def _langgraph(plan: Plan) -> Measured:
    return {"LangGraph": [peers.langgraph(plan.workload, plan.scratch)]}


def _burr(plan: Plan) -> Measured:
    return {"Burr": [peers.burr(plan.workload, plan.scratch)]}


def _scaling(backend: str) -> tuple[str, ...]:
    return tuple(workers.metric(backend, n) for n in workers.WORKER_COUNTS)


STARTUP = (PYTHON, IMPORT, HELP)
LONG_RUN = (PEAK_RSS, "RSS after imports", JOURNAL)
CASES = (
    Case("floor", ("floor",), _floor),
    Case("naive", ("naive",), _naive),
    Case("fsm-agent", ("fsm-agent",), _fsm_agent),
    Case("fsm-agent-inline", ("fsm-agent inline",), _inline),
    Case("floor-full", ("floor FULL",), _floor_full),
    Case("fsm-agent-durable", ("fsm-agent durable",), _durable),
    Case("replay", (REPLAY,), _replay),
    Case("overshoot", (OVERSHOOT,), _overshoot),
    Case("startup", STARTUP, _startup),
    Case("long-run", LONG_RUN, _long_run, _long_run_skip),
    Case("langgraph", ("LangGraph",), _langgraph, peers.langgraph_missing),
    Case("burr", ("Burr",), _burr, peers.burr_missing),
    Case("queue-sqlite", _scaling("sqlite"), _queue_sqlite),
    Case("queue-postgres", _scaling("postgres"), _queue_postgres, workers.pg_missing),
)
#: The cases measured only in the rounds whose plan has `worker_runs`.
WORKER_CASES = ("queue-sqlite", "queue-postgres")
