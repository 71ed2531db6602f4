"""The hash chain: what makes an edited journal show.

Each event's hash is sha256 over the previous event's hash and the event's canonical bytes;
the first event's "previous hash" is the genesis hash of its run (run id, machine and its
hash, task, frozen budgets, start time), so editing the run row breaks the chain too. The
run's head hash (the newest event's) is kept beside the run, so a truncated tail shows.

The canonical bytes are the event's stored column texts, in a fixed order, as one JSON
array — the same for every store and for export files. The sequence number is not hashed:
order is what the links prove, and leaving it out lets `verify_chain` tell an inserted, a
deleted and a reordered event apart.

A chain proves the journal was not edited by someone who could not also recompute every
hash after the edit and the head. Against that stronger adversary, anchor the head outside
the database: the halt record file carries it (`journal_head`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Final, Literal

import attrs

from fsm_agent import serde
from fsm_agent.journal import Event, RunRow, Store

CHAIN_FORMAT: Final = "fsm-agent/chain/1"

TamperKind = Literal[
    "edited", "deleted", "inserted", "reordered", "truncated", "run_edited", "unchained"
]

#: What each kind of finding means, for people reading `fsm-agent verify`.
MEANING: Final = {
    "edited": "the event's bytes do not match its hash (its payload was changed)",
    "deleted": "an event is missing here (deleted)",
    "inserted": "this event is not in the chain (inserted)",
    "reordered": "events are out of chain order (reordered)",
    "truncated": "the run's head hash names an event that is not there (tail truncated)",
    "run_edited": "the run row (task, budgets, machine or start) does not match the chain",
    "unchained": "the event carries no hash (written before the chain, or its hash removed)",
}


def event_columns(e: Event) -> tuple[Any, ...]:
    """The stored columns of an event, in schema order (run_id and seq first); a store
    keeps these exact values (and hashes them with `link`)."""
    return (
        e.run_id,
        e.seq,
        e.kind,
        e.at_ms,
        e.wall_time,
        e.source,
        e.dest,
        e.trigger,
        None if e.halt is None else e.halt.value,
        int(e.retry),
        serde.dumps_compact(e.guards),
        serde.dumps_compact(e.check),
        serde.dumps_compact(e.snapshot),
        None if e.facts is None else serde.dumps_compact(e.facts),
        e.note,
        e.control,
    )


def _sha(data: str) -> str:
    return hashlib.sha256(data.encode("ascii")).hexdigest()


def genesis(run: RunRow) -> str:
    """The 'previous hash' of a run's first event: a hash of what the run row freezes."""
    header = [
        CHAIN_FORMAT,
        run.run_id,
        run.machine,
        run.machine_sha256,
        run.task,
        serde.unstructure(run.budgets),
        run.started_at,
    ]
    return _sha(json.dumps(header, sort_keys=True, separators=(",", ":")))


def link(prev: str, columns: Sequence[Any]) -> str:
    """The hash of one event: its predecessor's hash and its stored columns after the
    (run_id, seq) key. ASCII JSON, so any text (lone surrogates included) hashes."""
    body = json.dumps(list(columns[2:]), separators=(",", ":"), allow_nan=False)
    return _sha(f"{prev}\n{body}")


@attrs.frozen
class ChainLink:
    """One stored event as the chain sees it: its key, its columns, and its two hashes."""

    seq: int
    columns: tuple[Any, ...]
    prev_hash: str | None
    hash: str | None


@attrs.frozen
class Finding:
    """One kind of tampering, at the first sequence number it shows."""

    kind: TamperKind
    seq: int
    detail: str


@attrs.frozen
class ChainReport:
    """The verdict on one run's chain: clean when there are no findings."""

    run_id: str
    events: int
    head_hash: str | None
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not self.findings

    def verdict(self) -> str:
        """One line for every review artifact: `chain: ok (N events)`, or the first bad
        seq and what was done there."""
        if self.ok:
            return f"chain: ok ({self.events} events, head {(self.head_hash or '')[:12]})"
        first = self.findings[0]
        more = f" (and {len(self.findings) - 1} more findings)" if len(self.findings) > 1 else ""
        return (
            f"chain: DOES NOT VERIFY at seq {first.seq}: {first.kind}: {first.detail}{more}"
            f" — see `fsm-agent verify {self.run_id}`"
        )


def verify_chain(run: RunRow, links: Sequence[ChainLink], head_hash: str | None) -> ChainReport:
    """Check one run's chain; report the first sequence number of each kind of tampering."""
    flag = _Findings()
    start = genesis(run)
    hashes = [x.hash for x in links]
    for i, x in enumerate(links):
        if x.hash is None or x.prev_hash is None:
            flag("unchained", x.seq)
            continue
        if link(x.prev_hash, x.columns) != x.hash:
            flag("edited", x.seq)
        before = start if i == 0 else links[i - 1].hash
        if x.prev_hash != before:
            _classify_break(flag, links, i, start, hashes)
    _check_numbering(flag, links)
    _check_head(flag, links, head_hash)
    anchor = None if run.record is None else run.record.journal_head
    if anchor is not None and anchor != head_hash:
        _check_head(flag, links, anchor)
    return ChainReport(run.run_id, len(links), head_hash, flag.ordered())


class _Findings:
    """The first finding of each kind."""

    def __init__(self) -> None:
        self.first: dict[TamperKind, Finding] = {}
        self.moved: set[int] = set()  # positions of events found out of chain order

    def __call__(self, kind: TamperKind, seq: int, detail: str = "") -> None:
        self.first.setdefault(kind, Finding(kind, seq, detail or MEANING[kind]))

    def ordered(self) -> tuple[Finding, ...]:
        return tuple(sorted(self.first.values(), key=lambda f: (f.seq, f.kind)))


def _classify_break(
    flag: _Findings, links: Sequence[ChainLink], i: int, start: str, hashes: list[str | None]
) -> None:
    """Event i does not link to the event before it: say what most likely happened."""
    x = links[i]
    if x.prev_hash in hashes[i + 1 :]:
        flag("reordered", x.seq)
        flag.moved.add(i)
    elif i - 1 in flag.moved:
        flag.moved.add(i)  # the other end of a move already reported as reordered
    elif i == 0:
        flag("run_edited", 0)
    elif x.prev_hash == (start if i == 1 else links[i - 2].hash):
        flag("inserted", links[i - 1].seq)
    elif links[i - 1].seq + 1 == x.seq:
        flag(
            "deleted",
            x.seq,
            "the event before this one is not the one it was chained to (an event was"
            " deleted here, or the one before was rewritten with a new hash)",
        )


def _check_numbering(flag: _Findings, links: Sequence[ChainLink]) -> None:
    expected = 0
    for x in links:
        if x.seq > expected:
            flag("deleted", expected, f"sequence number {expected} is missing (deleted)")
        expected = x.seq + 1


def _check_head(flag: _Findings, links: Sequence[ChainLink], head_hash: str | None) -> None:
    if not links:
        flag("truncated", 0, "the run has no events at all")
        return
    last = links[-1]
    if head_hash is None or head_hash == last.hash:
        if head_hash is None:
            flag("unchained", last.seq, "the run has no head hash")
        return
    hashes = [x.hash for x in links]
    if head_hash in hashes:
        at = hashes.index(head_hash)
        flag("inserted", links[at + 1].seq, "events were appended after the run's head")
    else:
        flag("truncated", last.seq + 1)


def verify_run(store: Store, run_id: str) -> ChainReport:
    """Check the chain of one run in a journal (its stored bytes, not decoded)."""
    run, links, head = store.chain(run_id)
    return verify_chain(run, links, head)
