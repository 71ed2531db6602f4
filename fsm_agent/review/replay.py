"""Replay: prove a halt from the journal alone — no model, no tools, no network, no clock.

Every decision of a run is re-made with the current code on the snapshot it was journaled
with: the reply is parsed again, every guard is evaluated again, the budget checks are
run again, and the recomputed transition, guard results and halt reason are compared with
the recorded ones. The first difference is a divergence (as Temporal's replayer flags
non-determinism): a guard change that would have rewritten history shows up here.

A counterfactual replay does the same under other budgets or another declaration. The
recorded facts (replies, tool outcomes, clock readings) stay what they were; where the
alternative history leaves the recorded path, replay says so instead of inventing facts.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from fsm_agent.declaration.load import parse_machine
from fsm_agent.declaration.machine import compile_machine
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.encoding import text_sha256
from fsm_agent.errors import InvalidInputError, MachineSpecError
from fsm_agent.halt import HaltReason
from fsm_agent.journal.chain import ChainReport
from fsm_agent.journal.store import Event, RunRow
from fsm_agent.review.fork_replay import decided_under, kept_wrong
from fsm_agent.review.redecide import Replayer, redecide
from fsm_agent.review.step_report import GuardCheck, StepReport, Verdict
from fsm_agent.runtime.budgets import make_budgets
from fsm_agent.runtime.fork_lineage import stretches
from fsm_agent.runtime.snapshot import BEFORE, SUCCESS_RULES

__all__ = [
    "GuardCheck",
    "ReplayReport",
    "StepReport",
    "Verdict",
    "load_run",
    "replay_events",
    "with_chain",
]


@attrs.frozen
class ReplayReport:
    """The whole replay: every step, and whether the recorded halt is proven."""

    run_id: str
    machine: str
    machine_sha256: str
    counterfactual: bool
    steps: tuple[StepReport, ...]
    recorded_halt: HaltReason | None
    recomputed_halt: HaltReason | None
    ok: bool
    summary: str
    #: the success rules the run was recorded, and so re-decided, under (see SUCCESS_RULES)
    rules: int = SUCCESS_RULES
    #: why nothing was re-decided: the machine's own modules (a user guard) do not import
    #: here (None: replay ran). Everything else a review shows needs only the journal.
    not_run: str | None = None


def replay_events(
    run: RunRow,
    events: Sequence[Event],
    *,
    machine: MachineSpec | None = None,
    budgets: Mapping[str, int | float | None] | None = None,
) -> ReplayReport:
    """Re-decide every journaled transition of `run` and compare; see the module docstring.

    `machine` (another declaration: its guards, edges, thrash limit and allow-list) or
    `budgets` (overrides) make it a counterfactual.
    """
    rules = events[0].snapshot.rules if events else SUCCESS_RULES
    source = f"journal:{run.run_id}"
    try:  # a fork's events: what it copied under its parent's declaration, the rest its own
        parts = stretches(run, events)
    except InvalidInputError as exc:
        return _unproven(run, events, machine, rules, str(exc))
    specs = []
    for part in parts:
        if len(parts) > 1 and text_sha256(part.text) != part.sha256:
            return _unproven(run, events, machine, rules, kept_wrong(events, part))
        try:  # re-deciding needs the user guards: the one import a review makes
            specs.append(parse_machine(part.text, source=source))
        except MachineSpecError as exc:
            shell = parse_machine(part.text, source=source, resolve=False)
            why = str(exc)
            return _not_run(
                run, journaled_halt(events), machine or shell, machine is not None, rules, why
            )
    overrides = counterfactual_overrides(run, machine, budgets)
    counterfactual = machine is not None or bool(overrides)
    steps: list[StepReport] = []
    for part, recorded in zip(parts, specs, strict=True):
        r = Replayer(compile_machine(machine or recorded), overrides, recorded)
        steps += _redecide_all(r, events[part.start : part.end], counterfactual)
        if steps and steps[-1].verdict in ("diverged", "halted_earlier", "needs_facts"):
            break
    report = _conclude(run, events, machine or specs[-1], steps, counterfactual, rules)
    if len(parts) == 1:
        return report
    return attrs.evolve(
        report, summary=report.summary + decided_under(events, parts, specs, machine)
    )


def _unproven(
    run: RunRow, events: Sequence[Event], machine: MachineSpec | None, rules: int, why: str
) -> ReplayReport:
    """A fork whose lineage cannot be used: nothing is proven."""
    return ReplayReport(
        run_id=run.run_id, machine=run.machine, machine_sha256=run.machine_sha256,
        counterfactual=machine is not None, steps=(), recorded_halt=journaled_halt(events),
        recomputed_halt=None, ok=False, rules=rules,
        summary=f"NOT proven: this run is a fork, and {why}",
    )  # fmt: skip


def counterfactual_overrides(
    run: RunRow,
    machine: MachineSpec | None,
    budgets: Mapping[str, int | float | None] | None,
) -> dict[str, Any]:
    """The snapshot fields a counterfactual replays under: other budgets (the run's with
    `budgets` applied), another declaration's thrash limit and allow-list."""
    overrides: dict[str, Any] = {}
    if budgets and any(v is not None for v in budgets.values()):
        overrides["budgets"] = make_budgets(attrs.asdict(run.budgets), budgets)
    if machine is not None:
        overrides["thrash_limit"] = machine.thrash_limit
        if machine.tools is not None:
            overrides["allowlist"] = machine.tools
    return overrides


def _not_run(
    run: RunRow,
    recorded: HaltReason | None,
    spec: MachineSpec,
    counterfactual: bool,
    rules: int,
    why: str,
) -> ReplayReport:
    """The report of a replay that could not re-decide anything: it says why, proves
    nothing, and leaves the rest of the review to the journal."""
    summary = (
        f"replay not run: {why}; re-deciding needs the machine's own modules (run it where"
        " they import, or with them on PYTHONPATH); everything else shown is from the journal"
    )
    return ReplayReport(
        run_id=run.run_id, machine=spec.name, machine_sha256=spec.sha256,
        counterfactual=counterfactual, steps=(), recorded_halt=recorded,
        recomputed_halt=None, ok=False, summary=summary, rules=rules, not_run=why,
    )  # fmt: skip


def _redecide_all(r: Replayer, events: Sequence[Event], counterfactual: bool) -> list[StepReport]:
    """Every event re-decided, up to the first that leaves the recorded path."""
    steps: list[StepReport] = []
    # Re-deciding builds many small values that all live until the report: the cyclic GC
    # only slows that down (as in decoding, `fsm_agent.stores.codec.events`).
    enabled = gc.isenabled()
    gc.disable()
    try:
        for event in events:
            report = redecide(r, event)
            if not counterfactual and report.verdict in ("halted_earlier", "needs_facts"):
                report = attrs.evolve(report, verdict="diverged")  # as recorded, any change is one
            steps.append(report)
            if report.verdict in ("diverged", "halted_earlier", "needs_facts"):
                break
    finally:
        if enabled:
            gc.enable()
    return steps


def _conclude(
    run: RunRow,
    events: Sequence[Event],
    spec: MachineSpec,
    steps: list[StepReport],
    counterfactual: bool,
    rules: int,
) -> ReplayReport:
    last = steps[-1] if steps else None
    recorded = journaled_halt(events)  # the chained events', never the editable row's
    recomputed = last.recomputed_halt if last is not None else None
    ok = (
        last is not None
        and last.verdict in ("match", "external")
        and recorded is not None
        and recomputed == recorded
        and run.halt_reason == recorded
    )
    summary = _summary(recorded, run.status, last, len(steps), ok, spec)
    if run.halt_reason != recorded:
        row = run.halt_reason.value if run.halt_reason else f"no halt ({run.status})"
        journaled = recorded.value if recorded else "no halt"
        summary += (
            f"; the run's row says {row} but its journaled events say {journaled}: the row"
            " disagrees with the journal"
        )
    if rules < SUCCESS_RULES:
        summary += (
            f" under success rules {rules}, the rules it was recorded with"
            f" ({BEFORE.get(rules, f'before rules {SUCCESS_RULES}')}): not re-judged"
        )
    return ReplayReport(
        run_id=run.run_id, machine=spec.name, machine_sha256=spec.sha256,
        counterfactual=counterfactual, steps=tuple(steps), recorded_halt=recorded,
        recomputed_halt=recomputed, ok=ok, summary=summary, rules=rules,
    )  # fmt: skip


def journaled_halt(events: Sequence[Event]) -> HaltReason | None:
    """The halt the run's journaled events end with (None: they end in no halt)."""
    return events[-1].halt if events else None


def _summary(
    recorded: HaltReason | None,
    status: str,
    last: StepReport | None,
    n: int,
    ok: bool,
    spec: MachineSpec,
) -> str:
    if last is None:
        return "the journal holds no events for this run"
    where = f"seq {last.seq} (step {last.step}/{last.max_steps}, {last.source} → {last.dest})"
    if ok:
        return f"replay matches: {n} transitions re-decided, halt {recorded} proven"
    if last.verdict == "halted_earlier":
        return f"would have halted {last.recomputed_halt} at {where}: {last.detail}"
    if last.verdict == "diverged":
        return f"diverges at {where}: {last.detail}"
    if last.verdict == "needs_facts":
        text = f"needs facts the journal does not hold, at {where}: {last.detail}"
        if last.recorded_halt is None and last.recomputed_dest != last.dest:
            return text  # it leaves the path mid-run: the detail names the first missing fact
        return f"{text}; the run would go on past the recorded halt, and {_next_fact(last, spec)}"
    if recorded is None:
        return f"every recorded decision matches, but the run never halted (status {status})"
    return f"every decision matches, but the journaled halt {recorded} was not reached"


def _next_fact(last: StepReport, spec: MachineSpec) -> str:
    """The first fact a run that goes on past its recorded halt lacks: what the state it
    would now be in does next."""
    dest = last.recomputed_dest or last.source
    state = next((st for st in spec.states if st.name == dest), None)
    if state is None or state.action == "model":
        return f"step {last.step + 1}'s model reply was never recorded"
    return f"what {state.name!r} ({state.action}) would have done next was never recorded"


def with_chain(report: ReplayReport, chain: ChainReport | None) -> ReplayReport:
    """The replay verdict with the hash chain's: decisions can all match on edited facts,
    so a run whose chain does not verify is never proven."""
    if chain is None or chain.ok:
        return report
    return attrs.evolve(
        report, ok=False, summary=f"{report.summary}; NOT proven: {chain.verdict()}"
    )


def load_run(path: str | os.PathLike[str], run_id: str | None = None) -> tuple[RunRow, list[Event]]:
    """A run and its events from a run file (`fsm-agent export`) or, by id, a journal (a
    SQLite file or a postgresql:// DSN)."""
    from fsm_agent.stores import open_store
    from fsm_agent.stores.dsn import is_dsn, redact_dsn

    if not is_dsn(path):
        location = Path(path)
        if not location.exists():
            raise InvalidInputError(f"no such run file or journal: {location}")
        if location.suffix == ".json":
            from fsm_agent.journal.runfile import read_run_file

            run_file = read_run_file(location)
            if run_id is not None and run_id != run_file.run.run_id:
                raise InvalidInputError(f"{location} holds run {run_file.run.run_id}, not {run_id}")
            return run_file.run, list(run_file.events)
    if run_id is None:
        raise InvalidInputError(f"{redact_dsn(str(path))} is a journal: say which run to replay")
    store = open_store(path, read_only=True)  # a read: never created, migrated or written
    try:
        return store.get_run(run_id), store.events(run_id)
    finally:
        store.close()
