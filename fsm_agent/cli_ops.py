"""Operations commands: verify the journal's hash chain, pause and resume runs.

Registered on the `fsm-agent` group by `fsm_agent.cli`; a thin layer like the rest of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from fsm_agent import serde
from fsm_agent.chain import ChainReport, verify_run
from fsm_agent.cli import cli, finish, paused_or, progress_line
from fsm_agent.cli_options import (
    cli_errors,
    db_option,
    journal_store,
    json_option,
    model_options,
    shell_arg,
    shown,
)
from fsm_agent.errors import InvalidInputError
from fsm_agent.journal import Event
from fsm_agent.models import ModelAdapter
from fsm_agent.record import DEFAULT_RECORD_PATH
from fsm_agent.runfile import read_run_file, verify_run_file
from fsm_agent.tools import ToolRegistry, load_tools


def _verify_reports(source: str | None, all_runs: bool, db: str) -> list[ChainReport]:
    if source is not None and all_runs:
        raise InvalidInputError("give a RUN_ID or FILE, or --all, not both")
    if source is not None and (source.endswith(".json") or Path(source).is_file()):
        return [verify_run_file(read_run_file(source, checked=False))]
    if source is None and not all_runs:
        raise InvalidInputError("give a RUN_ID, a run FILE, or --all")
    with journal_store(db, must_exist=True) as store:
        ids = store.run_ids() if source is None else [source]
        return [verify_run(store, run_id) for run_id in ids]


@cli.command()
@click.argument("source", required=False)
@click.option("--all", "all_runs", is_flag=True, help="Verify every run in the journal.")
@db_option
@json_option
@cli_errors
def verify(source: str | None, all_runs: bool, db: str, as_json: bool) -> None:
    """Check the hash chain of a run (RUN_ID or an exported FILE), or of --all runs.

    Reports the first sequence number of each kind of tampering (edited, deleted, inserted,
    reordered, truncated, run_edited, unchained); exit 1 if any run fails.
    """
    reports = _verify_reports(source, all_runs, db)
    if as_json:
        click.echo(json.dumps([serde.unstructure(r) | {"ok": r.ok} for r in reports], indent=2))
    else:
        for r in reports:
            if r.ok:
                click.echo(f"ok        {r.run_id}  {r.events} events  head {r.head_hash}")
                continue
            click.echo(f"TAMPERED  {r.run_id}  {r.events} events")
            for f in r.findings:
                click.echo(f"  seq {f.seq}: {f.kind}: {f.detail}")
        bad = sum(not r.ok for r in reports)
        click.echo(f"{len(reports) - bad} of {len(reports)} runs verify" + (
            f"; {bad} do not" if bad else ""))  # fmt: skip
    if any(not r.ok for r in reports):
        raise click.exceptions.Exit(1)


@cli.command()
@click.argument("run_id")
@click.option("--why", required=True, help="Why (journaled with the act).")
@click.option("--who", help="Who pauses it (default: the login name).")
@db_option
@cli_errors
def pause(run_id: str, why: str, who: str | None, db: str) -> None:
    """Pause a live run: before its next model call it journals the pause and its process
    ends; the run waits, with its frozen budgets, for `fsm-agent resume RUN_ID`."""
    from fsm_agent.cli_review import signed_control

    with journal_store(db, must_exist=True) as store:
        run = store.get_run(run_id)
        if run.status != "running":
            job = store.job(run_id)
            queued = job is not None and job.status == "queued"
            hint = f" (it waits in the run queue: `fsm-agent dequeue {run_id}` takes it out)"
            raise InvalidInputError(
                f"run {run_id} is {run.status}; only a running run pauses"
                + (hint if queued else "")
            )
        number = store.add_control(signed_control(run_id, "pause", {}, who, why))
    click.echo(
        f"pause of {run_id} queued (#{number}); the run stops before its next model call."
        f" Continue it with: fsm-agent resume {run_id} --db {shell_arg(db)} --model …"
    )


@cli.command()
@click.argument("run_id")
@model_options
@click.option("--tools", "tools_module", help="Module exposing TOOLS = ToolRegistry(...).")
@db_option
@click.option(
    "--trace-copy",
    type=click.Path(dir_okay=False),
    help="Ship a run file of the whole run here before it may halt (as for `run`).",
)
@click.option(
    "--record",
    "record_path",
    default=DEFAULT_RECORD_PATH,
    show_default=True,
    help="Where the halt record JSON is written.",
)
@json_option
@click.option("--quiet", "-q", is_flag=True, help="No live step lines on stderr.")
@cli_errors
def resume(
    run_id: str,
    model: ModelAdapter,
    tools_module: str | None,
    db: str,
    trace_copy: str | None,
    record_path: str,
    as_json: bool,
    quiet: bool,
) -> None:
    """Continue an interrupted or paused run from its last committed transition, with the
    same frozen budgets. A tool call with no journaled receipt is re-issued only if the tool
    is idempotent; otherwise the run ends in handoff (side_effect_unknown).

    Exit codes as for `run`; 75 if it is paused again.
    """
    from fsm_agent.worker import resume_run

    tools = load_tools(tools_module) if tools_module else ToolRegistry()
    with journal_store(db, must_exist=True) as store:
        live = progress_line(quiet)

        def on_transition(event: Event) -> None:
            # Said once the run is this process's (a refused resume says only `Error: …`).
            if event.kind == "resumed" and not as_json:
                click.echo(f"run {run_id} resumed from {event.dest} (journal {shown(db)})")
            live(event)

        record = paused_or(
            lambda: resume_run(
                run_id,
                model=model,
                tools=tools,
                store=store,
                record_path=record_path,
                on_transition=on_transition,
                trace_copy=trace_copy,
            )
        )
    finish(record, record_path, as_json)
