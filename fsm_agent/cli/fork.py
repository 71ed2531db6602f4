"""`fsm-agent fork RUN --at SEQ`: a new run that takes a recorded run's facts up to one of
its events as its own past and goes on live from there (`fsm_agent.runtime.fork`).

Registered on the `fsm-agent` group when imported (`fsm_agent.cli.group.COMMANDS`); a thin
layer like the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from fsm_agent.cli.group import cli
from fsm_agent.cli.options import (
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
    shown,
)
from fsm_agent.cli.run_output import finish, paused_or, progress_line
from fsm_agent.declaration.load import load_machine
from fsm_agent.journal.store import Event
from fsm_agent.run_ids import resolve_run_id
from fsm_agent.runtime.tools import ToolRegistry, load_tools

if TYPE_CHECKING:
    from fsm_agent.adapters.models import ModelAdapter


@cli.command()
@click.argument("run_id")
@click.option(
    "--at",
    "at",
    type=int,
    required=True,
    metavar="SEQ",
    help="The parent's event the fork takes as its last fact (as `show` numbers them).",
)
@click.option(
    "--machine",
    "machine_ref",
    help="Go on under this declaration (default: the parent's). It needs a state that"
    " matches the parent's at SEQ.",
)
@model_options
@click.option("--tools", "tools_module", help="Module exposing TOOLS = ToolRegistry(...).")
@allow_option
@budget_options
@db_option
@record_option
@json_option
@click.option("--quiet", "-q", is_flag=True, help="No live step lines on stderr.")
@cli_errors
def fork(
    run_id: str,
    at: int,
    machine_ref: str | None,
    model: ModelAdapter,
    tools_module: str | None,
    allow: tuple[str, ...] | None,
    budgets: dict[str, int | float | None],
    db: str,
    record_path: str,
    as_json: bool,
    quiet: bool,
    secret_env: tuple[str, ...],
) -> None:
    """Start a new run that takes RUN_ID's recorded facts up to and including event SEQ as
    its own past (nothing before SEQ is done again) and goes on live from there, under
    --machine, --model, --tools and raised budgets. Its lineage (parent, SEQ, the parent's
    event hash there, both declarations' sha256) is chained in its journal.

    Budgets are the parent's at SEQ, its meters carried on; budget flags may only raise
    them. Refused (exit 2, nothing written) when RUN_ID does not verify, SEQ is out of range
    or its halt, SEQ is inside a side-effecting call that is not idempotent, or the
    declaration has no matching state at SEQ. Exit codes as for `run`.
    """
    from fsm_agent.runtime.fork import fork_run

    refuse_overlaps(db, {"--record": record_path}, {"--machine": machine_ref})
    spec = load_machine(machine_ref) if machine_ref else None
    tools = load_tools(tools_module, here()) if tools_module else ToolRegistry()
    label = click.get_current_context().params.get("model_spec")
    with journal_store(db, must_exist=True) as store:
        parent = resolve_run_id(store, run_id)
        on_transition = _announced(parent, at, db, as_json, quiet)
        record = paused_or(
            lambda: fork_run(
                parent,
                at=at,
                store=store,
                model=model,
                tools=tools,
                machine=spec,
                budgets=budgets,
                allow=allow,
                record_path=record_path,
                on_transition=on_transition,
                secret_env=secret_env,
                model_label=label if isinstance(label, str) else None,
            )
        )
    finish(record, record_path, as_json)


def _announced(
    parent: str, at: int, db: str, as_json: bool, quiet: bool
) -> Callable[[Event], None]:
    """What the fork's process prints as it goes: that it forked, once the fork is its own
    (a refused fork says only `Error: …`), then the live step lines."""
    live = progress_line(quiet)

    def on_transition(event: Event) -> None:
        if event.kind == "resumed" and not as_json:
            click.echo(
                f"run {event.run_id} forked from {parent} at seq {at}, going on from"
                f" {event.dest} (journal {shown(db)})"
            )
        live(event)

    return on_transition
