"""`fsm-agent show`: one run, its halt record, then every transition with its guards."""

from __future__ import annotations

import json
from typing import Any

import click

from fsm_agent.cli.group import cli
from fsm_agent.cli.options import cli_errors, db_option, json_option
from fsm_agent.cli.run_output import run_dict, summary
from fsm_agent.cli.sources import fork_view_of, load_checked
from fsm_agent.journal import serde
from fsm_agent.runtime.usage import UsageTotals


@cli.command()
@click.argument("run_id")
@db_option
@json_option
@cli_errors
def show(run_id: str, db: str, as_json: bool) -> None:
    """Show one run: its halt record, then every transition with its guards. RUN_ID is a
    run id in the journal or a run file from `export`."""
    row, events, chain = load_checked(run_id, db)
    from fsm_agent.review.usage import run_usage, usage_lines

    usage = run_usage(events)
    lineage = fork_view_of(run_id, db, events)  # a fork: its parent, what changed, divergence
    if as_json:
        data = {
            "run": run_dict(row),
            "record": serde.unstructure(row.record),
            "usage": serde.unstructure(usage) | {"model": _totals(usage.model)},
            "events": [serde.unstructure(e) for e in events],
            "chain": serde.unstructure(chain) | {"ok": chain.ok},
            "lineage": serde.unstructure(lineage),
        }
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"run {row.run_id}  machine {row.machine}  ({row.machine_sha256[:12]})")
    click.echo(f"task: {row.task}")
    if not chain.ok:  # the row and its record may be edited: never shown as fact
        click.echo(f"UNVERIFIED: the lines below are the run's row as stored; {chain.verdict()}")
    if row.record is None:
        from fsm_agent.runtime.run_status import shown_status

        status = shown_status(row)
        hint = f"; resume with: fsm-agent resume {row.run_id}" if status != "running" else ""
        click.echo(f"status: {status} in {row.state} (no halt record yet{hint})")
    else:
        click.echo(summary(row.record))
    for line in usage_lines(usage):
        click.echo(line)
    click.echo(chain.verdict())
    if lineage is not None:
        from fsm_agent.review.lineage import fork_lines

        click.echo("\n".join(fork_lines(lineage)))
    click.echo("")
    click.echo(f"{'SEQ':>4}  {'STEP':>5}  TRANSITION")
    from fsm_agent.review.view import event_lines

    for e in events:
        click.echo("\n".join(event_lines(e)))


def _totals(t: UsageTotals) -> dict[str, Any]:
    data: dict[str, Any] = serde.unstructure(t)
    return data | {"tokens": t.tokens}
