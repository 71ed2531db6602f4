"""The `fsm-agent` command: a thin layer over the library.

Library errors become `Error: …` and an exit code at one boundary (`cli_options.cli_errors`):
0 the run reached `done`; 3 `budget_exhausted`; 4 `handoff`; 2 invalid input; 70 internal
error; 75 paused; 128+N when signal N interrupted the run.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from fsm_agent import serde
from fsm_agent.cli_options import (
    InternalProblem,
    OutputPath,
    budget_options,
    cli_errors,
    db_option,
    journal_store,
    json_option,
    model_options,
    read_journal,
    refuse_overlaps,
    shell_arg,
    shown,
)
from fsm_agent.errors import RunPaused
from fsm_agent.halt import EXIT_PAUSED, HaltReason, exit_code
from fsm_agent.journal import Event, RunRow
from fsm_agent.models import ModelAdapter
from fsm_agent.record import DEFAULT_RECORD_PATH, HaltRecord, record_json
from fsm_agent.snapshot import SUCCESS_RULES
from fsm_agent.spec import load_machine
from fsm_agent.tools import ToolRegistry, load_tools
from fsm_agent.worker import run as run_machine


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="fsm-agent")
def cli() -> None:
    """Run AI agents as declared finite-state machines; every halt is named and journaled."""


def progress_line(quiet: bool) -> Callable[[Event], None]:
    """The live `step 3/8` line of each transition, against the cap in force (an operator
    may have raised it since the start)."""

    def show(event: Event) -> None:
        if quiet or event.kind != "transition":
            return
        steps, cap = event.snapshot.meters.steps_used, event.snapshot.budgets.max_steps
        line = f"step {steps}/{cap}  {event.source} → {event.dest}  [{event.trigger}]"
        if event.halt is not None:
            line += f"  halt: {event.halt.value}"
        # A closed terminal or pipe must not change how the run ends.
        with contextlib.suppress(OSError):
            click.echo(line, err=True)

    return show


def _summary(record: HaltRecord) -> str:
    lines = [
        f"halted: {record.halt_reason.value} ({record.terminal_state})"
        f" after {record.steps_used}/{record.max_steps} steps,"
        f" {len(record.tool_calls)} tool call(s), {record.meters.elapsed_ms} ms",
    ]
    if record.answer is not None:
        lines.append(f"answer: {record.answer}")
    if record.grounded_by:
        lines.append(f"grounded by: {', '.join(record.grounded_by)}")
    if record.error:
        lines.append(f"why: {record.error}")
    lines += [
        f"without complete receipts: {call}"
        for call in record.unreceipted
        if call not in (record.error or "")
    ]
    if record.success_rules < SUCCESS_RULES:
        lines.append(f"decided under success rules {record.success_rules} (before {SUCCESS_RULES})")
    return "\n".join(lines)


@cli.command()
@click.argument("machine")
@click.option("--task", required=True, help="What the agent is asked to do.")
@model_options
@click.option("--tools", "tools_module", help="Module exposing TOOLS = ToolRegistry(...).")
@db_option
@budget_options
@click.option("--thrash-limit", type=int, help="Halt after N identical tool calls in a row.")
@click.option(
    "--trace-copy",
    type=OutputPath(),
    help="Ship a run file of the whole run here before it may halt; a failed copy is never"
    " reported as done.",
)
@click.option(
    "--policy",
    "policy_path",
    type=click.Path(dir_okay=False),
    help="Halt policy file (halt-policy.yml); checked strictly, fails closed.",
)
@click.option(
    "--record",
    "record_path",
    type=OutputPath(),
    default=DEFAULT_RECORD_PATH,
    show_default=True,
    help="Where the halt record JSON is written (never over the journal, a directory or a device).",
)
@json_option
@click.option("--quiet", "-q", is_flag=True, help="No live step lines on stderr.")
@cli_errors
def run(
    machine: str,
    task: str,
    model: ModelAdapter,
    tools_module: str | None,
    db: str,
    budgets: dict[str, int | float | None],
    thrash_limit: int | None,
    trace_copy: str | None,
    policy_path: str | None,
    record_path: str,
    as_json: bool,
    quiet: bool,
    secret_env: tuple[str, ...],
) -> None:
    """Run TASK on MACHINE (a declared name or a .yaml path) until it halts.

    Prints the run id, a live `step N/M` line per transition (stderr), and the halt.
    Exit code: 0 done, 3 budget_exhausted, 4 handoff, 2 invalid input, 70 internal error.
    """
    refuse_overlaps(
        db,
        {"--record": record_path, "--trace-copy": trace_copy},
        {"MACHINE": machine, "--policy": policy_path},
    )
    spec = load_machine(machine)
    control = None
    if policy_path is not None:
        from fsm_agent.policy import load_policy

        control = load_policy(policy_path).control_plane_for_runtime()
    tools = load_tools(tools_module) if tools_module else ToolRegistry()
    live = progress_line(quiet)

    def on_transition(event: Event) -> None:
        if event.kind == "started" and not as_json:
            click.echo(f"run {event.run_id} started ({spec.name}, journal {shown(db)})")
        live(event)

    with journal_store(db) as store:
        record = paused_or(
            lambda: run_machine(
                spec,
                task=task,
                model=model,
                tools=tools,
                store=store,
                budgets=budgets,
                record_path=record_path,
                thrash_limit=thrash_limit,
                control=control,
                on_transition=on_transition,
                trace_copy=trace_copy,
                secret_env=secret_env,
            )
        )
    finish(record, record_path, as_json)


def paused_or(drive: Callable[[], HaltRecord]) -> HaltRecord:
    """Drive a run; if a person pauses it, say how to continue it and exit 75."""
    try:
        return drive()
    except RunPaused as exc:
        click.echo(f"{exc}; continue it with: fsm-agent resume {exc.run_id} --model …")
        sys.exit(EXIT_PAUSED)


def finish(record: HaltRecord, record_path: str, as_json: bool) -> None:
    """Print how a run halted and exit with its code."""
    if as_json:
        click.echo(record_json(record), nl=False)
    else:
        click.echo(_summary(record))
        click.echo(f"record: {record_path}")
    sys.exit(exit_code(record.halt_reason, record.signal))


def _run_dict(row: RunRow) -> dict[str, Any]:
    from fsm_agent.resume import shown_status

    data: dict[str, Any] = serde.unstructure(row)
    data.pop("machine_text")
    data.pop("record")
    data["shown_status"] = shown_status(row)  # `interrupted` when its process is gone
    return data


RUNS_HEADER = ("RUN", "MACHINE", "HALT", "STEPS", "STARTED")


@cli.command()
@db_option
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1))
@json_option
@cli_errors
def runs(db: str, limit: int, as_json: bool) -> None:
    """List recent runs: id, machine, halt reason, steps used/max, start time."""
    with read_journal(db) as store:
        rows = store.list_runs(limit)
    if as_json:
        click.echo(json.dumps([_run_dict(r) for r in rows], indent=2))
        return
    if not rows:
        click.echo(f"no runs in {shown(db)}")
        return
    from fsm_agent.resume import shown_status

    table = []
    for r in rows:
        reason = r.halt_reason.value if r.halt_reason else f"({shown_status(r)})"
        cap = r.record.max_steps if r.record is not None else r.budgets.max_steps  # raised?
        table.append((r.run_id, r.machine, reason, f"{r.steps_used}/{cap}", r.started_at))
    widths = [max(len(row[i]) for row in [RUNS_HEADER, *table]) for i in range(4)]
    widths[2] = max(widths[2], max(len(h.value) for h in HaltReason))  # every reason fits
    for row in [RUNS_HEADER, *table]:
        rid, machine, reason, steps, started = row
        click.echo(
            f"{rid:<{widths[0]}}  {machine:<{widths[1]}}  {reason:<{widths[2]}}"
            f"  {steps:>{widths[3]}}  {started}"
        )


@cli.command()
@click.argument("run_id")
@db_option
@json_option
@cli_errors
def show(run_id: str, db: str, as_json: bool) -> None:
    """Show one run: its halt record, then every transition with its guards."""
    from fsm_agent.chain import verify_run

    with read_journal(db) as store:
        row = store.get_run(run_id)
        events = store.events(run_id)
        chain = verify_run(store, run_id)
    if as_json:
        data = {
            "run": _run_dict(row),
            "record": serde.unstructure(row.record),
            "events": [serde.unstructure(e) for e in events],
            "chain": serde.unstructure(chain) | {"ok": chain.ok},
        }
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"run {row.run_id}  machine {row.machine}  ({row.machine_sha256[:12]})")
    click.echo(f"task: {row.task}")
    if row.record is None:
        from fsm_agent.resume import shown_status

        status = shown_status(row)
        hint = f"; resume with: fsm-agent resume {row.run_id}" if status != "running" else ""
        click.echo(f"status: {status} in {row.state} (no halt record yet{hint})")
    else:
        click.echo(_summary(row.record))
    click.echo(chain.verdict())
    click.echo("")
    click.echo(f"{'SEQ':>4}  {'STEP':>5}  TRANSITION")
    from fsm_agent.replay_view import event_lines

    for e in events:
        click.echo("\n".join(event_lines(e)))


@cli.command()
@click.argument("machine")
@cli_errors
def validate(machine: str) -> None:
    """Load and check MACHINE (a declared name or a .yaml path); exit 2 with the error."""
    spec = load_machine(machine)
    declared = [t for t in spec.transitions if not t.implicit]
    click.echo(
        f"ok: {spec.name} ({len(spec.states)} states, {len(declared)} transitions,"
        f" sha256 {spec.sha256[:12]}) from {spec.source}"
    )


@cli.command()
@db_option
@click.option(
    "--records",
    "records_dir",
    type=OutputPath(directory=True),
    help="Directory for the halt records (default: a temporary directory).",
)
@cli_errors
def demo(db: str, records_dir: str | None) -> None:
    """Run every example scenario and print how each one halted."""
    from examples.scenarios import SCENARIOS, run_scenario

    refuse_overlaps(db, {"--records": records_dir})
    with contextlib_tempdir(records_dir) as folder, journal_store(db) as store:
        click.echo(f"journal: {shown(db)}   records: {folder}")
        header = f"{'SCENARIO':<31}  {'STATE':<16}  {'HALT REASON':<17}  {'STEPS':>5}  OK   RUN"
        click.echo(header)
        wrong = []
        for n, scenario in enumerate(SCENARIOS, 1):
            record = run_scenario(scenario, store=store, record_path=folder / f"{n:02d}.json")
            ok = record.halt_reason is scenario.expected
            if not ok:
                wrong.append(f"{scenario.name}: {record.halt_reason.value}")
            steps = f"{record.steps_used}/{record.max_steps}"
            click.echo(
                f"{scenario.name:<31}  {record.terminal_state:<16}"
                f"  {record.halt_reason.value:<17}  {steps:>5}  {'yes' if ok else 'NO ':<3}"
                f"  {record.run_id}"
            )
    click.echo(
        f"{len(SCENARIOS)} scenarios; inspect one with: fsm-agent show RUN_ID --db {shell_arg(db)}"
    )
    if wrong:
        raise InternalProblem("unexpected halts: " + "; ".join(wrong))


@contextmanager
def contextlib_tempdir(path: str | None) -> Iterator[Path]:
    if path is not None:
        Path(path).mkdir(parents=True, exist_ok=True)
        yield Path(path)
        return
    with tempfile.TemporaryDirectory(prefix="fsm-agent-demo-") as tmp:
        yield Path(tmp)


def main() -> None:
    cli(prog_name="fsm-agent")


# The incident-review, operations and schema commands register themselves on `cli`.
from fsm_agent import cli_ops, cli_queue, cli_review, cli_schema  # noqa: E402, F401
