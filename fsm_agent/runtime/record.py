"""The halt record: one JSON file per run, written atomically even when the run is killed.

The halt contract's field names (`task`, `max_steps`, `wall_clock_ms`, `steps_used`, `tool_calls`,
`halt_reason`, `answer`) come first; ours follow. stdout lies when a process is killed; this
file does not.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

import attrs

from fsm_agent.encoding import FILE_ENCODING, FILE_ERRORS
from fsm_agent.halt import HaltReason
from fsm_agent.journal import serde
from fsm_agent.outputs import OutputRefused, replace_problem
from fsm_agent.runtime.budgets import Budgets, Meters
from fsm_agent.runtime.receipts import Receipt

RECORD_FORMAT = "fsm-agent/halt-record/1"
DEFAULT_RECORD_PATH = "halt-contract.json"
RECORD_TOOL_CALLS = 100


@attrs.frozen
class ToolCallEntry:
    """One tool call as the operator reads it."""

    step: int
    name: str
    args: dict[str, Any]
    status: str
    receipts: tuple[Receipt, ...] = ()
    error: str | None = None
    outcome_unknown: bool = False
    duration_ms: int = 0
    #: False for a read (or a call refused before it was made)
    side_effect: bool = True


@attrs.frozen
class HandoffPacket:
    """Why a person is needed, what was tried, and the arguments frozen for them to review."""

    why: str
    tried: tuple[str, ...] = ()
    frozen_args: dict[str, Any] | None = None
    #: where a declared edge stopped the run: its source state and trigger, and the user
    #: guards (`package.module:function`) that made it stop
    state: str | None = None
    trigger: str | None = None
    guards: tuple[str, ...] = ()
    #: the frozen call's sha256 (`fsm_agent.runtime.snapshot.call_sha256`): what an approval
    #: is bound to (None: no call is frozen)
    call_sha256: str | None = None
    #: what the run waits for — `approval` (approve or deny the frozen call) or `answer` —
    #: when its declaration continues it on a person's decision; None: this stop is final
    awaits: str | None = None
    #: when the wait ends `wait_expired` (ISO time, UTC), while the run waits
    wait_until: str | None = None


@attrs.frozen
class HaltRecord:
    """Why a run ended — one value from the enum — and the proof it ended inside its budgets."""

    task: str
    max_steps: int
    wall_clock_ms: int
    steps_used: int
    tool_calls: tuple[ToolCallEntry, ...]
    halt_reason: HaltReason
    answer: str | None
    run_id: str
    machine: str
    machine_sha256: str
    terminal_state: str
    budgets: Budgets
    meters: Meters
    started_at: str
    ended_at: str
    journal: str
    handoff: HandoffPacket | None = None
    error: str | None = None
    signal: int | None = None
    #: Tool calls left out of `tool_calls` (only the last RECORD_TOOL_CALLS are kept here;
    #: the journal has every one).
    tool_calls_omitted: int = 0
    #: the run's head hash in the journal when the record was written (see fsm_agent.journal.chain):
    #: kept outside the database, it anchors the journal's hash chain
    journal_head: str | None = None
    #: which receipted calls grounded a completed run's answer (`step 1: lookup_ticket`)
    grounded_by: tuple[str, ...] = ()
    #: side-effecting calls without complete receipts when the run ended: their effect is
    #: not known to have happened (never on a completed run)
    unreceipted: tuple[str, ...] = ()
    #: the success rules the run was decided under (1: recorded before 2026-12-01)
    success_rules: int = 1
    format: str = RECORD_FORMAT


_CONTRACT_FIELDS = (
    "task",
    "max_steps",
    "wall_clock_ms",
    "steps_used",
    "tool_calls",
    "halt_reason",
    "answer",
)


def record_json(record: HaltRecord) -> str:
    """The record as pretty JSON, the halt contract's fields first."""
    data = serde.unstructure(record)
    ordered = {k: data[k] for k in _CONTRACT_FIELDS} | {
        k: v for k, v in data.items() if k not in _CONTRACT_FIELDS
    }
    return json.dumps(ordered, indent=2, allow_nan=False) + "\n"


def atomic_write_text(path: str | os.PathLike[str], text: str, *, private: bool = True) -> Path:
    """Write `text` atomically: temp file in the same directory, fsync, rename, fsync the
    directory. A reader sees the old file or the whole new one, never a torn one. Encoded as
    every file is (`fsm_agent.encoding`): any text a run holds can be written.

    Only a regular file is ever replaced: a directory, a device, a pipe, a socket or a
    SQLite database at `path` raises `OutputRefused` (an `OSError`) and nothing is written.
    The file is private (0600) unless `private=False` (what is made for review: it follows
    the umask)."""
    target = Path(path)
    problem = replace_problem(target)
    if problem is not None:
        raise OutputRefused(f"{os.fspath(path)!r} {problem}", path=os.fspath(path))
    directory = target.parent if str(target.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = _new_temp(directory, target.name, 0o600 if private else 0o666)
    try:
        with os.fdopen(fd, "w", encoding=FILE_ENCODING, errors=FILE_ERRORS) as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return target


def _new_temp(directory: Path, name: str, mode: int) -> tuple[int, Path]:
    """A new file beside the target, created with `mode` (less the umask)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = directory / f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, flags, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {directory / name}")


def write_record(record: HaltRecord, path: str | os.PathLike[str]) -> Path:
    """Write the record atomically at `path` (see `atomic_write_text`). The record is the
    run's outcome, made to be read (by CI, by a reviewer): it follows the umask, as the
    report does, which shows all it holds and more. What holds a whole run (the journal, a
    run file, a trace copy) stays private."""
    return atomic_write_text(path, record_json(record), private=False)


def read_record(path: str | os.PathLike[str]) -> HaltRecord:
    """Read a record file back into a `HaltRecord` (strict: unknown fields are refused)."""
    return serde.structure(json.loads(Path(path).read_text(encoding="utf-8")), HaltRecord)
