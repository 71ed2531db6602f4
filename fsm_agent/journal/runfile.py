"""Run files: one self-contained JSON file per run, so traces can leave the box.

`export_run` reads a run (its row, every event, its halt record and the machine declaration
with its hash) from a journal; `write_run_file` writes it atomically; `read_run_file` reads
it back strictly; `import_run` loads it into another journal exactly — same run id, same
sequence numbers, the same bytes in every column — in one transaction, and never over a run
that is already there (the journal is append-only).

A run file is checked for integrity (format, machine hash, events numbered 0..n-1, one run
id throughout, the record agreeing with the row) when read, and carries the journal's hash
chain (each event's hash and its predecessor's, and the run's head): `verify_run_file`
checks it exactly as `fsm-agent verify` checks a journal, and `import_run` refuses a file
whose chain does not verify.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import attrs

from fsm_agent.encoding import text_sha256, unencodable
from fsm_agent.errors import InvalidInputError, JournalError
from fsm_agent.journal import serde
from fsm_agent.journal.chain import ChainReport, Finding, verify_chain
from fsm_agent.journal.chain_hash import ChainLink, base_of, chain_version, event_columns
from fsm_agent.journal.chain_key import key_from_env
from fsm_agent.journal.store import Event, RunRow, Store
from fsm_agent.journal.witness import NO_WITNESS, Witness
from fsm_agent.run_ids import BadRunId, RunNotFound, is_run_id
from fsm_agent.runtime.record import HaltRecord, atomic_write_text

#: The format of a run chained in version 3 or 4 (`fsm_agent.journal.chain_hash`; 4: every new
#: run): its events carry their hashes only (`prev_hash` is null: it is the event before's).
#: An fsm-agent that does not know chain version 3 refuses the file by its format, one that
#: does not know version 4 by the run's chain mode. The events are whole in both: verifying
#: writes each again in its run's version (`chain_hash.event_columns`) and hashes that.
RUN_FILE_FORMAT: Final = "fsm-agent/run/4"
#: The format of a run chained in version 1 or 2 (each event's `prev_hash` too): such a run
#: is exported as before, so an fsm-agent that knows no chain version 3 still reads it.
RUN_FILE_FORMAT_3: Final = "fsm-agent/run/3"
#: Every format this fsm-agent reads: run/2 files (written before the run row carried its
#: chain mode and record seal) read as runs journaled before records were sealed.
READABLE_FORMATS: Final = ("fsm-agent/run/2", RUN_FILE_FORMAT_3, RUN_FILE_FORMAT)
#: How many times `export_run` re-reads a run that halted while it was being read.
_EXPORT_ATTEMPTS: Final = 3


class RunFileError(InvalidInputError):
    """A run file cannot be used: unreadable, not JSON, another format, or inconsistent.

    Names the file (`path`) and the JSON path of the problem (`key`).
    """

    def __init__(self, message: str, *, path: str, key: str = "$") -> None:
        self.path = path
        self.key = key
        self.detail = message
        super().__init__(f"{path}: {message} @ {key}")


class RunExistsError(InvalidInputError):
    """The journal already holds a run with the imported run's id; nothing was written."""

    def __init__(self, run_id: str, *, path: str, identical: bool) -> None:
        self.run_id = run_id
        self.path = path
        self.identical = identical
        what = "identical to this file" if identical else "a different run with the same id"
        super().__init__(
            f"{path} already holds run {run_id!r} ({what}); the journal is append-only, so an"
            " import never overwrites a run (import into another database)"
        )


@attrs.frozen
class EventHash:
    """One event's place in the hash chain (see `fsm_agent.journal.chain`)."""

    prev_hash: str | None
    hash: str | None


@attrs.frozen(kw_only=True)
class RunFile:
    """One run, whole: its row, every journaled event, its halt record (None while it has
    none) and the machine declaration it ran with, with the declaration's sha256; `chain`
    holds each event's hashes (in event order) and `head_hash` the run's head."""

    format: str = RUN_FILE_FORMAT
    run: RunRow
    events: tuple[Event, ...]
    record: HaltRecord | None
    machine_sha256: str
    machine_text: str
    chain: tuple[EventHash, ...] = ()
    head_hash: str | None = None


# --- integrity --------------------------------------------------------------------------------


def _machine_problems(rf: RunFile) -> Iterator[tuple[str, str]]:
    digest = text_sha256(rf.machine_text)
    if digest != rf.machine_sha256:
        yield (
            "$.machine_sha256",
            f"machine_sha256 does not match the sha256 of machine_text ({digest}); the"
            " declaration or its hash was changed after export",
        )
    if rf.run.machine_sha256 != rf.machine_sha256:
        yield "$.run.machine_sha256", "run.machine_sha256 differs from machine_sha256"
    if rf.run.machine_text != rf.machine_text:
        yield "$.run.machine_text", "run.machine_text differs from machine_text"


def _event_problems(rf: RunFile) -> Iterator[tuple[str, str]]:
    if not rf.events:
        yield "$.events", "no events (every run starts with a `started` event)"
    last = len(rf.events) - 1
    for i, event in enumerate(rf.events):
        if event.seq != i:
            yield (
                f"$.events[{i}].seq",
                f"event seq {event.seq} where {i} was expected: events must be numbered"
                f" 0..{last} with no gap or repeat",
            )
        if event.run_id != rf.run.run_id:
            yield (
                f"$.events[{i}].run_id",
                f"event run_id {event.run_id!r} is not the run's id {rf.run.run_id!r}",
            )
    if rf.events and rf.events[0].kind != "started":
        kind = rf.events[0].kind
        yield "$.events[0].kind", f"the first event is {kind!r}; a run starts with 'started'"


def _record_problems(rf: RunFile) -> Iterator[tuple[str, str]]:
    if rf.record != rf.run.record:
        yield "$.record", "record differs from run.record"
    if (rf.record is None) != (rf.run.status != "halted"):
        has = "no record" if rf.record is None else "a record"
        yield "$.record", f"the run is {rf.run.status!r} but the file has {has}"
    if rf.record is not None and rf.record.run_id != rf.run.run_id:
        yield (
            "$.record.run_id",
            f"record.run_id {rf.record.run_id!r} is not the run's id {rf.run.run_id!r}",
        )
    if rf.record is not None and rf.record.machine_sha256 != rf.machine_sha256:
        yield "$.record.machine_sha256", "record.machine_sha256 differs from machine_sha256"


#: The run row's and an event's fields a journal stores as text (not as ASCII JSON).
_RUN_TEXT = ("run_id", "machine", "machine_sha256", "machine_text", "task", "state", "status",
             "started_at", "ended_at", "host")  # fmt: skip
_EVENT_TEXT = ("run_id", "kind", "wall_time", "source", "dest", "trigger", "note", "control")


def _text_problems(rf: RunFile) -> Iterator[tuple[str, str]]:
    """Text no journal can store (a lone surrogate, which no live run writes there)."""
    fields = [(f"$.run.{name}", getattr(rf.run, name)) for name in _RUN_TEXT]
    fields.append(("$.machine_text", rf.machine_text))
    for i, event in enumerate(rf.events):
        fields += [(f"$.events[{i}].{name}", getattr(event, name)) for name in _EVENT_TEXT]
    for key, value in fields:
        why = unencodable(value) if isinstance(value, str) else None
        if why is not None:
            yield key, f"a journal cannot store this text: {why}"


def first_problem(run_file: RunFile) -> tuple[str, str] | None:
    """The first integrity problem of a run file as (JSON path, message), or None."""
    if run_file.format not in READABLE_FORMATS:
        return "$.format", f"format {run_file.format!r} is not {RUN_FILE_FORMAT!r}"
    for problems in (_machine_problems, _event_problems, _record_problems, _text_problems):
        found = next(problems(run_file), None)
        if found is not None:
            return found
    return None


def check_run_file(run_file: RunFile, *, source: str) -> None:
    """Raise `RunFileError` naming `source` and the JSON path of the first problem found."""
    problem = first_problem(run_file)
    if problem is not None:
        key, message = problem
        raise RunFileError(message, path=source, key=key)


# --- export and import ------------------------------------------------------------------------


def _read_run(store: Store, run_id: str) -> tuple[RunRow, tuple[Event, ...]]:
    """The row and events of one run, consistent with each other.

    A halted run's events are all written before its row says so; a run that halts between
    the two reads is read again (a live run is exported as far as it has got).
    """
    for _ in range(_EXPORT_ATTEMPTS):
        run = store.get_run(run_id)
        events = tuple(store.events(run_id))
        if run.status == "halted" or store.get_run(run_id).status != "halted":
            break
    return run, events


def export_run(store: Store, run_id: str) -> RunFile:
    """One run of `store` as a `RunFile`, with its hash chain exactly as stored (a tampered
    journal exports a file that fails `verify_run_file` the same way); raises `RunNotFound`,
    or `JournalError` when the journal's copy of the run is inconsistent."""
    run, events = _read_run(store, run_id)
    _, links, head = store.chain(run_id)
    links = links[: len(events)]
    if run.status != "halted":  # a live run is exported as far as it had got
        head = links[-1].hash if links else None
    v3 = chain_version(run.chain) >= 3
    run_file = RunFile(
        format=RUN_FILE_FORMAT if v3 else RUN_FILE_FORMAT_3,
        run=run,
        events=events,
        record=run.record,
        machine_sha256=run.machine_sha256,
        machine_text=run.machine_text,
        chain=tuple(EventHash(x.prev_hash, x.hash) for x in links),
        head_hash=head,
    )
    problem = first_problem(run_file)
    if problem is not None:
        key, message = problem
        raise JournalError(f"cannot export: {message} @ {key}", path=store.location, run_id=run_id)
    return run_file


def import_run(store: Store, run_file: RunFile, *, source: str = "run file") -> None:
    """Load a run file into `store` exactly, in one transaction.

    Raises `RunFileError` (naming `source`) for an inconsistent file and `RunExistsError`
    when the store already holds the run id: an import never overwrites.
    """
    check_run_file(run_file, source=source)
    if not is_run_id(run_file.run.run_id):  # a run id enters this journal: the grammar holds
        raise RunFileError(str(BadRunId(run_file.run.run_id)), path=source, key="$.run.run_id")
    _refuse_existing(store, run_file)
    report = verify_run_file(run_file, key=getattr(store, "chain_key", None))
    if report.findings:
        first = report.findings[0]
        raise RunFileError(
            f"the hash chain does not verify: seq {first.seq}: {first.detail}"
            f" (see `fsm-agent verify {source}`); nothing was imported",
            path=source,
            key="$.chain",
        )
    if not report.checked:
        raise RunFileError(
            "the run's hash chain is keyed and no key was given, so it cannot be checked"
            " (set FSM_AGENT_CHAIN_KEY or FSM_AGENT_CHAIN_KEY_FILE to the key it was written"
            " with); nothing was imported",
            path=source,
            key="$.run.chain",
        )
    store.import_run(run_file.run, run_file.events, run_file.record)


def verify_run_file(
    run_file: RunFile,
    *,
    key: bytes | None = None,
    record_file: tuple[HaltRecord, str] | None = None,
    witness: Witness = NO_WITNESS,
) -> ChainReport:
    """Check the file's hash chain exactly as `fsm-agent verify` checks a journal: the
    events' bytes are re-encoded as a journal stores them, then hashed (a keyed run's with
    `key`, else the environment's: see `fsm_agent.journal.chain_key`), and the run checked
    against what `witness` saw of it."""
    hashes = (*run_file.chain, *[EventHash(None, None)] * len(run_file.events))
    version = chain_version(run_file.run.chain)
    base = base_of(run_file.events, version)
    links = [
        ChainLink(e.seq, event_columns(e, version, base), h.prev_hash, h.hash)
        for e, h in zip(run_file.events, hashes, strict=False)
    ]
    if key is None:
        key = key_from_env()
    report = verify_chain(
        run_file.run, links, run_file.head_hash, key=key, record_file=record_file, witness=witness
    )
    copies = _copy_findings(run_file)
    if not copies:
        return report
    ordered = sorted((*report.findings, *copies), key=lambda f: (f.seq, f.kind, f.field or ""))
    return attrs.evolve(report, findings=tuple(ordered))


def _copy_findings(run_file: RunFile) -> list[Finding]:
    """The file's own copies of what the chain covers in `run` (the declaration and its
    hash, the record) that differ from it: a reader of the file could be shown either."""
    found = [Finding("machine_edited", 0, why, key) for key, why in _machine_problems(run_file)]
    if run_file.record != run_file.run.record:
        seq = run_file.events[-1].seq if run_file.events else 0
        why = "$.record differs from $.run.record, the record the chain seals (one was edited)"
        found.append(Finding("record_edited", seq, why, "$.record"))
    return found


def _refuse_existing(store: Store, run_file: RunFile) -> None:
    run_id = run_file.run.run_id
    try:
        existing = store.get_run(run_id)
    except RunNotFound:
        return
    identical = existing == run_file.run and tuple(store.events(run_id)) == run_file.events
    raise RunExistsError(run_id, path=store.location, identical=identical)


# --- files ------------------------------------------------------------------------------------


def run_file_json(run_file: RunFile) -> str:
    """The file's text: indented JSON, fields in declared order (`format` first), no NaN."""
    data = serde.unstructure(run_file)
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_run_file(run_file: RunFile, path: str | os.PathLike[str]) -> Path:
    """Write a run file atomically at `path` and return the path."""
    return atomic_write_text(path, run_file_json(run_file))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse(text: str, source: str) -> Any:
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise RunFileError(
            f"not valid JSON ({exc.msg}: line {exc.lineno} column {exc.colno});"
            " truncated or corrupt? export the run again",
            path=source,
        ) from exc
    except ValueError as exc:
        raise RunFileError(f"not valid JSON ({exc})", path=source) from exc
    except RecursionError as exc:
        raise RunFileError("not a run file: nested too deeply to read", path=source) from exc


def _check_format(data: Any, source: str) -> None:
    if not isinstance(data, dict):
        raise RunFileError("not a run file: expected a JSON object", path=source)
    found = data.get("format")
    if found not in READABLE_FORMATS:
        what = "no format" if found is None else f"format {found!r}"
        raise RunFileError(
            f"not a run file this fsm-agent reads: {what}, expected {RUN_FILE_FORMAT!r}"
            " (write one with `fsm-agent export RUN_ID -o FILE`)",
            path=source,
            key="$.format",
        )


def _structure(data: dict[str, Any], source: str) -> RunFile:
    try:
        return serde.structure(data, RunFile)
    except Exception as exc:
        problems = serde.error_path(exc).split("; ")
        message, _, key = problems[0].rpartition(" @ ")
        if not message:
            message, key = problems[0], "$"
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise RunFileError(f"{message}{more}", path=source, key=key) from exc


def read_run_file(path: str | os.PathLike[str], *, checked: bool = True) -> RunFile:
    """Read a run file strictly: unknown keys, wrong types, another format, a machine hash
    that does not match, or events not numbered 0..n-1 raise `RunFileError`. With
    `checked=False` only the format and types are checked (`fsm-agent verify` reads a
    tampered file to say what was done to it)."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise RunFileError(f"cannot read the run file ({why})", path=source) from exc
    data = _parse(text, source)
    _check_format(data, source)
    run_file = _structure(data, source)
    if checked:
        check_run_file(run_file, source=source)
    return run_file
