"""The `fsm-agent` command: a thin layer over the library.

Library errors become `Error: …` and an exit code at one boundary (`cli_options.cli_errors`);
`fsm_agent.halt.run_exit_codes` lists every code `run` returns (its help prints them).
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from fsm_agent import serde
from fsm_agent.cli_options import (
    InputProblem,
    InternalProblem,
    OutputPath,
    budget_options,
    cli_errors,
    db_option,
    journal_store,
    json_option,
    model_options,
    read_journal,
    refuse_overlaps,
    shell_arg,
    shown,
)
from fsm_agent.errors import RunPaused
from fsm_agent.halt import EXIT_PAUSED, HaltReason, exit_code, run_exit_codes
from fsm_agent.journal import Event, RunRow, Store
from fsm_agent.models import ModelAdapter
from fsm_agent.record import DEFAULT_RECORD_PATH, HaltRecord, record_json
from fsm_agent.run_ids import resolve_run_id
from fsm_agent.snapshot import SUCCESS_RULES
from fsm_agent.spec import load_machine
from fsm_agent.tools import ToolRegistry, load_tools
from fsm_agent.worker import run as run_machine


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(None, "-V", "--version", package_name="fsm-agent")
def cli() -> None:
    """Run AI agents as declared finite-state machines; every halt is named and journaled.

    Wherever a command takes RUN_ID, a unique prefix of a run id will do, and @latest
    names the run started last on the journal. Commands that print a result take --json.
    Shell completion: eval "$(_FSM_AGENT_COMPLETE=bash_source fsm-agent)" (zsh_source,
    fish_source for the other shells).
    """


def progress_line(quiet: bool) -> Callable[[Event], None]:
    """The live `step 3/8` line of each transition, against the cap in force (an operator
    may have raised it since the start)."""

    def show(event: Event) -> None:
        if quiet or event.kind != "transition":
            return
        steps, cap = event.snapshot.meters.steps_used, event.snapshot.budgets.max_steps
        line = f"step {steps}/{cap}  {event.source} → {event.dest}  [{event.trigger}]"
        if event.halt is not None:
            line += f"  halt: {event.halt.value}"
        # A closed terminal or pipe must not change how the run ends.
        with contextlib.suppress(OSError):
            click.echo(line, err=True)

    return show


def _summary(record: HaltRecord) -> str:
    lines = [
        f"halted: {record.halt_reason.value} ({record.terminal_state})"
        f" after {record.steps_used}/{record.max_steps} steps,"
        f" {len(record.tool_calls)} tool call(s), {record.meters.elapsed_ms} ms",
    ]
    if record.answer is not None:
        lines.append(f"answer: {record.answer}")
    if record.grounded_by:
        lines.append(f"grounded by: {', '.join(record.grounded_by)}")
    if record.error:
        lines.append(f"why: {record.error}")
    lines += [
        f"without complete receipts: {call}"
        for call in record.unreceipted
        if call not in (record.error or "")
    ]
    if record.success_rules < SUCCESS_RULES:
        lines.append(f"decided under success rules {record.success_rules} (before {SUCCESS_RULES})")
    return "\n".join(lines)


def _run_help() -> str:
    import textwrap

    codes = "\n".join(
        textwrap.fill(text, 78, initial_indent=f"  {code:<6} ", subsequent_indent=" " * 9)
        for code, text in run_exit_codes().items()
    )
    return (
        "Run TASK on MACHINE (a declared name or a .yaml path) until it halts.\n\n"
        "Prints the run id, a live `step N/M` line per transition (stderr), and the halt.\n\n"
        f"\b\nExit codes:\n{codes}"
    )


@cli.command(help=_run_help())
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
    """Run TASK on MACHINE until it halts (the help, with every exit code: `_run_help`)."""
    refuse_overlaps(
        db,
        {"--record": record_path, "--trace-copy": trace_copy},
        {"MACHINE": machine, "--policy": policy_path},
    )
    spec = load_machine(machine)
    control = None
    if policy_path is not None:
        from fsm_agent.policy import load_policy

        control = load_policy(policy_path).control_plane_for_runtime()
    tools = load_tools(tools_module) if tools_module else ToolRegistry()
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


def paused_or(drive: Callable[[], HaltRecord]) -> HaltRecord:
    """Drive a run; if a person pauses it, say how to continue it and exit 75."""
    try:
        return drive()
    except RunPaused as exc:
        click.echo(f"{exc}; continue it with: fsm-agent resume {exc.run_id} --model …")
        sys.exit(EXIT_PAUSED)


def finish(record: HaltRecord, record_path: str, as_json: bool) -> None:
    """Print how a run halted and exit with its code."""
    if as_json:
        click.echo(record_json(record), nl=False)
    else:
        click.echo(_summary(record))
        click.echo(f"record: {record_path}")
    sys.exit(exit_code(record.halt_reason, record.signal))


def _run_dict(row: RunRow) -> dict[str, Any]:
    from fsm_agent.resume import shown_status

    data: dict[str, Any] = serde.unstructure(row)
    data.pop("machine_text")
    data.pop("record")
    data["shown_status"] = shown_status(row)  # `interrupted` when its process is gone
    return data


RUNS_HEADER = ("RUN", "MACHINE", "HALT", "STEPS", "STARTED")
#: What `runs --status` selects: the journal's statuses, with `running` split by whether the
#: run's process is still there (`interrupted`: it is gone; resume the run).
RUN_STATUSES = ("running", "interrupted", "paused", "halted")


def _listed_runs(store: Store, limit: int, status: str | None, **filters: Any) -> list[RunRow]:
    """The runs `runs` lists: filtered by the journal, newest first, at most `limit`.
    running/interrupted are one status in the journal, told apart by the run's process: the
    journal's running runs are read whole and the limit applies after that split."""
    from fsm_agent.resume import shown_status

    if status not in ("running", "interrupted"):
        return store.list_runs(limit, status=status, **filters)  # type: ignore[arg-type]
    live = store.list_runs(None, status="running", **filters)
    return [r for r in live if shown_status(r) == status][:limit]


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
    " process is gone: resume it), paused, or halted.",
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
    from fsm_agent.stats import time_key

    low = None if since is None else time_key(since, what="--since")
    high = None if until is None else time_key(until, what="--until")
    if low is not None and high is not None and low > high:
        raise InputProblem(f"--since {since} is after --until {until}: no run can match")
    wanted = None if halt_reason is None else HaltReason(halt_reason)
    with read_journal(db) as store:
        rows = _listed_runs(
            store, limit, status, machine=machine, halt_reason=wanted, since=low, until=high
        )
    if as_json:
        click.echo(json.dumps([_run_dict(r) for r in rows], indent=2))
        return
    filtered = any(v is not None for v in (machine, halt_reason, status, since, until))
    if not rows and filtered:
        click.echo(f"no runs in {shown(db)} match")
        return
    if not rows:
        click.echo(f"no runs in {shown(db)}")
        return
    from fsm_agent.resume import shown_status

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
    from fsm_agent.chain import verify_run

    with read_journal(db) as store:
        run_id = resolve_run_id(store, run_id)
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
        from fsm_agent.resume import shown_status

        status = shown_status(row)
        hint = f"; resume with: fsm-agent resume {row.run_id}" if status != "running" else ""
        click.echo(f"status: {status} in {row.state} (no halt record yet{hint})")
    else:
        click.echo(_summary(row.record))
    click.echo(chain.verdict())
    click.echo("")
    click.echo(f"{'SEQ':>4}  {'STEP':>5}  TRANSITION")
    from fsm_agent.replay_view import event_lines

    for e in events:
        click.echo("\n".join(event_lines(e)))


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
    from examples.scenarios import SCENARIOS, run_scenario

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


def main() -> None:
    cli(prog_name="fsm-agent")


# The incident-review and operations commands register themselves on `cli`.
from fsm_agent import cli_ops, cli_queue, cli_review  # noqa: E402, F401
