"""Run-queue commands: submit runs, run a worker that leases them, list the queue.

Registered on the `fsm-agent` group by `fsm_agent.cli.main`; a thin layer over
`fsm_agent.queue.submission` like the rest of it.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable

import attrs
import click

from fsm_agent.adapters.models import ModelAdapter
from fsm_agent.cli.group import cli
from fsm_agent.cli.options import (
    OutputPath,
    allow_option,
    budget_options,
    cli_errors,
    db_option,
    here,
    journal_store,
    json_option,
    model_factory_options,
    read_journal,
    refuse_overlaps,
    say_result,
    shell_arg,
    shown,
    temporal_option,
)
from fsm_agent.cli.traces import live_traces, otel_options
from fsm_agent.errors import InvalidInputError
from fsm_agent.journal import serde
from fsm_agent.journal.store import Job, JobStatus
from fsm_agent.queue.submission import DEFAULT_DRAIN_S, DEFAULT_LEASE_S, DEFAULT_RECORDS
from fsm_agent.queue.submission import submit as submit_job
from fsm_agent.redaction import env_secrets, run_secrets
from fsm_agent.run_ids import check_run_id, shown_run_id


@cli.command()
@click.argument("machine")
@click.option("--task", required=True, help="What the agent is asked to do.")
@budget_options
@click.option(
    "--run-id",
    help="The run's id (default: 12 random hex digits): 1 to 64 of A-Z a-z 0-9 . _ -, a letter"
    " or digit first; refused if the journal has it already.",
)
@click.option(
    "--secret-env",
    "secret_env",
    metavar="NAME",
    multiple=True,
    help="The NAME of an environment variable whose value is a secret: redacted as"
    " [redacted:NAME] from the task before it is queued (give it to the worker too, for"
    " what the run gets back). Repeatable.",
)
@temporal_option
@db_option
@json_option
@cli_errors
def submit(
    machine: str,
    task: str,
    budgets: dict[str, int | float | None],
    run_id: str | None,
    secret_env: tuple[str, ...],
    temporal: str | None,
    db: str,
    as_json: bool,
) -> None:
    """Queue a run of MACHINE (a declared name or a .yaml path) for a worker; print its id.

    The declaration and the budgets (its defaults with these overrides) are checked and
    frozen now; `fsm-agent worker` runs it. With --temporal, the run starts as a Temporal
    workflow, served by `fsm-agent worker --temporal` (same --db).
    """
    if run_id is not None:
        check_run_id(run_id, where="--run-id")  # before the journal is opened
    env_secrets(secret_env)  # unset or too short: `Error: …`, exit 2, before the journal
    if temporal is not None:
        from fsm_agent.cli.temporal import submit_run

        rid = submit_run(temporal, db, machine, task, budgets, run_id, secret_env)
        say_result(as_json, {"run_id": rid, "machine": machine, "temporal": temporal}, rid)
        return
    with journal_store(db) as store:
        job = submit_job(store, machine, task, budgets, run_id=run_id, secret_env=secret_env)
    data = {"run_id": job.run_id, "machine": job.machine, "status": job.status,
            "budgets": serde.unstructure(job.budgets)}  # fmt: skip
    say_result(as_json, data, job.run_id)


@cli.command()
@db_option
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Runs driven at once (one thread, one journal connection each).",
)
@click.option(
    "--tools",
    "tools_module",
    required=True,
    help="Module exposing TOOLS = ToolRegistry(...) (or new_tools(), called per job).",
)
@allow_option
@model_factory_options
@click.option(
    "--lease-s",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_LEASE_S,
    show_default=True,
    help="Lease timeout: a job whose worker stops renewing it is taken over after this.",
)
@click.option(
    "--drain-s",
    type=click.FloatRange(min=0),
    default=DEFAULT_DRAIN_S,
    show_default=True,
    help="On SIGTERM/SIGINT: how long to wait for the runs in flight to pause or halt.",
)
@click.option(
    "--records",
    "records_dir",
    type=OutputPath(directory=True),
    default=DEFAULT_RECORDS,
    show_default=True,
    help="Directory for the halt records (RUN_ID.json).",
)
@click.option(
    "--max-jobs", type=click.IntRange(min=1), help="Exit after taking N jobs (batch, tests)."
)
@click.option("--idle-exit", is_flag=True, help="Exit when no job is queued or leased.")
@temporal_option
@otel_options
@cli_errors
def worker(
    db: str,
    concurrency: int,
    tools_module: str,
    allow: tuple[str, ...] | None,
    model: Callable[[], ModelAdapter],
    lease_s: float,
    drain_s: float,
    records_dir: str,
    max_jobs: int | None,
    idle_exit: bool,
    temporal: str | None,
    otel: bool,
    otel_content: bool,
    secret_env: tuple[str, ...],
) -> None:
    """Lease queued runs and drive them to a halt, CONCURRENCY at a time.

    A run a dead worker left is taken over when its lease expires and continued under the
    resume rules. SIGTERM or SIGINT: take no more runs, pause those in flight and give them
    back to the queue within --drain-s; exit 0, or 128+N if some were still in flight.
    With --otel, every run's steps are sent as OpenTelemetry spans as they are journaled.
    With --temporal, serve runs started by `fsm-agent submit --temporal` instead (the
    journal is still --db; --concurrency bounds the calls at once, --drain-s how long
    those in flight get at a stop; the queue's other options do not apply).
    """
    from fsm_agent.queue.worker import QueueWorker
    from fsm_agent.runtime.tools import load_tools

    refuse_overlaps(db, {"--records": records_dir})
    load_tools(tools_module, here())  # a bad module is `Error: …` (exit 2) before any lease
    if temporal is not None:
        if max_jobs is not None or idle_exit:
            raise InvalidInputError("--max-jobs and --idle-exit are not for --temporal")
        from fsm_agent.cli.temporal import serve_runs

        secrets = run_secrets(secret_env, model()) if otel else env_secrets(secret_env)
        with live_traces(otel, otel_content, db, secrets) as tracer:
            code = serve_runs(temporal, db, model=model, allow=allow, secret_env=secret_env,
                              tools=functools.partial(load_tools, tools_module, here()),
                              concurrency=concurrency, drain_s=drain_s, tracer=tracer)  # fmt: skip
        sys.exit(code)
    with journal_store(db):  # the journal opens (and is migrated) before any thread starts
        pass
    secrets = run_secrets(secret_env, model()) if otel else env_secrets(secret_env)
    with live_traces(otel, otel_content, db, secrets) as tracer:
        code = QueueWorker(
            db,
            model=model,
            tools=functools.partial(load_tools, tools_module, here()),
            allow=allow,
            concurrency=concurrency,
            lease_s=lease_s,
            drain_s=drain_s,
            records=records_dir,
            max_jobs=max_jobs,
            idle_exit=idle_exit,
            secret_env=secret_env,
            on_transition=None if tracer is None else tracer.on_transition,
            on_halt=None if tracer is None else tracer.on_halt,
        ).serve()
    sys.exit(code)


#: What `fsm-agent queue --status` shows, in this order (each status oldest first).
_VIEWS: dict[str, tuple[JobStatus, ...]] = {
    "open": ("leased", "queued"),
    "queued": ("queued",),
    "leased": ("leased",),
    "done": ("done",),
    "cancelled": ("cancelled",),
    "all": ("leased", "queued", "done", "cancelled"),
}


@cli.command()
@click.option(
    "--status",
    type=click.Choice(list(_VIEWS)),
    default="open",
    show_default=True,
    help="Which jobs: open (leased, then queued), one status, or all.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="At most this many jobs of each status.",
)
@temporal_option
@db_option
@json_option
@cli_errors
def queue(status: str, limit: int, temporal: str | None, db: str, as_json: bool) -> None:
    """List the run queue (each status oldest first): run id, status, attempts, seconds
    left on the lease, owner, task; then how many jobs there are of each status. With
    --temporal, the runs' workflows there instead (open: running; done: closed)."""
    if temporal is not None:
        _temporal_queue(temporal, status, limit, db, as_json)
        return
    with read_journal(db) as store:
        jobs = [j for s in _VIEWS[status] for j in store.jobs(s, limit=limit)]
        counts = store.job_counts()
    if as_json:
        rows = [serde.unstructure(j) for j in jobs]
        for row in rows:
            row.pop("machine_text")
        click.echo(json.dumps(rows, indent=2))
        return
    if jobs:
        _print_jobs(jobs)
    else:
        click.echo(f"no {'' if status == 'all' else status + ' '}jobs in {shown(db)}")
    more = sum(counts.get(s, 0) for s in _VIEWS[status]) - len(jobs)
    total = ", ".join(
        f"{counts.get(s, 0):,} {s}" for s in ("queued", "leased", "done", "cancelled")
    )
    click.echo(f"queue: {total}" + (f" ({more:,} more not shown: --limit)" if more > 0 else ""))


def _temporal_queue(address: str, status: str, limit: int, db: str, as_json: bool) -> None:
    from fsm_agent.cli.temporal import list_workflows

    if status not in ("open", "done", "all"):
        raise InvalidInputError(f"--status {status} is the journal queue's: with --temporal,"
                                " open, done or all")  # fmt: skip
    listed = list_workflows(address, db, status, limit)
    if as_json:
        click.echo(json.dumps([attrs.asdict(w) for w in listed], indent=2))
        return
    if not listed:
        click.echo(f"no {'' if status == 'all' else status + ' '}runs on Temporal at {address}")
        return
    click.echo(f"{'RUN':<12}  {'WORKFLOW':<11}  {'STARTED':<32}  CLOSED")
    for w in listed:
        click.echo(f"{w.run_id:<12}  {w.workflow:<11}  {w.started:<32}  {w.closed or ''}")


def _print_jobs(jobs: list[Job]) -> None:
    now = time.time()
    click.echo(f"{'RUN':<12}  {'STATUS':<6}  {'TRY':>3}  {'LEASE':>7}  {'OWNER':<24}  TASK")
    for j in jobs:
        lease = "" if j.lease_until is None else f"{j.lease_until - now:+.0f}s"
        task = j.task if len(j.task) <= 40 else j.task[:39] + "…"
        click.echo(
            f"{j.run_id:<12}  {j.status:<6}  {j.attempts:>3}  {lease:>7}  {j.owner or '':<24}"
            f"  {task}"
        )


@cli.command()
@click.argument("run_id")
@click.option("--why", required=True, help="Why (kept with the job).")
@click.option("--who", help="Who takes it out (default: the login name).")
@temporal_option
@db_option
@json_option
@cli_errors
def dequeue(
    run_id: str, why: str, who: str | None, temporal: str | None, db: str, as_json: bool
) -> None:
    """Take a job out of the run queue: one that is queued, or whose worker is gone (its
    lease expired). Never started: cancelled. Started: its run waits for `fsm-agent resume`.
    A job a live worker holds is refused: pause its run (that takes it out too). With
    --temporal: a run whose workflow has not started it yet (its workflow is terminated)."""
    from fsm_agent.runtime.operator_acts import signature

    by, at = signature(who, why)
    if temporal is not None:
        from fsm_agent.cli.temporal import cancel_unstarted

        cancel_unstarted(temporal, db, run_id, f"dequeued by {by} at {at}: {why}")
        say_result(as_json, {"run_id": run_id, "status": "cancelled"},
                   f"run {run_id} cancelled on Temporal: it never started")  # fmt: skip
        return
    with journal_store(db, must_exist=True) as store:
        status = store.dequeue_job(run_id, f"dequeued by {by} at {at}: {why}")
        job = store.job(run_id) if status is None else None  # why it was not dequeued
    data = {"run_id": run_id, "status": status}
    if status == "cancelled":
        say_result(as_json, data, f"job {run_id} cancelled: its run never started")
    elif status == "done":
        say_result(
            as_json,
            data,
            f"job {run_id} taken out of the queue; its run waits, as last journaled, for"
            f" `fsm-agent resume {run_id} --db {shell_arg(db)} --model …`",
        )
    elif job is None:
        raise InvalidInputError(
            f"no job for run {shown_run_id(run_id)} in the queue of {shown(db)}"
        )
    elif job.status == "leased":
        raise InvalidInputError(
            f"job {run_id} is leased by {job.owner}, which is driving it: pause the run"
            f" (`fsm-agent pause {run_id} --why …`), which takes it out of the queue"
        )
    else:
        raise InvalidInputError(f"job {run_id} is already out of the queue ({job.status})")
