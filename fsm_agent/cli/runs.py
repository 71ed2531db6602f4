"""`fsm-agent runs`: the runs of a journal, newest first, filtered by the journal's query.

Registered on the `fsm-agent` group when imported (`fsm_agent.cli.group.COMMANDS`); a thin
layer like the rest of it.
"""

from __future__ import annotations

import json
from typing import Any

import click

from fsm_agent.cli.group import cli
from fsm_agent.cli.options import (
    InputProblem,
    cli_errors,
    db_option,
    json_option,
    read_journal,
    shown,
)
from fsm_agent.cli.run_output import run_dict
from fsm_agent.halt import HaltReason
from fsm_agent.journal.store import RunRow, Store

RUNS_HEADER = ("RUN", "MACHINE", "HALT", "STEPS", "STARTED", "TASK")
#: What `runs --status` selects: the journal's statuses, with `running` split by whether the
#: run's process is still there (`interrupted`: it is gone; resume the run).
RUN_STATUSES = ("running", "interrupted", "paused", "waiting", "halted")


def _listed_runs(store: Store, limit: int, status: str | None, **filters: Any) -> list[RunRow]:
    """The runs `runs` lists: filtered by the journal, newest first, at most `limit`; a
    status as people read it is split from the journal's (`shown_runs`)."""
    from fsm_agent.runtime.run_status import shown_runs

    if status is None:
        return store.list_runs(limit, **filters)
    return shown_runs(store, status, limit, **filters)


@cli.command()
@db_option
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1),
              help="At most this many runs (after the filters).")  # fmt: skip
@click.option("--machine", help="Only runs of this machine (its declared name).")
@click.option(
    "--halt-reason",
    type=click.Choice([r.value for r in HaltReason]),
    help="Only runs that halted for this reason.",
)
@click.option(
    "--status",
    type=click.Choice(RUN_STATUSES),
    help="Only runs in this status: running (its process is alive), interrupted (its"
    " process is gone: resume it), paused, waiting (for a person's decision: approve, deny"
    " or answer it), or halted (for good).",
)
@click.option(
    "--since",
    metavar="TIME",
    help="Only runs started at or after TIME: an ISO date or timestamp (UTC unless it says"
    " otherwise), or a time ago: 30m, 12h, 2d, 1w.",
)
@click.option("--until", metavar="TIME", help="Only runs started at or before TIME (as --since).")
@json_option
@cli_errors
def runs(
    db: str,
    limit: int,
    machine: str | None,
    halt_reason: str | None,
    status: str | None,
    since: str | None,
    until: str | None,
    as_json: bool,
) -> None:
    """List recent runs, newest first: id, machine, halt reason, steps used/max, start time.

    The filters combine (all must hold); --limit counts the runs that pass them.
    """
    from fsm_agent.review.stats import time_key

    low = None if since is None else time_key(since, what="--since")
    high = None if until is None else time_key(until, what="--until")
    if low is not None and high is not None and low > high:
        raise InputProblem(f"--since {since} is after --until {until}: no run can match")
    wanted = None if halt_reason is None else HaltReason(halt_reason)
    from fsm_agent.review.truth import LEGEND, shown_halt, truths

    with read_journal(db) as store:
        rows = _listed_runs(
            store, limit, status, machine=machine, halt_reason=wanted, since=low, until=high
        )
        verified = truths(store, [r.run_id for r in rows])
    if as_json:
        listed = [
            run_dict(r) | {"verified": verified[r.run_id].ok, "unverified": verified[r.run_id].why}
            for r in rows
        ]
        click.echo(json.dumps(listed, indent=2))
        return
    filtered = any(v is not None for v in (machine, halt_reason, status, since, until))
    if not rows and filtered:
        click.echo(f"no runs in {shown(db)} match")
        return
    if not rows:
        click.echo(f"no runs in {shown(db)}")
        return
    from fsm_agent.runtime.run_status import shown_status

    table = []
    for r in rows:
        reason = shown_halt(r, verified[r.run_id], shown_status(r))
        cap = r.record.max_steps if r.record is not None else r.budgets.max_steps  # raised?
        task = _one_line(r.task)
        table.append((r.run_id, r.machine, reason, f"{r.steps_used}/{cap}", r.started_at, task))
    widths = [max(len(row[i]) for row in [RUNS_HEADER, *table]) for i in range(5)]
    widths[2] = max(widths[2], 1 + max(len(h.value) for h in HaltReason))  # every reason fits
    for row in [RUNS_HEADER, *table]:
        rid, machine, reason, steps, started, task = row
        click.echo(
            f"{rid:<{widths[0]}}  {machine:<{widths[1]}}  {reason:<{widths[2]}}"
            f"  {steps:>{widths[3]}}  {started:<{widths[4]}}  {task}"
        )
    if any(not verified[r.run_id].ok for r in rows):
        click.echo(f"\n{LEGEND}")


#: How much of a task `runs` shows (one line; `show` has it whole).
TASK_CHARS = 48


def _one_line(task: str) -> str:
    """A task on one line, cut to `TASK_CHARS` (control characters shown as spaces)."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in task).split())
    return flat if len(flat) <= TASK_CHARS else flat[: TASK_CHARS - 1] + "…"
