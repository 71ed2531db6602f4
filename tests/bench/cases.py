"""What the benchmark measures: the cases, and what one round gives them to measure.

A case is the unit of interleaving — one measurement that yields samples of one or more
metrics (the table's rows and the checklist's targets are in `checklist.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.bench import baselines, declarations, peers, pg, processes, runtime, scaling
from tests.bench.checklist import HELP, IMPORT, OVERSHOOT, POSTGRES, PYTHON, REPLAY
from tests.bench.processes import REVIEW, review_metric
from tests.bench.scaling import Scale
from tests.bench.workload import Scratch, Workload


@dataclass(frozen=True)
class Plan:
    """What one round measures, and with what."""

    workload: Workload
    overshoot_runs: int
    startup_repeats: int
    scratch: Scratch
    replay: runtime.ReplayJournal | None
    #: one of the few rounds that measure the costly cases (PostgreSQL)
    sparse: bool = False
    #: the scaling sizes measured this round (each in a child process)
    scale_sizes: tuple[int, ...] = ()


Measured = dict[str, list[float]]


def _runnable() -> str | None:
    return None


def _always(plan: Plan) -> bool:
    return True


def _sparse(plan: Plan) -> bool:
    return plan.sparse


@dataclass(frozen=True)
class Case:
    """A unit of interleaving: one measurement producing samples of one or more metrics."""

    name: str
    metrics: tuple[str, ...] | Callable[[Scale], tuple[str, ...]]
    measure: Callable[[Plan], Measured]
    skip: Callable[[], str | None] = _runnable
    #: whether a round's plan asks for this case (some are measured in a few rounds only)
    wanted: Callable[[Plan], bool] = _always

    def rows(self, scale: Scale) -> tuple[str, ...]:
        """The metrics this case fills, for the run's scale."""
        return self.metrics if isinstance(self.metrics, tuple) else self.metrics(scale)


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
    value = runtime.per_transition(plan.workload, plan.scratch, "NORMAL", inline=True)
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


def _postgres(plan: Plan) -> Measured:
    return {POSTGRES: [runtime.per_transition_pg(plan.workload, plan.scratch)]}


def _scaling(plan: Plan) -> Measured:
    return scaling.measure(plan.scale_sizes, plan.scratch)


def _scaling_skip() -> str | None:
    return None if Path("/proc/self/status").exists() else "needs /proc (Linux)"


def _declarations(plan: Plan) -> Measured:
    return {declarations.METRIC: [declarations.copies(plan.scratch)]}


def _langgraph(plan: Plan) -> Measured:
    return {"LangGraph": [peers.langgraph(plan.workload, plan.scratch)]}


def _burr(plan: Plan) -> Measured:
    return {"Burr": [peers.burr(plan.workload, plan.scratch)]}


STARTUP = (PYTHON, IMPORT, HELP, *(review_metric(name) for name in REVIEW))
CASES = (
    Case("floor", ("floor",), _floor),
    Case("naive", ("naive",), _naive),
    Case("fsm-agent", ("fsm-agent",), _fsm_agent),
    Case("fsm-agent-inline", ("fsm-agent inline",), _inline),
    Case("floor-full", ("floor FULL",), _floor_full),
    Case("fsm-agent-durable", ("fsm-agent durable",), _durable),
    Case("fsm-agent-postgres", (POSTGRES,), _postgres, pg.pg_missing, wanted=_sparse),
    Case("replay", (REPLAY,), _replay),
    Case("overshoot", (OVERSHOOT,), _overshoot, wanted=lambda plan: plan.overshoot_runs > 0),
    Case("startup", STARTUP, _startup),
    Case("scaling", lambda scale: scaling.metric_names(scale.sizes), _scaling, _scaling_skip,
         wanted=lambda plan: bool(plan.scale_sizes)),
    Case("declarations", (declarations.METRIC,), _declarations),
    Case("langgraph", ("LangGraph",), _langgraph, peers.langgraph_missing),
    Case("burr", ("Burr",), _burr, peers.burr_missing),
)  # fmt: skip
