"""`fsm-agent anchor`: sign the heads of runs already in a journal into a witness.

A run written with `FSM_AGENT_WITNESS` set is witnessed as it goes; one written before, or
by a writer without it, is not. Anchoring witnesses such runs as they are now: each run
that verifies (checked with the key, against what the witness already saw of it) gets one
line with its head, and its seal if it has halted. Registered on the `fsm-agent`
group when imported (`fsm_agent.cli.group.COMMANDS`).
"""

from __future__ import annotations

import json
import os

import click

from fsm_agent.cli.group import cli
from fsm_agent.cli.options import cli_errors, db_option, json_option, read_journal
from fsm_agent.errors import InvalidInputError
from fsm_agent.journal.chain import verify_run
from fsm_agent.journal.chain_key import KEY_ENV, key_from_env, read_key_file
from fsm_agent.journal.witness import WITNESS_ENV, WitnessError, WitnessWriter, read_log
from fsm_agent.run_ids import resolve_run_id


@cli.command()
@click.argument("run_ids", nargs=-1)
@click.option("--all", "all_runs", is_flag=True, help="Anchor every run in the journal.")
@click.option(
    "--witness",
    "witness_path",
    type=click.Path(dir_okay=False),
    help="The witness file to append to (default: $FSM_AGENT_WITNESS).",
)
@click.option(
    "--key-file",
    type=click.Path(dir_okay=False),
    help="Sign with the chain key in this file (default: $FSM_AGENT_CHAIN_KEY, or the file"
    " $FSM_AGENT_CHAIN_KEY_FILE names).",
)
@db_option
@json_option
@cli_errors
def anchor(
    run_ids: tuple[str, ...],
    all_runs: bool,
    witness_path: str | None,
    key_file: str | None,
    db: str,
    as_json: bool,
) -> None:
    """Witness runs already in the journal as they are now: append each run's head (and
    its seal, once it has halted) to the witness, signed with the chain key — for runs
    written before the witness was set, or by a writer without it.

    Only a run that verifies is anchored (with the key, and against what the witness
    already saw of it); the others are named and left out. Exit 1 if any was left out.
    """
    if bool(run_ids) == all_runs:
        raise InvalidInputError("give RUN_IDs or --all (one of them)")
    path = witness_path or os.environ.get(WITNESS_ENV)
    if not path:
        raise InvalidInputError(f"give --witness FILE (or set ${WITNESS_ENV})")
    key = read_key_file(key_file) if key_file else key_from_env()
    if key is None:
        raise WitnessError(
            f"a witness is signed with the chain key: set ${KEY_ENV} or give --key-file",
            path=path,
        )
    anchored: list[dict[str, object]] = []
    refused: list[dict[str, object]] = []
    writer = WitnessWriter(path, key)
    try:
        with read_journal(db) as store:
            ids = store.run_ids() if all_runs else [resolve_run_id(store, r) for r in run_ids]
            for run_id in ids:
                seen = read_log([path], key, run_id=run_id, missing_ok=True)
                run, links, head = store.chain(run_id)
                report = verify_run(store, run_id, key=key, witness=seen)
                if not report.intact or not links:
                    refused.append({"run_id": run_id, "verdict": report.verdict()})
                    continue
                sealed = run.status == "halted" and run.record_hash is not None
                top = head if sealed and head else links[-1].hash
                assert top is not None  # noqa: S101 - an intact chain has its hashes
                writer.saw(run_id, links[-1].seq, top, run.record_hash if sealed else None)
                anchored.append({"run_id": run_id, "seq": links[-1].seq, "head": top,
                                 "sealed": sealed})  # fmt: skip
    finally:
        writer.close()
    if as_json:
        data = {"witness": path, "anchored": anchored, "refused": refused}
        click.echo(json.dumps(data, indent=2))
    else:
        for a in anchored:
            state = "halted, sealed" if a["sealed"] else "not halted"
            click.echo(f"anchored  {a['run_id']}  at seq {a['seq']} ({state})")
        for r in refused:
            click.echo(f"REFUSED   {r['run_id']}  {r['verdict']}")
        click.echo(f"anchored {len(anchored)} of {len(ids)} runs in {path}")
    if refused:
        raise click.exceptions.Exit(1)
