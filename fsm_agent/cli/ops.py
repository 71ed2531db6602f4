"""Operations commands: verify the journal's hash chain, pause and resume runs.

Registered on the `fsm-agent` group when imported (`fsm_agent.cli.group.COMMANDS`); a thin
layer like the rest of it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from fsm_agent.cli.group import cli
from fsm_agent.cli.options import (
    OutputPath,
    cli_errors,
    db_option,
    here,
    journal_store,
    json_option,
    model_or_temporal_options,
    read_journal,
    record_option,
    refuse_overlaps,
    say_result,
    shell_arg,
    shown,
    temporal_option,
)
from fsm_agent.cli.run_output import finish, paused_or, progress_line
from fsm_agent.cli.traces import live_traces, otel_options, traced
from fsm_agent.errors import InvalidInputError
from fsm_agent.journal import serde
from fsm_agent.journal.chain import ChainReport, Finding, env_witness, verify_run
from fsm_agent.journal.chain import require_keyed as require_keyed_chain
from fsm_agent.journal.chain_key import key_from_env, read_key_file
from fsm_agent.journal.chain_witness import deleted_run
from fsm_agent.journal.runfile import read_run_file, verify_run_file
from fsm_agent.journal.store import Event, Store
from fsm_agent.journal.witness import Witness, read_log
from fsm_agent.redaction import run_secrets
from fsm_agent.run_ids import RunNotFound, names_a_file, resolve_run_id
from fsm_agent.runtime.record import HaltRecord, read_record
from fsm_agent.runtime.tools import ToolRegistry, load_tools

if TYPE_CHECKING:
    from fsm_agent.adapters.models import ModelAdapter


def _read_record(path: str) -> HaltRecord:
    """A halt record file for `verify --record` (strict: an unknown field is refused)."""
    try:
        return read_record(path)
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot read the halt record ({exc.strerror})") from exc
    except Exception as exc:
        why = serde.error_path(exc) if not isinstance(exc, ValueError) else str(exc)
        raise InvalidInputError(f"{path}: not a halt record ({why})") from exc


def _witness(paths: tuple[str, ...], key: bytes | None) -> Witness:
    """The witness verify checks against: the files given, else `$FSM_AGENT_WITNESS` (if
    there is a key to check it with, and once it exists), else none. Read before the
    journal (see `verify_run`)."""
    if paths:
        return read_log(paths, key)
    return env_witness(key)


def _verify_reports(
    source: str | None,
    all_runs: bool,
    db: str,
    key: bytes | None,
    record_path: str | None,
    witness: Witness,
) -> list[ChainReport]:
    if source is not None and all_runs:
        raise InvalidInputError("give a RUN_ID or FILE, or --all, not both")
    record_file = None
    if record_path is not None:
        if all_runs:
            raise InvalidInputError("--record checks the one run it is of: give it without --all")
        record = _read_record(record_path)
        record_file = (record, record_path)
        source = record.run_id if source is None else source
    if source is not None and names_a_file(source):
        run_file = read_run_file(source, checked=False)
        _same_run(record_file, run_file.run.run_id, source)
        return [verify_run_file(run_file, key=key, record_file=record_file, witness=witness)]
    if source is None and not all_runs:
        raise InvalidInputError("give a RUN_ID, a run FILE, or --all (or --record FILE)")
    with read_journal(db) as store:
        try:
            ids = store.run_ids() if source is None else [resolve_run_id(store, source)]
        except RunNotFound:
            if source is None or source not in (*witness.seen, *witness.forged):
                raise
            return [_deleted(source, witness)]  # the witness saw it: it was there
        _same_run(record_file, ids[0] if ids else "", source or "")
        reports = [
            verify_run(store, run_id, key=key, record_file=record_file, witness=witness)
            for run_id in ids
        ]
    if source is None:  # every run the witness saw must still be in the journal
        here = set(ids)
        gone = sorted(r for r in {*witness.seen, *witness.forged} if r not in here)
        reports += [_deleted(run_id, witness) for run_id in gone]
    return reports


def _deleted(run_id: str, witness: Witness) -> ChainReport:
    """The report of a run the witness names that the journal does not hold."""
    found = [f for f in [deleted_run(run_id, witness)] if f is not None]
    found += [
        Finding("witness_forged", s.seq, f"{s.where}: its signature does not match", "witness")
        for s in witness.forged.get(run_id, ())
    ]
    return ChainReport(run_id, 0, None, tuple(found), mode="keyed", witness="not in the journal")


def _same_run(record_file: tuple[HaltRecord, str] | None, run_id: str, source: str) -> None:
    if record_file is not None and record_file[0].run_id != run_id:
        record, path = record_file
        raise InvalidInputError(f"{path} is the record of run {record.run_id}, not of {source}")


def _echo_report(r: ChainReport) -> None:
    if r.ok:
        click.echo(f"ok        {r.run_id}  {r.events} events  head {r.head_hash}  {r.mode}")
    elif not r.findings and not r.checked:
        click.echo(f"UNCHECKED {r.run_id}  {r.events} events  keyed: key not given, chain not"
                   " checked")  # fmt: skip
    elif not r.findings:
        click.echo(f"UNPROVEN  {r.run_id}  {r.events} events  {r.unproven}")
    else:
        events = "not in the journal" if r.witness == "not in the journal" else f"{r.events} events"
        click.echo(f"TAMPERED  {r.run_id}  {events}  {r.mode}")
        for f in r.findings:
            click.echo(f"  {f.line()}")
    if r.witness is not None and r.witness != "not in the journal":
        click.echo(f"  witness: {r.witness}")
    for note in r.notes:
        click.echo(f"  note: {note}")


@cli.command()
@click.argument("source", required=False)
@click.option("--all", "all_runs", is_flag=True, help="Verify every run in the journal.")
@click.option(
    "--record",
    "record_path",
    type=click.Path(dir_okay=False),
    help="Check this halt record file against its run's sealed record (the run is the"
    " record's own unless RUN_ID or FILE is given).",
)
@click.option(
    "--key-file",
    type=click.Path(dir_okay=False),
    help="Check keyed chains with the key in this file (default: $FSM_AGENT_CHAIN_KEY, or"
    " the file $FSM_AGENT_CHAIN_KEY_FILE names).",
)
@click.option("--require-keyed", is_flag=True, help="Fail every run whose chain is not keyed.")
@click.option(
    "--witness",
    "witness_paths",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="Check runs against this witness file, its lines signed with the key (repeatable;"
    " default: $FSM_AGENT_WITNESS): a run cut back, reopened, rewritten or deleted since it"
    " saw it is found.",
)
@db_option
@json_option
@cli_errors
def verify(
    source: str | None,
    all_runs: bool,
    record_path: str | None,
    key_file: str | None,
    require_keyed: bool,
    witness_paths: tuple[str, ...],
    db: str,
    as_json: bool,
) -> None:
    """Check the hash chain of a run (RUN_ID or an exported FILE), or of --all runs: its
    events, its row, its declaration and its sealed halt record (and --record FILE).

    Reports the first sequence number (and field) of each kind of tampering: edited,
    deleted, inserted, reordered, truncated, run_edited, unchained, machine_edited,
    record_edited, summary_edited, record_missing, wrong_key (and not_keyed with
    --require-keyed); against a witness also reopened, rewritten, run_deleted and
    witness_forged. Says which mode each run was chained in (unkeyed or keyed) and which
    witness it used; a keyed run checked without its key is not checked, and a keyed run
    whose record is not sealed and whose head no witness saw is not proven: neither is
    ever ok. Exit 1 if any run is not ok.
    """
    key = read_key_file(key_file) if key_file else key_from_env()
    witness = _witness(witness_paths, key)
    reports = _verify_reports(source, all_runs, db, key, record_path, witness)
    if require_keyed:
        reports = [require_keyed_chain(r) for r in reports]
    if as_json:
        click.echo(json.dumps([serde.unstructure(r) | {"ok": r.ok} for r in reports], indent=2))
    else:
        if witness.given:
            click.echo(witness.describe())
        for r in reports:
            _echo_report(r)
        if all_runs and not witness.given:
            click.echo(
                "note: no witness (--witness FILE): a run deleted whole from this journal"
                " would not show"
            )
        bad = sum(bool(r.findings) for r in reports)
        unchecked = sum(not r.findings and not r.checked for r in reports)
        unproven = sum(r.intact and r.unproven is not None for r in reports)
        click.echo(
            f"{len(reports) - bad - unchecked - unproven} of {len(reports)} runs verify"
            + (f"; {bad} do not" if bad else "")
            + (f"; {unchecked} not checked (keyed, key not given)" if unchecked else "")
            + (f"; {unproven} not proven (keyed, not sealed)" if unproven else "")
        )
    if any(not r.ok for r in reports):
        raise click.exceptions.Exit(1)


@cli.command()
@click.argument("run_id")
@click.option("--why", required=True, help="Why (journaled with the act).")
@click.option("--who", help="Who pauses it (default: the login name).")
@temporal_option
@db_option
@json_option
@cli_errors
def pause(
    run_id: str, why: str, who: str | None, temporal: str | None, db: str, as_json: bool
) -> None:
    """Pause a live run: before its next model call it journals the pause and its process
    ends; the run waits, with its frozen budgets, for `fsm-agent resume RUN_ID`. With
    --temporal, the act is also signalled to the run's workflow."""
    from fsm_agent.runtime.operator_acts import queue_pause

    with journal_store(db, must_exist=True) as store:
        run_id = resolve_run_id(store, run_id)
        number = queue_pause(store, run_id, who, why)
    if temporal is not None:
        from fsm_agent.cli.temporal import signal_control

        signal_control(temporal, db, run_id, number)
    say_result(
        as_json,
        {"control": number, "run_id": run_id},
        f"pause of {run_id} queued (#{number}); the run stops before its next model call."
        f" Continue it with: fsm-agent resume {run_id} --db {shell_arg(db)} --model …",
    )


def _on_temporal(address: str, db: str, run_id: str, as_json: bool) -> None:
    from fsm_agent.cli.temporal import resume_on

    with journal_store(db, must_exist=True) as store:
        run_id = resolve_run_id(store, run_id)
    resume_on(address, db, run_id)
    say_result(as_json, {"run_id": run_id, "temporal": address},
               f"run {run_id} goes on as a Temporal workflow ({address}); see it with"
               f" fsm-agent show {run_id} --db {shell_arg(db)}")  # fmt: skip


@cli.command()
@click.argument("run_id")
@model_or_temporal_options
@click.option("--tools", "tools_module", help="Module exposing TOOLS = ToolRegistry(...).")
@db_option
@click.option(
    "--trace-copy",
    type=OutputPath(),
    help="Ship a run file of the whole run here before it may halt (as for `run`).",
)
@record_option
@otel_options
@json_option
@click.option("--quiet", "-q", is_flag=True, help="No live step lines on stderr.")
@temporal_option
@cli_errors
def resume(
    run_id: str,
    model: ModelAdapter | None,
    tools_module: str | None,
    db: str,
    trace_copy: str | None,
    record_path: str,
    otel: bool,
    otel_content: bool,
    as_json: bool,
    quiet: bool,
    secret_env: tuple[str, ...],
    temporal: str | None,
) -> None:
    """Continue an interrupted or paused run from its last committed transition, with the
    same frozen budgets. A tool call with no journaled receipt is re-issued only if the tool
    is idempotent; otherwise the run ends in handoff (side_effect_unknown). With
    --temporal, the run goes on as a Temporal workflow (its workers' model and tools).

    Exit codes as for `run`; 75 if it is paused again.
    """
    from fsm_agent.runtime.worker import resume_run

    if temporal is not None:
        _on_temporal(temporal, db, run_id, as_json)
        return
    assert model is not None  # noqa: S101 - required without --temporal

    refuse_overlaps(db, {"--record": record_path, "--trace-copy": trace_copy})
    tools = load_tools(tools_module, here()) if tools_module else ToolRegistry()
    secrets = run_secrets(secret_env, model)
    with (
        live_traces(otel, otel_content, db, secrets) as tracer,
        journal_store(db, must_exist=True) as store,
    ):
        run_id = resolve_run_id(store, run_id)
        expired = _expired_wait(store, run_id, record_path)
        if expired is not None:  # it waited past its limit: this act ends it
            finish(expired, record_path, as_json)

        def resumed(event: Event) -> None:
            # Said once the run is this process's (a refused resume says only `Error: …`).
            if event.kind == "resumed" and not as_json:
                click.echo(f"run {run_id} resumed from {event.dest} (journal {shown(db)})")

        on_transition = traced(tracer, resumed, progress_line(quiet))
        record = paused_or(
            lambda: resume_run(
                run_id,
                model=model,
                tools=tools,
                store=store,
                record_path=record_path,
                on_transition=on_transition,
                trace_copy=trace_copy,
                secret_env=secret_env,
            )
        )
        if tracer is not None:
            tracer.on_halt(record)
    finish(record, record_path, as_json)


def _expired_wait(store: Store, run_id: str, record_path: str) -> HaltRecord | None:
    """A run that waits for a person's decision past its wait limit, ended `wait_expired`."""
    from fsm_agent.runtime.run_status import waiting_for

    row = store.get_run(run_id)
    if waiting_for(row) is None:
        return None
    from fsm_agent.runtime.decisions import expire_if_late

    return expire_if_late(store, row, record_path=record_path)


@cli.command()
@db_option
@json_option
@cli_errors
def migrate(db: str, as_json: bool) -> None:
    """Bring the journal's schema up to date (or create it): the one write that commands
    that only read (runs, show, replay, export, report, stats, verify, queue) leave to you.
    Every command that writes does it too; a foreign database is refused, never touched."""
    with journal_store(db):
        pass
    say_result(as_json, {"journal": shown(db), "up_to_date": True},
               f"journal {shown(db)} is up to date")  # fmt: skip
