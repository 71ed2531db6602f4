"""Incident-review commands: `replay` (and the run-file and statistics commands).

Registered on the `fsm-agent` group by `fsm_agent.cli`; a thin layer like the rest of it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from fsm_agent import serde
from fsm_agent.cli import _errors, budget_options, cli, db_option, json_option
from fsm_agent.replay import ReplayReport, format_step, load_run, replay_events
from fsm_agent.spec import load_machine


def _exit_code(report: ReplayReport) -> int:
    """0: the halt is proven (or a counterfactual reached a halt); 1: it diverged or needs
    facts the journal does not hold."""
    if report.ok:
        return 0
    last = report.steps[-1] if report.steps else None
    if report.counterfactual and last is not None and last.verdict == "halted_earlier":
        return 0
    return 1


@cli.command()
@click.argument("source")
@db_option
@json_option
@click.option(
    "--step",
    "step_through",
    is_flag=True,
    help="On a terminal, advance one transition per key press (q quits).",
)
@click.option("--machine", "machine_ref", help="Counterfactual: replay under another declaration.")
@budget_options
@_errors
def replay(
    source: str,
    db: str,
    as_json: bool,
    step_through: bool,
    machine_ref: str | None,
    budgets: dict[str, int | float | None],
) -> None:
    """Prove a run's halt from the journal alone: re-decide every transition with the
    current code and compare. SOURCE is a run id or a run file from `export`.

    With budget flags or --machine it is a counterfactual: where would the run have halted?
    Exit code: 0 proven (or a counterfactual halt found), 1 diverged or needs unrecorded facts.
    """
    is_file = source.endswith(".json") or Path(source).is_file()
    run, events = load_run(source) if is_file else load_run(db, source)
    machine = load_machine(machine_ref) if machine_ref else None
    report = replay_events(run, events, machine=machine, budgets=budgets)
    interactive = step_through and sys.stdin.isatty() and sys.stdout.isatty() and not as_json
    if not as_json:
        kind = "counterfactual replay" if report.counterfactual else "replay"
        click.echo(f"{kind} of run {run.run_id} ({run.machine}, {len(events)} events)")
    for step in report.steps:
        if as_json:
            click.echo(json.dumps(serde.unstructure(step)))
            continue
        click.echo(format_step(step))
        if interactive:
            click.echo("-- any key: next, q: quit --", nl=False)
            key = click.getchar()
            click.echo("")
            if key in ("q", "Q"):
                break
    if as_json:
        summary = {"summary": report.summary, "ok": report.ok,
                   "recorded_halt": report.recorded_halt,
                   "recomputed_halt": report.recomputed_halt,
                   "counterfactual": report.counterfactual}  # fmt: skip
        click.echo(json.dumps(summary))
    else:
        click.echo(report.summary)
    code = _exit_code(report)
    if code:
        sys.exit(code)
