"""Incident-review commands: replay, run files (export, import), stats and diagrams.

Registered on the `fsm-agent` group when imported (`fsm_agent.cli.group.COMMANDS`); a thin
layer like the rest of it.
"""

from __future__ import annotations

import json
import sys

import click

from fsm_agent.cli.group import cli
from fsm_agent.cli.options import (
    OutputPath,
    budget_options,
    cli_errors,
    db_option,
    here,
    journal_store,
    json_option,
    policy_option,
    read_journal,
    refuse_overlaps,
    say_result,
    shown,
    temporal_option,
)
from fsm_agent.cli.sources import fork_hint, load_checked, parent_of
from fsm_agent.declaration.load import load_machine
from fsm_agent.errors import InvalidInputError
from fsm_agent.journal import serde
from fsm_agent.journal.chain import ChainReport, verify_run
from fsm_agent.journal.store import ControlKind
from fsm_agent.review.diagram import (
    FORMATS,
    DiagramFormat,
    GraphvizMissing,
    export_diagram,
    path_of_run,
)
from fsm_agent.review.diagram_labels import lacking_lines
from fsm_agent.review.replay import ReplayReport, replay_events, with_chain
from fsm_agent.review.view import format_step
from fsm_agent.run_ids import names_a_file, resolve_run_id
from fsm_agent.runtime.record import atomic_write_text

#: Exit code of a replay (or a report) that re-decided nothing: the machine's own modules
#: (a user guard) do not import here.
EXIT_NOT_REPLAYED = 3


def _exit_code(report: ReplayReport) -> int:
    """0: the halt is proven (or a counterfactual reached a halt); 1: it diverged or needs
    facts the journal does not hold; 3: replay could not run here (`EXIT_NOT_REPLAYED`)."""
    if report.not_run is not None:
        return EXIT_NOT_REPLAYED
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
@cli_errors
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
    run, events, chain = load_checked(source, db)
    machine = load_machine(machine_ref) if machine_ref else None
    report = with_chain(replay_events(run, events, machine=machine, budgets=budgets), chain)
    interactive = step_through and sys.stdin.isatty() and sys.stdout.isatty() and not as_json
    if step_through and not interactive:
        why = "--json prints every step" if as_json else "stdin and stdout are not a terminal"
        click.echo(f"note: --step walks a terminal; {why}: every step is printed", err=True)
    if not as_json:
        kind = "counterfactual replay" if report.counterfactual else "replay"
        click.echo(f"{kind} of run {run.run_id} ({run.machine}, {len(events)} events)")
    for seen, step in enumerate(report.steps, start=1):
        if as_json:
            click.echo(json.dumps(serde.unstructure(step)))
            continue
        click.echo(format_step(step))
        if interactive:
            click.echo("-- any key: next, q: quit --", nl=False)
            key = click.getchar()
            click.echo("")
            if key in ("q", "Q"):
                rest = len(report.steps) - seen
                click.echo(f"quit after {seen} of {len(report.steps)} steps ({rest} not"
                           " shown); the verdict re-decided them all:")  # fmt: skip
                break

    hint = fork_hint(report, machine_ref, db, from_file=names_a_file(source))
    if as_json:
        summary = {"summary": report.summary, "ok": report.ok,
                   "recorded_halt": report.recorded_halt,
                   "recomputed_halt": report.recomputed_halt,
                   "counterfactual": report.counterfactual, "fork": hint}  # fmt: skip
        click.echo(json.dumps(summary))
    else:
        if hint is not None:  # before the verdict, which stays the last line
            click.echo(hint)
        click.echo(report.summary)
    code = _exit_code(report)
    if code:
        sys.exit(code)


@cli.command("export")
@click.argument("run_id")
@click.option("-o", "--output", required=True, type=OutputPath(), help="Run file to write.")
@db_option
@json_option
@cli_errors
def export_(run_id: str, output: str, db: str, as_json: bool) -> None:
    """Write one run (row, events, halt record, machine declaration and its hash) to a
    self-contained JSON file, atomically: how traces leave the box for a review."""
    from fsm_agent.journal.runfile import export_run, write_run_file

    refuse_overlaps(db, {"--output": output})
    with read_journal(db) as store:
        run_id = resolve_run_id(store, run_id)
        run_file = export_run(store, run_id)
        chain = verify_run(store, run_id)
    write_run_file(run_file, output)
    data = {"run_id": run_id, "events": len(run_file.events), "output": output,
            "chain": chain.verdict(), "chain_ok": chain.ok}  # fmt: skip
    say_result(as_json, data, f"exported run {run_id} ({len(run_file.events)} events) to {output}")
    if not chain.findings and not chain.ok:  # a keyed run without its key, or not sealed
        click.echo(f"note: {chain.verdict()}; the file keeps the chain as stored", err=True)
    elif not chain.ok:  # the file keeps the chain as stored: `verify FILE` says the same
        click.echo(f"Error: {chain.verdict()}", err=True)
        raise click.exceptions.Exit(1)


@cli.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@db_option
@json_option
@cli_errors
def import_(file: str, db: str, as_json: bool) -> None:
    """Load a run file into the journal; a run id already there is refused, never
    overwritten."""
    from fsm_agent.journal.runfile import import_run, read_run_file

    run_file = read_run_file(file)
    with journal_store(db) as store:
        import_run(store, run_file, source=file)
    run_id, events = run_file.run.run_id, len(run_file.events)
    data = {"run_id": run_id, "events": events, "journal": shown(db)}
    say_result(as_json, data, f"imported run {run_id} ({events} events) into {shown(db)}")


@cli.command()
@db_option
@click.option("--machine", help="Only runs of this machine.")
@click.option(
    "--since",
    metavar="TIME",
    help="Only runs started at or after TIME: an ISO date or timestamp (UTC unless it says"
    " otherwise), or a time ago: 30m, 12h, 2d, 1w.",
)
@json_option
@cli_errors
def stats(db: str, machine: str | None, since: str | None, as_json: bool) -> None:
    """Count halt reasons per machine, with steps used/max, duration and cost percentiles."""
    from fsm_agent.review.stats import format_stats, halt_stats

    with read_journal(db) as store:
        result = halt_stats(store, machine=machine, since=since)
    if as_json:
        click.echo(json.dumps(serde.unstructure(result), indent=2))
    else:
        click.echo(format_stats(result), nl=False)


@cli.command()
@click.argument("machine")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="mermaid",
    show_default=True,
    help="mermaid renders in code review; svg is drawn by graphviz-pure (installed with"
    " fsm-agent).",
)
@click.option("-o", "--output", type=OutputPath(), help="File (default: stdout).")
@click.option("--run", "run_source", help="Highlight the path of this run id or run file.")
@db_option
@cli_errors
def diagram(machine: str, fmt: DiagramFormat, output: str | None, run_source: str | None,
            db: str) -> None:  # fmt: skip
    """Export MACHINE (a declared name or a .yaml path) as a diagram; with --run, the path
    the run took is highlighted and its halt state marked with the halt reason (on MACHINE
    as given: taken edges it does not declare are listed, on stderr and in the diagram)."""
    if output is not None:
        refuse_overlaps(db, {"--output": output}, {"MACHINE": machine, "--run": run_source})
    spec = load_machine(machine)
    path = None
    if run_source is not None:
        run, events, _ = load_checked(run_source, db)
        if run.machine != spec.name:
            raise InvalidInputError(
                f"run {run.run_id} ran machine {run.machine!r}, not {spec.name!r}"
            )
        path = path_of_run(spec, run, events)
        if path.ran_sha256 is not None:
            click.echo(f"note: {machine} is not the declaration run {run.run_id} journaled"
                       f" (sha256 {spec.sha256[:12]}, it ran {path.ran_sha256[:12]}): its path"
                       " is drawn where the two declare the same edges", err=True)  # fmt: skip
            for line in lacking_lines(path.lacking):
                click.echo(f"note: {line}", err=True)
    try:
        text = export_diagram(spec, fmt, path)
    except GraphvizMissing as exc:
        raise InvalidInputError(f"{exc}; or use --format mermaid or dot") from exc
    if output is None:
        click.echo(text, nl=False)
    else:
        atomic_write_text(output, text, private=False)  # made for review: the umask's mode
        click.echo(f"wrote {fmt} diagram of {spec.name} to {output}")


@cli.command("report")
@click.argument("source")
@click.option("-o", "--output", required=True, type=OutputPath(), help="HTML file to write.")
@db_option
@json_option
@cli_errors
def report_(source: str, output: str, db: str, as_json: bool) -> None:
    """Write one self-contained HTML incident report for a run (id or run file): the halt
    record, the machine with the run's path, the replay verdict and every transition."""
    from fsm_agent.review.report import report_page, report_sections, write_report

    refuse_overlaps(db, {"--output": output}, {"SOURCE": source})

    run, events, chain = load_checked(source, db)
    try:
        parts = report_sections(run, events, chain, parent_of(source, db, events))
    except GraphvizMissing as exc:
        raise InvalidInputError(f"the report draws the run's path as SVG: {exc}") from exc
    write_report(report_page(parts), output)
    verdict = parts.verdict
    assert verdict is not None  # noqa: S101 - report_sections always sets it
    data = {"run_id": run.run_id, "output": output, "replay": verdict.summary,
            "chain_ok": chain.ok}  # fmt: skip
    say_result(as_json, data, f"wrote incident report of run {run.run_id} to {output}")
    code = _report_exit_code(verdict, chain)
    if code and not as_json:
        click.echo(f"note: {verdict.summary}", err=True)
    if code:
        sys.exit(code)


def _report_exit_code(verdict: ReplayReport, chain: ChainReport) -> int:
    """A report is written whatever it finds; its exit code says what verifies: 1 the
    chain fails or the recorded halt is not proven, 3 replay could not run here, else 0
    (a run with no halt yet has none to prove)."""
    if not chain.ok and chain.findings:
        return 1
    if verdict.not_run is not None:
        return EXIT_NOT_REPLAYED
    if verdict.recorded_halt is not None and not verdict.ok:
        return 1
    return 0


@cli.command()
@click.argument("machine")
@policy_option
@click.option("--tools", "tools_module", help="Also check the lanes of this tools module.")
@click.option(
    "--check/--no-check",
    "check",
    default=True,
    show_default=True,
    help="Also report `fsm-agent check`'s other refuted properties (CK001-CK005); the"
    " rules check decides (HP001, HP003, HP004, HP006, HP010, HX006) are reported either way.",
)
@json_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text, or json (the same as --json, kept for scripts that use it).",
)
@cli_errors
def lint(
    machine: str,
    policy_path: str | None,
    tools_module: str | None,
    check: bool,
    as_json: bool,
    fmt: str,
) -> None:
    """Check a declaration and a halt policy for the red flags and exit criteria of the
    halt-path review before deploy (the receipt, retry and privileged-tool rules as
    `fsm-agent check` decides them), and (unless --no-check) report check's other refuted
    properties; print findings like a linter (`file:line: CODE …`), or with --json a JSON
    array of them; exit 1 on any finding."""
    fmt = "json" if as_json else fmt
    from fsm_agent.declaration.lint import format_findings, lint_paths
    from fsm_agent.declaration.policy import default_policy_path
    from fsm_agent.runtime.tools import load_tools

    tools = load_tools(tools_module, here()) if tools_module else None
    policy = policy_path or load_machine(machine).policy_path() or default_policy_path()
    findings = lint_paths(machine, policy, tools=tools, check=check)
    click.echo(format_findings(findings, "json" if fmt == "json" else "text"), nl=False)
    if fmt == "text" and not findings:
        click.echo(f"ok: {machine}: no findings")
    if findings:
        sys.exit(1)


@cli.command("raise-budget")
@click.argument("run_id")
@budget_options
@click.option("--why", required=True, help="Why the cap is raised (journaled with the act).")
@click.option("--who", help="Who raises it (default: the login name).")
@temporal_option
@db_option
@json_option
@cli_errors
def raise_budget(
    run_id: str,
    budgets: dict[str, int | float | None],
    why: str,
    who: str | None,
    temporal: str | None,
    db: str,
    as_json: bool,
) -> None:
    """Raise a live run's caps. Only a person can: the run applies it before its next model
    call and journals who, why and the old and new values; replay shows the act. With
    --temporal, the act is also signalled to the run's workflow."""
    from fsm_agent.runtime.operator_acts import queue_raise_budget, require_caps

    asked = {name: value for name, value in budgets.items() if value is not None}
    require_caps(asked)
    with journal_store(db, must_exist=True) as store:
        run_id = resolve_run_id(store, run_id)
        number, current = queue_raise_budget(store, run_id, asked, who, why)
    if temporal is not None:
        from fsm_agent.cli.temporal import signal_control

        signal_control(temporal, db, run_id, number)
    changes = ", ".join(f"{n} {getattr(current, n)} -> {v}" for n, v in asked.items())
    moved = {n: {"from": getattr(current, n), "to": v} for n, v in asked.items()}
    data = {"control": number, "run_id": run_id, "changes": moved}
    say_result(as_json, data, f"queued raise-budget #{number} for run {run_id}: {changes}; the"
               " run applies it before its next model call and journals it")  # fmt: skip


def _routing(kind: ControlKind, why: str, who: str | None, db: str, as_json: bool) -> None:
    from fsm_agent.runtime.operator_acts import queue_routing

    with journal_store(db) as store:
        number = queue_routing(store, kind == "freeze_routing", who, why)
    verb = "frozen" if kind == "freeze_routing" else "unfrozen"
    say_result(as_json, {"control": number, "routing": verb},
               f"routing {verb} (#{number}); running workers read it before their next model"
               " call, and the act is journaled in each run that sees it")  # fmt: skip


@cli.command("freeze-routing")
@click.option("--why", required=True, help="Why (journaled with the act).")
@click.option("--who", help="Who freezes it (default: the login name).")
@db_option
@json_option
@cli_errors
def freeze_routing(why: str, who: str | None, db: str, as_json: bool) -> None:
    """Stop every run on this journal from calling a model that is not on a local lane; a
    run that would must hand off (routing_frozen). No deploy needed."""
    _routing("freeze_routing", why, who, db, as_json)


@cli.command("unfreeze-routing")
@click.option("--why", required=True, help="Why (journaled with the act).")
@click.option("--who", help="Who unfreezes it (default: the login name).")
@db_option
@json_option
@cli_errors
def unfreeze_routing(why: str, who: str | None, db: str, as_json: bool) -> None:
    """Lift a routing freeze."""
    _routing("unfreeze_routing", why, who, db, as_json)
