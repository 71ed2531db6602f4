"""The journal's rows as every backend stores them, in both directions.

Write side: the parameters a run row, a chained event and a job are inserted with (the
column order every backend's statements use). Read side: decoding a stored row back into
the journal's types, failing closed on a corrupt one with the run it belongs to. A backend
adds only its SQL and `fail`, which names its own location in the `JournalError`.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from fsm_agent.encoding import text_sha256
from fsm_agent.errors import JournalError
from fsm_agent.halt import HaltReason
from fsm_agent.journal import content, serde
from fsm_agent.journal.chain_hash import (
    ChainLink,
    ChainModeError,
    chain_version,
    event_columns,
    genesis,
    link,
    link_v3,
    record_link,
    run_key,
)
from fsm_agent.journal.store import Control, Event, Facts, GuardResult, RunRow, RunSummary
from fsm_agent.runtime.budgets import Budgets
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.runtime.snapshot import Snapshot

#: Builds the backend's error for a corrupt row: (message, run id or None) -> JournalError.
Fail = Callable[[str, str | None], JournalError]

_HALT_REASONS = frozenset(r.value for r in HaltReason)


# --- what every backend says --------------------------------------------------------------

#: An import of a run id the journal already holds.
ALREADY_HERE = (
    "already in this journal; the journal is append-only, so an import never overwrites a"
    " run (import into another database)"
)


class StaleHead(Exception):
    """An append's first event does not follow the head it was chained onto (raised inside
    the store's transaction to roll it back; the caller sees `stale_head`)."""


def stale_head(seq: int) -> str:
    """Why an append onto a head that moved was refused."""
    return (
        f"event seq {seq} not written: the run's head is no longer the event it follows"
        " (another process is writing this run)"
    )


# --- write side -------------------------------------------------------------------------------


def chained(
    event: Event,
    prev: str,
    key: bytes | None = None,
    version: int = 3,
    base: Snapshot | None = None,
) -> tuple[tuple[Any, ...], str]:
    """The INSERT parameters of an event chained onto `prev` (with the run's `key`, None
    for an unkeyed run) in chain `version` (from 4, written against the run's `base`: see
    `base_form`), and its hash (hex). The last three parameters are `prev_hash`, `hash` (hex
    text, versions 1 and 2) and `digest` (32 bytes, version 3 on, which stores no copy of
    the previous hash: it is the previous row's)."""
    columns = event_columns(event, version, base)
    if version >= 3:
        digest = link_v3(prev, columns, key)
        return (*columns, None, None, bytes.fromhex(digest)), digest
    digest = link(prev, columns, key)
    return (*columns, prev, digest, None), digest


def chained_batch(
    events: Sequence[Event],
    prev: str,
    key: bytes | None,
    version: int,
    base: Snapshot | None,
    fail: Fail,
) -> tuple[list[tuple[Any, ...]], str]:
    """The INSERT parameters of consecutive events of one run, each chained onto the one
    before (the first onto `prev`), and the new head hash; both stores' `append_many`
    (which refuse an empty batch before they look up its run's head)."""
    run_id = events[0].run_id
    rows, head = [], prev
    for event in events:
        if event.run_id != run_id:
            raise fail("append_many: the events are of more than one run", run_id)
        row, head = chained(event, head, key, version, base)
        rows.append(row)
    return rows, head


def base_form(first: Event) -> Snapshot | None:
    """What a run's later events are written against from chain version 4: its first
    (seq 0) event's snapshot (None when `first` is not that event)."""
    return first.snapshot if first.seq == 0 else None


def chain_link(row: Sequence[Any]) -> ChainLink:
    """A `SELECT_CHAIN` row (the 16 columns, prev_hash, hash, digest) as a `ChainLink`,
    its hashes hex."""
    digest = row[18]
    if digest is None:
        return ChainLink(row[1], tuple(row[:16]), row[16], row[17])
    # a digest that is not bytes (an edited row) is shown as it is, and matches no hash
    shown = digest.hex() if isinstance(digest, bytes) else f"not a digest: {digest!r}"
    return ChainLink(row[1], tuple(row[:16]), row[16], shown)


def declared_row(run: RunRow) -> tuple[str, str, str] | None:
    """The `declarations` row (sha256, name, text) a run row refers to instead of carrying
    its declaration, or None when its text is not the one its sha256 names (kept in the
    run row then, as before)."""
    if run.machine_text and text_sha256(run.machine_text) == run.machine_sha256:
        return run.machine_sha256, run.machine, run.machine_text
    return None


def chain_key(chain: str | None, key: bytes | None, fail: Fail, run_id: str) -> bytes | None:
    """The key a run with chain mode `chain` is written with (None: unkeyed), from the
    store's `key`; a keyed run without its key is a `JournalError`, and nothing is written."""
    try:
        return run_key(chain, key)
    except ChainModeError as exc:
        raise fail(f"cannot write run {run_id}: {exc}; nothing was written", run_id) from exc


def seal(record: HaltRecord, head: str | None, key: bytes | None) -> str | None:
    """The halt record's seal onto the run's head (`chain_hash.record_link`), stored with
    it; None for a run with no head hash (journaled before the chain)."""
    return None if head is None else record_link(head, record, key)


def run_params(
    run: RunRow,
    record: HaltRecord | None,
    *,
    declared: bool = False,
    head: tuple[str | None, int | None] = (None, None),
) -> tuple[Any, ...]:
    """A run row's INSERT parameters, in column order; `declared`: its declaration is in
    the `declarations` table, and the row's `machine_text` is empty; `head`: the head
    (hash, seq) a halted run's record is sealed onto."""
    return (
        run.run_id,
        run.machine,
        run.machine_sha256,
        "" if declared else run.machine_text,
        run.task,
        serde.dumps_compact(run.budgets),
        run.state,
        run.status,
        None if run.halt_reason is None else run.halt_reason.value,
        run.steps_used,
        run.started_at,
        run.ended_at,
        None if record is None else serde.dumps(record),
        run.pid,
        run.host,
        run.chain,
        run.record_hash,
        *head,
    )


def import_params(
    run: RunRow,
    events: Sequence[Event],
    record: HaltRecord | None,
    fail: Fail,
    key: bytes | None = None,
) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
    """The INSERT parameters of an imported run's row and of its events, chained from its
    genesis in the run's own chain mode (a keyed run needs the store's `key` to be its
    key); a halted run's row keeps its head. Refuses a run whose row and record disagree."""
    if run.record != record:
        raise fail(
            "the run row's record and the record to import differ; nothing was written",
            run.run_id,
        )
    own = chain_key(run.chain, key, fail, run.run_id)
    params, prev, version = [], genesis(run, own), chain_version(run.chain)
    base = base_form(events[0]) if events else None
    for event in events:
        row, prev = chained(event, prev, own, version, base)
        params.append(row)
    halted = record is not None and bool(events)
    head = (prev, events[-1].seq) if halted else (None, None)
    declared = bool(declared_row(run))
    return run_params(run, record, declared=declared, head=head), params


def finish_params(
    record: HaltRecord, record_hash: str | None, head: tuple[str | None, int | None]
) -> tuple[Any, ...]:
    """A halted run's UPDATE parameters: state, halt_reason, steps_used, ended_at, record,
    record_hash, the head (hash, seq) the record is sealed onto, run_id."""
    return (record.terminal_state, record.halt_reason.value, record.steps_used,
            record.ended_at, serde.dumps(record), record_hash, *head,
            record.run_id)  # fmt: skip


def control_params(control: Control) -> tuple[Any, ...]:
    """An operator control's INSERT parameters: run_id, kind, payload, who, why, at."""
    return (control.run_id, control.kind, json.dumps(control.payload), control.who,
            control.why, control.at)  # fmt: skip


# --- read side --------------------------------------------------------------------------------


def run_row(row: Mapping[str, Any], fail: Fail) -> RunRow:
    """A `runs` row (with the live state and steps of its newest event, when it has not
    halted) as a `RunRow`."""
    live = row["status"] != "halted" and row.get("live_state") is not None
    live_steps = row.get("live_steps")
    try:
        return RunRow(
            run_id=row["run_id"],
            machine=row["machine"],
            machine_sha256=row["machine_sha256"],
            machine_text=row["machine_text"] or row.get("declared_text") or "",
            task=row["task"],
            budgets=serde.structure(json.loads(row["budgets"]), Budgets),
            state=row["live_state"] if live else row["state"],
            status=row["status"],
            started_at=row["started_at"],
            steps_used=live_steps if live and type(live_steps) is int else row["steps_used"],
            halt_reason=None if row["halt_reason"] is None else HaltReason(row["halt_reason"]),
            ended_at=row["ended_at"],
            record=None
            if row["record"] is None
            else serde.structure(json.loads(row["record"]), HaltRecord),
            pid=row["pid"],
            host=row["host"],
            chain=row.get("chain"),
            record_hash=row.get("record_hash"),
        )
    except Exception as exc:
        raise fail(f"corrupt runs row: {serde.error_path(exc)}", row.get("run_id")) from exc


def _summary_problem(status: Any, reason: Any, steps: Any, max_steps: Any, cost: Any) -> str | None:
    """What is wrong with the columns of one run summary, or None."""
    if status not in ("running", "paused", "halted"):
        return f"status {status!r} is not 'running', 'paused' or 'halted'"
    if reason is not None and reason not in _HALT_REASONS:
        return f"halt_reason {reason!r} is not a halt reason"
    if type(steps) is not int:
        return f"steps_used {steps!r} is not an integer"
    if type(max_steps) is not int or max_steps < 1:
        return f"budgets.max_steps {max_steps!r} is not a positive integer"
    if cost is not None and type(cost) not in (int, float):
        return f"record.meters.cost {cost!r} is not a number"
    return None


def summary(row: tuple[Any, ...], fail: Fail) -> RunSummary:
    """One row of `SELECT_SUMMARIES` (plain tuples and type checks, no converter: `stats`
    reads every run in the journal)."""
    run_id, machine, status, reason, steps, max_steps, started, ended, cost, t_in, t_out = row[:11]
    awaits = row[11] if len(row) > 11 and isinstance(row[11], str) else None
    problem = _summary_problem(status, reason, steps, max_steps, cost)
    if problem is not None:
        raise fail(f"corrupt runs row: {problem}", run_id)
    return RunSummary(
        run_id=run_id,
        machine=machine,
        status=status,
        halt_reason=None if reason is None else HaltReason(reason),
        steps_used=steps,
        max_steps=max_steps,
        started_at=started,
        ended_at=ended,
        cost=None if cost is None else float(cost),
        input_tokens=_tokens(t_in),
        output_tokens=_tokens(t_out),
        awaits=awaits,
    )


def _tokens(value: Any) -> int | None:
    """A token total as summed in SQL (None: no model call of the run reported one)."""
    return None if value is None else int(value)


def events(
    rows: Iterable[Mapping[str, Any]], fail: Fail, base: Mapping[str, Any] | None = None
) -> list[Event]:
    """`events` rows of one run, in the order given, as `Event`s: from its seq 0, or from
    any seq given the run's seq-0 row as `base`."""
    # Decoding builds many small containers; the cyclic GC only slows that down (~25%).
    enabled = gc.isenabled()
    gc.disable()
    try:
        out, memo = [], {}  # type: ignore[var-annotated]
        names: list[str] | None = None
        for r in rows:
            if not isinstance(r, dict) and isinstance(r, Sequence):
                # a row read by name (`sqlite3.Row`) looks each column up by comparing
                # names: one dict of it is cheaper than the ~20 lookups a decode makes
                names = names or list(r.keys())
                r = dict(zip(names, r, strict=True))
            if base is None and r["seq"] == 0:
                base = r
            out.append(event(r, fail, base, memo))
        return out
    finally:
        if enabled:
            gc.enable()


_GUARDS = tuple[GuardResult, ...]
#: Guard-result columns already decoded (their values are immutable, so one serves every
#: event with the same text: a loop evaluates the same guards to the same results).
_guard_texts: dict[str, tuple[GuardResult, ...]] = {}


def _guards(text: str) -> tuple[GuardResult, ...]:
    found = _guard_texts.get(text)
    if found is None:
        found = content.remember(
            _guard_texts, text, serde.structure_fast(serde.loads(text), _GUARDS)
        )
    return found


def event(
    r: Mapping[str, Any],
    fail: Fail,
    base: Mapping[str, Any] | None = None,
    memo: content.Memo | None = None,
) -> Event:
    """One `events` row as an `Event`; `base`: the run's seq-0 row, which a row written by
    chain version 4's rules (`fsm_agent.journal.content`) is read against; `memo`: what this read
    of the run's rows already built (`content.Memo`)."""
    if content.is_v4(r.get("snapshot")):
        try:
            return content.event(r, None if r["seq"] == 0 else base, memo)
        except Exception as exc:
            message = f"corrupt event seq {r.get('seq')}: {serde.error_path(exc)}"
            raise fail(message, r.get("run_id")) from exc
    try:
        facts = r["facts"]
        return Event(
            run_id=r["run_id"],
            seq=r["seq"],
            kind=r["kind"],
            at_ms=r["at_ms"],
            wall_time=r["wall_time"],
            source=r["source"],
            dest=r["dest"],
            trigger=r["trigger"],
            snapshot=serde.structure_fast(serde.loads(r["snapshot"]), Snapshot),
            guards=_guards(r["guards"]),
            check=_guards(r["checks"]),
            facts=None if facts is None else serde.structure_fast(serde.loads(facts), Facts),
            halt=None if r["halt"] is None else HaltReason(r["halt"]),
            retry=bool(r["retry"]),
            note=r["note"],
            control=r["control"],
        )
    except Exception as exc:
        message = f"corrupt event seq {r.get('seq')}: {serde.error_path(exc)}"
        raise fail(message, r.get("run_id")) from exc


def control(r: Mapping[str, Any], fail: Fail) -> Control:
    """One `controls` row as a `Control`."""
    try:
        return Control(
            id=r["id"],
            run_id=r["run_id"],
            kind=r["kind"],
            payload=json.loads(r["payload"]),
            who=r["who"],
            why=r["why"],
            at=r["at"],
        )
    except Exception as exc:
        message = f"corrupt controls row {r.get('id')}: {serde.error_path(exc)}"
        raise fail(message, r.get("run_id")) from exc
