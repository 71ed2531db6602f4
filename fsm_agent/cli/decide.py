"""People in the loop: `approve`, `deny` and `answer` a run that waits in handoff.

Each journals the person's decision as one chained event and goes on with the same run from
the journal (`fsm_agent.runtime.decisions`), on any host that holds it; like `resume`, it
needs the model and the tools module again. Registered on the `fsm-agent`
group when imported (`fsm_agent.cli.group.COMMANDS`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from fsm_agent.adapters.models import ModelAdapter
from fsm_agent.cli.group import cli
from fsm_agent.cli.options import (
    OutputPath,
    cli_errors,
    db_option,
    here,
    journal_store,
    json_option,
    model_or_temporal_options,
    record_option,
    refuse_overlaps,
    say_result,
    shown,
    temporal_option,
)
from fsm_agent.cli.run_output import finish, paused_or, progress_line
from fsm_agent.cli.traces import live_traces, otel_options, traced
from fsm_agent.journal.store import Event
from fsm_agent.redaction import run_secrets
from fsm_agent.run_ids import resolve_run_id
from fsm_agent.runtime.decided import Act
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.runtime.tools import ToolRegistry, load_tools


def _decision_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """What every decision takes: who and why, the model and tools to go on with, and the
    options `resume` has."""
    for option in reversed(
        (
            click.argument("run_id"),
            click.option("--why", required=True, help="Why (journaled with the decision)."),
            click.option("--by", help="Who decides (default: the login name)."),
            model_or_temporal_options,
            temporal_option,
            click.option(
                "--tools", "tools_module", help="Module exposing TOOLS = ToolRegistry(...)."
            ),
            db_option,
            click.option(
                "--trace-copy",
                type=OutputPath(),
                help="Ship a run file of the whole run here before it may halt (as for `run`).",
            ),
            record_option,
            otel_options,
            json_option,
            click.option("--quiet", "-q", is_flag=True, help="No live step lines on stderr."),
            cli_errors,
        )
    ):
        fn = option(fn)
    return fn


def decided_record(run_id: str, act: Act, **kwargs: Any) -> HaltRecord:
    """`decide_run` with a model: it always goes on, so it always has a record."""
    from fsm_agent.runtime.decisions import decide_run

    record = decide_run(run_id, act, **kwargs)
    assert record is not None  # noqa: S101 - given a model, the run is driven to a stop
    return record


def _decide(act: Act, run_id: str, options: dict[str, Any]) -> None:
    """Journal the decision and go on with the run until its next stop; exit as `run`."""
    db, record_path, as_json = options["db"], options["record_path"], options["as_json"]
    if options["temporal"] is not None:
        _decide_on_temporal(act, run_id, options)
        return
    model: ModelAdapter = options["model"]
    refuse_overlaps(db, {"--record": record_path, "--trace-copy": options["trace_copy"]})
    module = options["tools_module"]
    tools = load_tools(module, here()) if module else ToolRegistry()
    secrets = run_secrets(options["secret_env"], model)
    with (
        live_traces(options["otel"], options["otel_content"], db, secrets) as tracer,
        journal_store(db, must_exist=True) as store,
    ):
        run_id = resolve_run_id(store, run_id)

        def decided(event: Event) -> None:
            if event.kind == "decided" and not as_json:
                click.echo(f"run {run_id}: {event.note}; it goes on in {event.dest}"
                           f" (journal {shown(db)})")  # fmt: skip

        on_transition = traced(tracer, decided, progress_line(options["quiet"]))
        record = paused_or(
            lambda: decided_record(
                run_id,
                act,
                why=options["why"],
                by=options["by"],
                text=options.get("text"),
                call=options.get("call"),
                model=model,
                tools=tools,
                store=store,
                record_path=record_path,
                on_transition=on_transition,
                trace_copy=options["trace_copy"],
                secret_env=options["secret_env"],
            )
        )
        if tracer is not None:
            tracer.on_halt(record)
    finish(record, record_path, as_json)


def _decide_on_temporal(act: Act, run_id: str, options: dict[str, Any]) -> None:
    """Journal the decision (the run left paused, as the console's), then go on with the
    run as a Temporal workflow: its workers' model and tools."""
    from fsm_agent.cli.temporal import resume_on
    from fsm_agent.runtime.decisions import decide_run

    db, address = options["db"], options["temporal"]
    with journal_store(db, must_exist=True) as store:
        run_id = resolve_run_id(store, run_id)
        decide_run(run_id, act, why=options["why"], by=options["by"], text=options.get("text"),
                   call=options.get("call"), model=None, store=store)  # fmt: skip
    resume_on(address, db, run_id)
    said = f"run {run_id}: {act} journaled; it goes on as a Temporal workflow ({address})"
    say_result(options["as_json"], {"run_id": run_id, "decided": act, "temporal": address}, said)


_CALL = click.option(
    "--call",
    help="The frozen call's sha256 (or its first 8+ hex digits), as `show` prints it: the"
    " decision is refused if the run waits on another call.",
)


@cli.command()
@_CALL
@_decision_options
def approve(run_id: str, **options: Any) -> None:
    """Approve the call a waiting run froze: it runs exactly as frozen (the approval lets
    that one call run), and the run goes on from the journal until its next stop.

    Exit codes as for `run`; 2 (nothing journaled) if the run does not wait for an approval,
    waits on another call, or was decided first by someone else."""
    _decide("approve", run_id, options)


@cli.command()
@_CALL
@_decision_options
def deny(run_id: str, **options: Any) -> None:
    """Deny the call a waiting run froze: it is not run, and the run goes back to the model
    with the denial (who, why) as its next observation.

    Exit codes as for `run`; 2 (nothing journaled) as for `approve`."""
    _decide("deny", run_id, options)


@cli.command()
@click.option("--text", required=True, help="The answer (the model's next observation).")
@_decision_options
def answer(run_id: str, **options: Any) -> None:
    """Answer the question a waiting run asked (a handoff the model requested): the run goes
    back to the model with the answer as its next observation.

    Exit codes as for `run`; 2 (nothing journaled) if the run does not wait for an answer."""
    _decide("answer", run_id, options)


@cli.command("expire-waits")
@db_option
@json_option
@cli_errors
def expire_waits(db: str, as_json: bool) -> None:
    """End every run that waits for a person's decision past its machine's wait_limit_ms
    (halt wait_expired, its record in the journal): run it from a timer or cron, so that a
    wait nobody answers ends without anyone acting on the run. Exit 0."""
    from fsm_agent.runtime.decisions import expire_waits as sweep

    with journal_store(db, must_exist=True) as store:
        ended = sweep(store)
    if as_json:
        click.echo(json.dumps([r.run_id for r in ended]))
        return
    for record in ended:
        click.echo(f"run {record.run_id}: {record.error or 'wait_expired'}")
    click.echo(f"{len(ended)} waiting run(s) past their wait limit ended wait_expired")
