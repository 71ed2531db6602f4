"""`fsm-agent run`, `validate` and `demo`: a thin layer over the library.

`fsm_agent.halt.run_exit_codes` lists every code `run` returns (its help prints them).
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
from fsm_agent.cli.group import cli
from fsm_agent.cli.options import (
    InternalProblem,
    OutputPath,
    allow_option,
    budget_options,
    cli_errors,
    db_option,
    here,
    journal_store,
    json_option,
    model_options,
    record_option,
    refuse_overlaps,
    shell_arg,
    shown,
)
from fsm_agent.cli.run_output import finish, paused_or, progress_line
from fsm_agent.cli.traces import live_traces, otel_options, traced
from fsm_agent.declaration.load import load_machine
from fsm_agent.halt import run_exit_codes
from fsm_agent.journal.store import Event
from fsm_agent.redaction import run_secrets
from fsm_agent.runtime.contract import allow_list
from fsm_agent.runtime.tools import ToolRegistry, load_tools
from fsm_agent.runtime.worker import run as run_machine


def _run_help() -> str:
    import textwrap

    codes = "\n".join(
        textwrap.fill(text, 78, initial_indent=f"  {code:<6} ", subsequent_indent=" " * 9)
        for code, text in run_exit_codes().items()
    )
    return (
        "Run TASK on MACHINE (a declared name or a .yaml path) until it halts.\n\n"
        "Prints the run id, a live `step N/M` line per transition (stderr), and the halt."
        " With --otel, each step is also sent as OpenTelemetry spans as it is journaled,"
        " and the run's root span when it halts.\n\n"
        f"\b\nExit codes:\n{codes}"
    )


@cli.command(help=_run_help())
@click.argument("machine")
@click.option("--task", required=True, help="What the agent is asked to do.")
@model_options
@click.option("--tools", "tools_module", help="Module exposing TOOLS = ToolRegistry(...).")
@allow_option
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
@record_option
@otel_options
@json_option
@click.option("--quiet", "-q", is_flag=True, help="No live step lines on stderr.")
@cli_errors
def run(
    machine: str,
    task: str,
    model: ModelAdapter,
    tools_module: str | None,
    allow: tuple[str, ...] | None,
    db: str,
    budgets: dict[str, int | float | None],
    thrash_limit: int | None,
    trace_copy: str | None,
    policy_path: str | None,
    record_path: str,
    otel: bool,
    otel_content: bool,
    as_json: bool,
    quiet: bool,
    secret_env: tuple[str, ...],
) -> None:
    """Run TASK on MACHINE until it halts (the help, with every exit code: `_run_help`)."""
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
    allow_list(spec.tools, tools.names(), allow)  # a grant that cannot stand: before any file
    live = progress_line(quiet)

    def started(event: Event) -> None:
        if event.kind == "started" and not as_json:
            click.echo(f"run {event.run_id} started ({spec.name}, journal {shown(db)})")

    secrets = run_secrets(secret_env, model)
    with live_traces(otel, otel_content, db, secrets) as tracer, journal_store(db) as store:
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
                on_transition=traced(tracer, started, live),
                trace_copy=trace_copy,
                secret_env=secret_env,
                allow=allow,
            )
        )
        if tracer is not None:
            tracer.on_halt(record)
    finish(record, record_path, as_json)


@cli.command()
@click.argument("machine")
@json_option
@cli_errors
def validate(machine: str, as_json: bool) -> None:
    """Load and check MACHINE (a declared name or a .yaml path); exit 2 with the error."""
    spec = load_machine(machine)
    declared = [t for t in spec.transitions if not t.implicit]
    if as_json:
        data = {"ok": True, "machine": spec.name, "states": len(spec.states),
                "transitions": len(declared), "sha256": spec.sha256,
                "source": str(spec.source)}  # fmt: skip
        click.echo(json.dumps(data, indent=2))
        return
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
@json_option
@cli_errors
def demo(db: str, records_dir: str | None, as_json: bool) -> None:
    """Run every example scenario and print how each one halted."""
    from fsm_agent.examples.scenarios import SCENARIOS, run_scenario

    refuse_overlaps(db, {"--records": records_dir})
    say = (lambda line: None) if as_json else click.echo
    results: list[dict[str, Any]] = []
    with contextlib_tempdir(records_dir) as folder, journal_store(db) as store:
        say(f"journal: {shown(db)}   records: {folder}")
        say(f"{'SCENARIO':<31}  {'STATE':<16}  {'HALT REASON':<17}  {'STEPS':>5}  OK   RUN")
        for n, scenario in enumerate(SCENARIOS, 1):
            record = run_scenario(scenario, store=store, record_path=folder / f"{n:02d}.json")
            ok = record.halt_reason is scenario.expected
            results.append({"scenario": scenario.name, "state": record.terminal_state,
                            "halt_reason": record.halt_reason.value,
                            "expected": scenario.expected.value, "ok": ok,
                            "steps_used": record.steps_used, "max_steps": record.max_steps,
                            "run_id": record.run_id})  # fmt: skip
            steps = f"{record.steps_used}/{record.max_steps}"
            say(
                f"{scenario.name:<31}  {record.terminal_state:<16}"
                f"  {record.halt_reason.value:<17}  {steps:>5}  {'yes' if ok else 'NO ':<3}"
                f"  {record.run_id}"
            )
    wrong = [f"{r['scenario']}: {r['halt_reason']}" for r in results if not r["ok"]]
    if as_json:
        data = {"journal": shown(db), "records": records_dir, "ok": not wrong,
                "scenarios": results}  # fmt: skip
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(f"{len(SCENARIOS)} scenarios; inspect one with: fsm-agent show RUN_ID"
                   f" --db {shell_arg(db)}")  # fmt: skip
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
