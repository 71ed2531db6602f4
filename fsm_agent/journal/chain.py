"""The hash chain: what makes an edited journal show.

Each event's hash is a digest over the previous event's hash and the event's canonical
bytes; the first event's "previous hash" is the genesis of its run (run id, machine and its
hash, task, frozen budgets, start time, chain mode), so editing the run row breaks the chain
too. A live run's head hash is its newest event's; a halted run's is kept beside the run
with its halt record, sealed onto it in the same write, so a truncated tail, or an event
appended after the halt, shows (a live run's tail cut off by someone who bypasses the
append-only triggers does not, until the record anchors the head). How the digests are made
(sha256, or HMAC-SHA256 under a key the journal does not hold) is in
`fsm_agent.journal.chain_hash`; the checks of the row and the record against the chain in
`fsm_agent.journal.chain_row`.

The canonical bytes are the event's stored column texts, in a fixed order — as one JSON
array in chain versions 1 and 2, each framed by its type and length in version 3 — the same
for every store and for export files. The sequence number is not hashed: order is what the
links prove, and leaving it out lets `verify_chain` tell an inserted, a deleted and a
reordered event apart (in version 3, which stores no previous hash, an event after a run
of deleted and renumbered events shows as edited).

An unkeyed chain proves the journal was not edited by someone who could not also recompute
every hash after the edit, the head and the seal. A keyed chain proves it against anyone
who does not hold the key, save what takes events away with their anchor: a keyed run
whose record is not sealed is never ok without a witness that saw its head
(`fsm_agent.journal.witness`, checked in `fsm_agent.journal.chain_witness`), and only a
witness shows a run deleted whole. Against an adversary with the key, anchor the head
outside the database too: the halt record file carries it (`journal_head`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Literal

import attrs

from fsm_agent.journal import chain_row, chain_waits, chain_witness
from fsm_agent.journal.chain_hash import CHAIN_FORMAT as CHAIN_FORMAT
from fsm_agent.journal.chain_hash import ChainLink as ChainLink
from fsm_agent.journal.chain_hash import ChainMode, ChainModeError, key_id, parse_mode
from fsm_agent.journal.chain_hash import Mode as Mode
from fsm_agent.journal.chain_hash import event_columns as event_columns
from fsm_agent.journal.chain_hash import genesis as genesis
from fsm_agent.journal.chain_hash import link as link
from fsm_agent.journal.chain_hash import link_v3 as link_v3
from fsm_agent.journal.findings import MEANING as MEANING
from fsm_agent.journal.findings import Finding as Finding
from fsm_agent.journal.findings import Findings
from fsm_agent.journal.findings import TamperKind as TamperKind
from fsm_agent.journal.store import RunRow, Store
from fsm_agent.journal.witness import NO_WITNESS, WITNESS_ENV, Witness, read_log
from fsm_agent.runtime.record import HaltRecord

#: What a run's halt record is to its chain: sealed onto it, journaled before records were
#: sealed, or not there (the run has not halted).
RecordCover = Literal["sealed", "not_sealed", "none"]
KEY_HINT = "set FSM_AGENT_CHAIN_KEY or FSM_AGENT_CHAIN_KEY_FILE, or give --key-file"


@attrs.frozen
class ChainReport:
    """The verdict on one run's chain: clean when it was checked and there are no findings.

    `mode` is how the run was chained (`unkeyed` or `keyed`); `checked` is False for a keyed
    run verified without its key (then only what needs no key was checked, and it is never
    ok); `record` says whether the halt record is sealed onto the chain; `notes` say what
    was not checked, and why, without being findings. `witness` is what the witness said of
    the run (None: none was given); `unproven` what cannot be proven without one (a keyed
    run whose record is not sealed: that its tail was not cut off), which is never ok
    either, though the chain as far as it goes is `intact`.
    """

    run_id: str
    events: int
    head_hash: str | None
    findings: tuple[Finding, ...]
    mode: Mode = "unkeyed"
    version: int = 2
    checked: bool = True
    record: RecordCover = "none"
    notes: tuple[str, ...] = ()
    witness: str | None = None
    unproven: str | None = None

    @property
    def ok(self) -> bool:
        return self.intact and self.unproven is None

    @property
    def intact(self) -> bool:
        """Checked, and nothing found: every event there is the one written (what resume
        and import need), whether or not what follows the head can be proven."""
        return self.checked and not self.findings

    def verdict(self) -> str:
        """One line for every review artifact: `chain: ok (N events, head …, unkeyed)`, that
        a keyed chain was not checked, or the first bad seq and what was done there."""
        if self.findings:
            first = self.findings[0]
            n = len(self.findings) - 1
            more = f" (and {n} more finding{'s' if n > 1 else ''})" if n else ""
            where = f" ({first.field})" if first.field else ""
            return (
                f"chain: DOES NOT VERIFY at seq {first.seq}: {first.kind}{where}:"
                f" {first.detail}{more} — see `fsm-agent verify {self.run_id}`"
            )
        if not self.checked:
            return f"chain: keyed: key not given, chain not checked ({KEY_HINT})"
        if self.unproven is not None:
            return f"chain: NOT PROVEN ({self.events} events): {self.unproven}"
        unsealed = "; halt record not sealed (older journal)" if self.record == "not_sealed" else ""
        seen = f"; {self.witness}" if self.witness else ""
        head = (self.head_hash or "")[:12]
        return f"chain: ok ({self.events} events, head {head}, {self.mode}{unsealed}{seen})"


def verify_chain(
    run: RunRow,
    links: Sequence[ChainLink],
    head_hash: str | None,
    *,
    key: bytes | None = None,
    record_file: tuple[HaltRecord, str] | None = None,
    witness: Witness = NO_WITNESS,
) -> ChainReport:
    """Check one run's chain, its row and its halt record; report the first sequence number
    (and field) of each kind of tampering. A keyed run needs `key`: without it only what
    needs no key is checked, and the report is not ok. `record_file` (a record and where it
    came from) is checked against the journal's record too, and the run against what
    `witness` saw of it."""
    flag, notes = Findings(), list[str]()
    checked, use, can_hash = True, None, True
    try:
        mode = parse_mode(run.chain)
    except ChainModeError as exc:  # no hash can be recomputed: the mode is unknown
        flag("run_edited", 0, f"runs.chain: {exc}: the run row was edited", "runs.chain")
        mode, can_hash = ChainMode(_stored_version(links)), False
    if mode.version < 3 <= _stored_version(links):
        flag("run_edited", 0, _DOWNGRADED)
        mode, can_hash = ChainMode(3, mode.key_id), False
    if mode.key_id is not None:
        if key is None:
            checked = False
        elif key_id(key) != mode.key_id:
            flag(
                "wrong_key",
                0,
                f"the run was chained with key id {mode.key_id}; the key"
                f" given has id {key_id(key)}: nothing that needs the key was checked",
            )
        else:
            use = key
        can_hash = use is not None
    _check_numbering(flag, links)
    stored, links = links, _without_copies(flag, links)
    if mode.version >= 3:
        _check_links_v3(flag, run, links, use, can_hash)
    else:
        _check_links(flag, run, links, use, can_hash)
    _check_head(flag, links, head_hash)
    anchor = None if run.record is None else run.record.journal_head
    if anchor is not None and anchor != head_hash:
        _check_head(flag, links, anchor)
    chain_waits.check_waits(links, use, can_hash, flag)
    chain_row.check_machine(run, flag)
    chain_row.check_summary(run, links, head_hash, flag, notes)
    chain_row.check_seal(run, links, head_hash, mode, use, can_hash, flag, notes)
    if record_file is not None:
        record, source = record_file
        chain_row.check_record_file(
            record, run, links, head_hash, use, can_hash, flag, notes, source=source
        )
    links = stored  # the witness saw seqs as the journal numbers them
    said, at_head = chain_witness.check_witness(run, links, witness, flag)
    if not checked:
        notes.insert(
            0,
            f"keyed (key id {mode.key_id}): key not given, so the hashes were"
            f" not checked ({KEY_HINT})",
        )
    cover: RecordCover = "none"
    if run.record is not None:
        cover = "not_sealed" if run.record_hash is None and not mode.sealed else "sealed"
    sealed = cover == "sealed" and run.status == "halted"
    return ChainReport(
        run.run_id,
        len(links),
        head_hash,
        flag.ordered(),
        mode=mode.mode,
        version=mode.version,
        checked=checked,
        record=cover,
        notes=tuple(notes),
        witness=said,
        unproven=chain_witness.unproven(mode, links, sealed, witness, at_head),
    )


def _without_copies(flag: Findings, links: Sequence[ChainLink]) -> list[ChainLink]:
    """The events but those that carry the hash of an event before them, each flagged
    `inserted` where it is: a hash covers everything before it, so no two events of one
    chain share one, and the first to hold it is the one chained (a copy of the sealed
    head, its halt edited and appended after it, is not taken for the head or its halt)."""
    kept, first = list[ChainLink](), dict[str, int]()
    for x in links:
        if x.hash is not None and x.hash in first:
            flag(
                "inserted",
                x.seq,
                f"this event carries the hash of seq {first[x.hash]}: it is a copy, not in the"
                " chain (inserted)",
            )
            continue
        if x.hash is not None:
            first[x.hash] = x.seq
        kept.append(x)
    return kept


def _check_links(
    flag: Findings, run: RunRow, links: Sequence[ChainLink], key: bytes | None, can_hash: bool
) -> None:
    """Each event's hash and its link to the one before (and the first's to the genesis).
    Without the run's key only the links between stored hashes are checked."""
    start = genesis(run, key) if can_hash else None
    hashes = [x.hash for x in links]
    for i, x in enumerate(links):
        if x.hash is None or x.prev_hash is None:
            flag("unchained", x.seq)
            continue
        if can_hash and link(x.prev_hash, x.columns, key) != x.hash:
            flag("edited", x.seq)
        if i == 0 and not can_hash:
            continue
        before = start if i == 0 else links[i - 1].hash
        if x.prev_hash != before:
            _classify_break(flag, links, i, start, hashes)


_DOWNGRADED = (
    "runs.chain names chain version 1 or 2, but the events are stored as chain version 3"
    " (no previous hash): the run row's chain mode was edited"
)
_FIRST_LINK = (
    "the first event does not chain onto the run's genesis: the run row (run id, machine,"
    " task, budgets, start time, chain mode) or the first event was edited"
)
_BROKEN_LINK = (
    "the event's bytes do not match its hash over the event before it: its bytes were"
    " edited, or the event before it was rewritten with a new hash, or events between them"
    " were deleted and the rest renumbered"
)
#: How far from a broken link (in events) verify looks for the hash it was chained onto.
_SEARCH = 256


def _check_links_v3(
    flag: Findings, run: RunRow, links: Sequence[ChainLink], key: bytes | None, can_hash: bool
) -> None:
    """Chain version 3: no event stores its predecessor's hash, so each link is recomputed
    over the hash before it (the genesis for the first). Where it does not hold, the hash it
    was chained onto is looked for nearby (and the genesis), to tell an inserted, deleted or
    reordered event from an edited one (an event right after a missing sequence number
    cannot be checked: the hash it was made over was deleted with its event). Without the
    run's key nothing here can be checked."""
    if not can_hash:
        return
    start = genesis(run, key)
    hashes = [x.hash for x in links]
    resolved = list(links)
    for i, x in enumerate(links):
        before = start if i == 0 else hashes[i - 1]
        if x.hash is None:
            flag("unchained", x.seq)
        elif not _links_v3(before, x, key):
            onto = _chained_onto(x, i, start, hashes, key)
            if onto is None and i == 0:
                flag("run_edited", 0, _FIRST_LINK)
            elif onto is None and links[i - 1].seq + 1 == x.seq:
                flag("edited", x.seq, _BROKEN_LINK)
            resolved[i] = attrs.evolve(x, prev_hash=onto or before)
            continue
        resolved[i] = attrs.evolve(x, prev_hash=before)
    for i, x in enumerate(resolved):
        if x.hash is not None and x.prev_hash != (start if i == 0 else hashes[i - 1]):
            _classify_break(flag, resolved, i, start, hashes)


def _chained_onto(
    x: ChainLink, i: int, start: str, hashes: list[str | None], key: bytes | None
) -> str | None:
    """The hash (the genesis, or another event's within `_SEARCH`) that event i's hash was
    made over, or None: its own bytes were edited."""
    window = hashes[max(0, i - _SEARCH) : i + _SEARCH]
    for onto in (start, *window):
        if onto != x.hash and _links_v3(onto, x, key):
            return onto
    return None


def _links_v3(prev: str | None, x: ChainLink, key: bytes | None) -> bool:
    """Whether event `x`'s hash is its link onto `prev` (a hash that is not hex, from an
    edited row, links nothing)."""
    try:
        return prev is not None and link_v3(prev, x.columns, key) == x.hash
    except (ValueError, TypeError, AttributeError):
        return False


def _stored_version(links: Sequence[ChainLink]) -> int:
    """The chain version the events are stored in: 3 when they hold hashes but not the
    previous one, else 2 (versions 1 and 2 store both)."""
    stored = [x for x in links if x.hash is not None]
    return 3 if stored and all(x.prev_hash is None for x in stored) else 2


def require_keyed(report: ChainReport) -> ChainReport:
    """`report`, failing when the run is not keyed (`fsm-agent verify --require-keyed`): an
    insider without the key could rewrite a keyed run as an unkeyed one."""
    if report.mode == "keyed":
        return report
    finding = Finding("not_keyed", 0, MEANING["not_keyed"], "runs.chain")
    return attrs.evolve(report, findings=(finding, *report.findings))


def _classify_break(
    flag: Findings,
    links: Sequence[ChainLink],
    i: int,
    start: str | None,
    hashes: list[str | None],
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


def _check_numbering(flag: Findings, links: Sequence[ChainLink]) -> None:
    expected = 0
    for x in links:
        if x.seq > expected:
            flag("deleted", expected, f"sequence number {expected} is missing (deleted)")
        expected = x.seq + 1


def _check_head(flag: Findings, links: Sequence[ChainLink], head_hash: str | None) -> None:
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


def verify_run(
    store: Store,
    run_id: str,
    *,
    key: bytes | None = None,
    record_file: tuple[HaltRecord, str] | None = None,
    witness: Witness | None = None,
) -> ChainReport:
    """Check the chain of one run in a journal (its stored bytes, not decoded), with `key`
    or else the store's own (`chain_key`, from the environment), against `witness` or else
    the environment's (`FSM_AGENT_WITNESS`, when a key is there to check it with). The
    witness is read before the journal: a live run's commit between the two reads leaves
    the journal ahead of its witness, never behind it."""
    key = key if key is not None else getattr(store, "chain_key", None)
    if witness is None:
        witness = env_witness(key, run_id)
    run, links, head = store.chain(run_id)
    return verify_chain(run, links, head, key=key, record_file=record_file, witness=witness)


def env_witness(key: bytes | None, run_id: str | None = None) -> Witness:
    """The witness `FSM_AGENT_WITNESS` names, checked with `key` (only `run_id`'s lines,
    when given); no witness without a key or a variable, or while its file does not exist."""
    path = os.environ.get(WITNESS_ENV)
    if not path or key is None:
        return NO_WITNESS
    return read_log([path], key, run_id=run_id, missing_ok=True)
