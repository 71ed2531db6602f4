"""The `fsm-agent` command: a thin layer over the library.

Library errors become `Error: …` and an exit code at one boundary (`cli_options.cli_errors`):
0 the run reached `done`; 3 `budget_exhausted`; 4 `handoff`; 2 invalid input; 70 internal
error; 75 paused; 128+N when signal N interrupted the run.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from fsm_agent.adapters.models import ModelAdapter
from fsm_agent.cli.group import cli, finish, paused_or, progress_line, summary
from fsm_agent.cli.options import (
    InternalProblem,
    OutputPath,
    budget_options,
    cli_errors,
    db_option,
    here,
    journal_store,
    json_option,
    model_options,
    read_journal,
    refuse_overlaps,
    shell_arg,
    shown,
)
from fsm_agent.declaration.load import load_machine
from fsm_agent.halt import HaltReason
from fsm_agent.journal import serde
from fsm_agent.journal.store import Event, RunRow
from fsm_agent.runtime.record import DEFAULT_RECORD_PATH
from fsm_agent.runtime.tools import ToolRegistry, load_tools
from fsm_agent.runtime.worker import run as run_machine


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
        from fsm_agent.declaration.policy import load_policy

        control = load_policy(policy_path).control_plane_for_runtime()
    tools = load_tools(tools_module, here()) if tools_module else ToolRegistry()
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


def _run_dict(row: RunRow) -> dict[str, Any]:
    from fsm_agent.runtime.resume import shown_status

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
    from fsm_agent.runtime.resume import shown_status

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
    from fsm_agent.journal.chain import verify_run

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
        from fsm_agent.runtime.resume import shown_status

        status = shown_status(row)
        hint = f"; resume with: fsm-agent resume {row.run_id}" if status != "running" else ""
        click.echo(f"status: {status} in {row.state} (no halt record yet{hint})")
    else:
        click.echo(summary(row.record))
    click.echo(chain.verdict())
    click.echo("")
    click.echo(f"{'SEQ':>4}  {'STEP':>5}  TRANSITION")
    from fsm_agent.review.view import event_lines

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
    from fsm_agent.examples.scenarios import SCENARIOS, run_scenario

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


# The incident-review and operations commands register themselves on `cli`.
from fsm_agent.cli import ops as cli_ops  # noqa: E402, F401
from fsm_agent.cli import queue as cli_queue  # noqa: E402, F401
from fsm_agent.cli import review as cli_review  # noqa: E402, F401

__all__ = ["cli", "main"]
