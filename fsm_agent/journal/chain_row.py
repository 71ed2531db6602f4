"""The run row and the halt record against the chain: what `verify` checks beside the events.

The events are chained; the run row's frozen fields are in the genesis. What else a review
shows is checked against those chained facts here:

- the stored declaration (`machine_text`) against its sha256, which the genesis holds;
- the halt record against its seal (`record_hash`, written in the same statement as the
  record, over the run's head: see `chain_hash.record_link`), and its reason, terminal
  state and steps against the halting event;
- the row's summary columns (`status`, `halt_reason`, `state`, `steps_used`, `ended_at`)
  against the record and the halting event;
- a halt record FILE (`fsm-agent verify --record FILE`) against the journal's sealed record.

Field names are the journal's: `runs.COLUMN` for the row (in a run file, `$.run.COLUMN`),
`record.FIELD` for the record.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fsm_agent.encoding import text_sha256
from fsm_agent.journal import serde
from fsm_agent.journal.chain_hash import ChainLink, ChainMode, record_link
from fsm_agent.journal.findings import Findings
from fsm_agent.journal.store import RunRow
from fsm_agent.runtime.record import HaltRecord

#: Why a run's record is not covered by its chain, in verify's notes.
NOT_SEALED = (
    "halt record not sealed: the run was journaled before fsm-agent sealed halt records onto"
    " the chain, so its record is checked against the chained halt only (reason, state,"
    " steps), not field by field"
)


def check_machine(run: RunRow, flag: Findings) -> None:
    """The declaration a run is resumed and replayed with must be the one it was hashed as."""
    digest = text_sha256(run.machine_text)
    if digest != run.machine_sha256:
        flag(
            "machine_edited",
            0,
            f"the stored declaration's sha256 is {digest[:12]}…, not the {run.machine_sha256[:12]}…"
            " the run was started with (and chained on): it was edited; the run is neither"
            " resumed nor replayed with it",
            "runs.machine_text",
        )


def _halting(links: Sequence[ChainLink]) -> tuple[int, str | None, str | None, int | None]:
    """The last event's seq, and (if it halts) its halt reason, destination and steps, read
    from its chained columns."""
    if not links:
        return 0, None, None, None
    last = links[-1]
    halt, dest = last.columns[8], last.columns[6]
    try:
        meters = _snapshot_data(last.columns[12], links[0].columns[12]).get("meters", {})
        steps = meters.get("steps_used", 0) if isinstance(meters, dict) else None
    except (TypeError, ValueError, AttributeError, LookupError):
        steps = None
    return last.seq, halt, dest, steps if type(steps) is int else None


def _snapshot_data(text: Any, first: Any) -> Any:
    """A stored snapshot's top-level fields (of a chain-version-4 text, with those it left
    to the run's first event restored from that event's text `first`)."""
    data = json.loads(text)
    if not isinstance(data, list):
        return data
    data, base = data[1], json.loads(first)[1]
    return {**base, **data} if isinstance(base, dict) and isinstance(data, dict) else data


def check_summary(
    run: RunRow,
    links: Sequence[ChainLink],
    head_hash: str | None,
    flag: Findings,
    notes: list[str],
) -> None:
    """The row's status and summary columns, and the record's halt, against the chained
    halting event. Against the last event only while it is the head (a tail cut off is a
    finding of its own), and against the row only while its genesis holds."""
    seq, halt, dest, steps = _halting(links)
    tail_ok = bool(links) and links[-1].hash == head_hash
    if not tail_ok:
        halt = dest = steps = None
    record = run.record
    if run.status == "halted":
        if halt is None and tail_ok:
            flag(
                "summary_edited",
                seq,
                f"the row says halted, but the chained events end at seq {seq} without a halt",
                "runs.status",
            )
        if record is None:
            flag(
                "record_missing",
                seq,
                "the row says halted but holds no halt record (it was removed)",
                "runs.record",
            )
    else:
        if record is not None:
            flag(
                "summary_edited",
                seq,
                f"the row says {run.status}, but it holds a halt record (the run halted)",
                "runs.status",
            )
        if run.halt_reason is not None:
            flag(
                "summary_edited",
                seq,
                f"the row of a {run.status} run names a halt reason ({run.halt_reason.value})",
                "runs.halt_reason",
            )
        if run.ended_at is not None:
            flag(
                "summary_edited",
                seq,
                f"the row of a {run.status} run names an end time",
                "runs.ended_at",
            )
        if halt is not None and record is None:
            notes.append(
                f"halted {halt} at seq {seq}, but its halt record was never written (the"
                f" process stopped in between): `fsm-agent resume {run.run_id}` writes it"
            )
    if record is None:
        return
    _check_record_facts(
        run, record, seq, halt, dest, steps, flag, row_ok=not flag.has("run_edited")
    )
    if run.status == "halted":
        columns = (
            ("halt_reason", run.halt_reason, record.halt_reason),
            ("state", run.state, record.terminal_state),
            ("steps_used", run.steps_used, record.steps_used),
            ("ended_at", run.ended_at, record.ended_at),
        )
        for name, stored, chained in columns:
            if stored != chained:
                flag(
                    "summary_edited",
                    seq,
                    f"runs.{name} is {_shown(stored)}; the chained"
                    f" halt record says {_shown(chained)}",
                    f"runs.{name}",
                )


def _check_record_facts(
    run: RunRow,
    record: HaltRecord,
    seq: int,
    halt: str | None,
    dest: str | None,
    steps: int | None,
    flag: Findings,
    *,
    row_ok: bool,
) -> None:
    """What the record says that the chain says too: the run it is of (while the row's
    genesis holds), and its halt."""
    facts: list[tuple[str, Any, Any]] = []
    if row_ok:
        facts += [("run_id", record.run_id, run.run_id),
                  ("task", record.task, run.task),
                  ("machine_sha256", record.machine_sha256, run.machine_sha256),
                  ("started_at", record.started_at, run.started_at)]  # fmt: skip
    if halt is not None:
        facts += [
            ("halt_reason", record.halt_reason.value, halt),
            ("terminal_state", record.terminal_state, dest),
        ]
        if steps is not None:
            facts.append(("steps_used", record.steps_used, steps))
    for name, said, chained in facts:
        if said != chained:
            flag(
                "record_edited",
                seq,
                f"record.{name} is {_shown(said)}; the chain says {_shown(chained)}",
                f"record.{name}",
            )


def check_seal(
    run: RunRow,
    links: Sequence[ChainLink],
    head_hash: str | None,
    mode: ChainMode,
    key: bytes | None,
    can_hash: bool,
    flag: Findings,
    notes: list[str],
) -> None:
    """The halt record against the seal chained onto the run's head."""
    seq = links[-1].seq if links else 0
    if run.record is None:
        if run.record_hash is not None:
            flag(
                "record_missing",
                seq,
                "the row holds a record seal but no halt record (it was removed)",
                "runs.record",
            )
        return
    if run.record_hash is None:
        if mode.sealed:
            flag(
                "unchained",
                seq,
                "the halt record has no seal (runs.record_hash was removed)",
                "runs.record_hash",
            )
        else:
            notes.append(NOT_SEALED)
        return
    # sealed onto the head it names (the anchor check says whether that is still the head)
    sealed_on = run.record.journal_head or head_hash
    if (
        can_hash
        and sealed_on is not None
        and record_link(sealed_on, run.record, key) != (run.record_hash)
    ):
        flag(
            "record_edited",
            seq,
            "the halt record's bytes do not match the seal chained onto"
            " the run's head: a field of it (answer, reason, packet, meters …) or the seal"
            " was edited",
            "runs.record",
        )


def check_record_file(
    record: HaltRecord,
    run: RunRow,
    links: Sequence[ChainLink],
    head_hash: str | None,
    key: bytes | None,
    can_hash: bool,
    flag: Findings,
    notes: list[str],
    *,
    source: str,
) -> None:
    """A halt record file against the journal's record of the same run, field by field;
    sealed, the journal's record is the chained one."""
    seq = links[-1].seq if links else 0
    stored = run.record
    if stored is None:
        flag(
            "record_missing",
            seq,
            f"the journal holds no halt record for this run (it is"
            f" {run.status}): {source} cannot be checked against it",
            "record",
        )
        return
    mine: dict[str, Any] = serde.unstructure(record)
    theirs: dict[str, Any] = serde.unstructure(stored)
    for name in sorted(set(mine) | set(theirs)):
        if mine.get(name) != theirs.get(name):
            flag(
                "record_edited",
                seq,
                f"{source}'s {name} is {_shown(mine.get(name))}; the"
                f" journal's record says {_shown(theirs.get(name))}",
                f"record.{name}",
            )
    sealed_on = record.journal_head or head_hash
    if (
        run.record_hash is not None
        and can_hash
        and sealed_on is not None
        and record == stored
        and record_link(sealed_on, record, key) == run.record_hash
    ):
        notes.append(f"{source} is the halt record sealed onto this run's chain")
    elif run.record_hash is None:
        notes.append(
            f"{source} was compared with the journal's stored record, which this run's chain"
            " does not cover (journaled before fsm-agent sealed halt records)"
        )


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True, default=repr)
    return text if len(text) <= 80 else f"{text[:77]}..."
