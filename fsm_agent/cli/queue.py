"""Scaling out: `submit` starts a run as a Temporal workflow, `worker` serves them,
`queue` lists them, `dequeue` takes out one no worker has started (`fsm_agent.temporal`;
`fsm_agent.cli.temporal` is the layer under these commands). The address is `--temporal`,
or FSM_AGENT_TEMPORAL, or `dev`: a development server on 127.0.0.1:7233, which
`fsm-agent worker` starts when none answers there.

Registered on the `fsm-agent` group when imported (`fsm_agent.cli.group.COMMANDS`).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable

import attrs
import click

from fsm_agent.adapters.models import ModelAdapter
from fsm_agent.cli.group import cli
from fsm_agent.cli.options import (
    allow_option,
    budget_options,
    cli_errors,
    db_option,
    here,
    json_option,
    model_factory_options,
    say_result,
)
from fsm_agent.cli.traces import live_traces, otel_options
from fsm_agent.redaction import env_secrets, run_secrets
from fsm_agent.run_ids import check_run_id

#: How long the calls in flight get to end when a worker is stopped.
DEFAULT_DRAIN_S = 10.0

address_option = click.option(
    "--temporal",
    metavar="ADDRESS",
    default="dev",
    envvar="FSM_AGENT_TEMPORAL",
    show_default=True,
    help="The Temporal server (host:port); `dev`: the development server on 127.0.0.1:7233"
    " (`fsm-agent worker` starts one when none answers there). Env: FSM_AGENT_TEMPORAL."
    " Needs pip install 'fsm-agent[temporal]'.",
)


@cli.command()
@click.argument("machine")
@click.option("--task", required=True, help="What the agent is asked to do.")
@budget_options
@click.option(
    "--run-id",
    help="The run's id (default: 12 random hex digits): 1 to 64 of A-Z a-z 0-9 . _ -, a letter"
    " or digit first; refused if the journal or Temporal has it already.",
)
@click.option(
    "--secret-env",
    "secret_env",
    metavar="NAME",
    multiple=True,
    help="The NAME of an environment variable whose value is a secret: redacted as"
    " [redacted:NAME] from the task before it is submitted (give it to the worker too, for"
    " what the run gets back). Repeatable.",
)
@address_option
@db_option
@json_option
@cli_errors
def submit(
    machine: str,
    task: str,
    budgets: dict[str, int | float | None],
    run_id: str | None,
    secret_env: tuple[str, ...],
    temporal: str,
    db: str,
    as_json: bool,
) -> None:
    """Start a run of MACHINE (a declared name or a .yaml path) as a Temporal workflow, for
    `fsm-agent worker` (same --db); print its id.

    The declaration and the budgets (its defaults with these overrides) are checked and
    frozen now.
    """
    from fsm_agent.cli.temporal import submit_run

    if run_id is not None:
        check_run_id(run_id, where="--run-id")  # before the journal is opened
    env_secrets(secret_env)  # unset or too short: `Error: …`, exit 2, before the journal
    rid = submit_run(temporal, db, machine, task, budgets, run_id, secret_env)
    say_result(as_json, {"run_id": rid, "machine": machine, "temporal": temporal}, rid)


@cli.command()
@db_option
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Calls made at once (model, tool, journal), over all the runs this worker serves.",
)
@click.option(
    "--tools",
    "tools_module",
    required=True,
    help="Module exposing TOOLS = ToolRegistry(...) (or new_tools()).",
)
@allow_option
@model_factory_options
@click.option(
    "--drain-s",
    type=click.FloatRange(min=0),
    default=DEFAULT_DRAIN_S,
    show_default=True,
    help="On SIGTERM/SIGINT: how long the calls in flight get to end.",
)
@address_option
@otel_options
@cli_errors
def worker(
    db: str,
    concurrency: int,
    tools_module: str,
    allow: tuple[str, ...] | None,
    model: Callable[[], ModelAdapter],
    drain_s: float,
    temporal: str,
    otel: bool,
    otel_content: bool,
    secret_env: tuple[str, ...],
) -> None:
    """Serve the runs `fsm-agent submit` starts on Temporal, and those decided or resumed
    with --temporal: the runtime decides in their workflows, this process makes their calls
    and journal writes (--db). A run whose worker dies goes on on another worker, from the
    journal, under the resume rules. SIGTERM or SIGINT: stop taking work; the calls in
    flight get --drain-s; exit 0. With --otel, every run's steps are sent as OpenTelemetry
    spans as they are journaled.
    """
    from fsm_agent.cli.temporal import serve_runs
    from fsm_agent.runtime.tools import load_tools

    load_tools(tools_module, here())  # a bad module is `Error: …` (exit 2) before serving
    secrets = run_secrets(secret_env, model()) if otel else env_secrets(secret_env)
    with live_traces(otel, otel_content, db, secrets) as tracer:
        code = serve_runs(temporal, db, model=model, allow=allow, secret_env=secret_env,
                          tools=functools.partial(load_tools, tools_module, here()),
                          concurrency=concurrency, drain_s=drain_s, tracer=tracer)  # fmt: skip
    sys.exit(code)


@cli.command()
@click.option(
    "--status",
    type=click.Choice(["open", "done", "all"]),
    default="open",
    show_default=True,
    help="Which runs: open (their workflow runs), done (closed), or all.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="At most this many runs.",
)
@address_option
@db_option
@json_option
@cli_errors
def queue(status: str, limit: int, temporal: str, db: str, as_json: bool) -> None:
    """List the runs' workflows on Temporal, newest first: run id, Temporal status, start
    and close times (the newest run of a chain continued as new)."""
    _temporal_queue(temporal, status, limit, db, as_json)


def _temporal_queue(address: str, status: str, limit: int, db: str, as_json: bool) -> None:
    from fsm_agent.cli.temporal import list_workflows

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


@cli.command()
@click.argument("run_id")
@click.option("--why", required=True, help="Why (Temporal keeps it as the reason).")
@click.option("--who", help="Who takes it out (default: the login name).")
@address_option
@db_option
@json_option
@cli_errors
def dequeue(run_id: str, why: str, who: str | None, temporal: str, db: str, as_json: bool) -> None:
    """Take out a run no worker has started yet (no row in the journal): its workflow is
    terminated, who and why as the reason. A run that started is refused: pause it (then
    `resume --temporal` goes on with it), or cancel its workflow (it halts interrupted)."""
    from fsm_agent.cli.temporal import cancel_unstarted
    from fsm_agent.runtime.operator_acts import signature

    by, at = signature(who, why)
    cancel_unstarted(temporal, db, run_id, f"dequeued by {by} at {at}: {why}")
    say_result(as_json, {"run_id": run_id, "status": "cancelled"},
               f"run {run_id} cancelled on Temporal: it never started")  # fmt: skip
