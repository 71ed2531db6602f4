"""A run against what its witness saw (`fsm_agent.journal.witness`), and what verify can and
cannot prove of a run without one.

Every line the witness holds for a run, signed with the key, must still be true of the
journal: the event at its seq is there with its hash (else the run was cut back:
`truncated`, or rewritten: `rewritten`), and a line that saw the run halt must find it
halted with the same seal (else it was reopened: `reopened`). A line that claims the key's
id but whose MAC does not match is `witness_forged`. A run the witness saw that the
journal does not hold was deleted (`run_deleted`, see `deleted_run`).

What cannot be proven: a keyed run whose halt record is not sealed (running, paused,
interrupted, or made to look so) may have had its tail cut off, unless a witness saw its
head as it is now. `unproven` says so, and such a run is never ok.
"""

from __future__ import annotations

from collections.abc import Sequence

from fsm_agent.journal import chain_waits
from fsm_agent.journal.chain_hash import ChainLink, ChainMode
from fsm_agent.journal.findings import Finding, Findings
from fsm_agent.journal.store import RunRow
from fsm_agent.journal.witness import Sighting, Witness

FIELD = "witness"


def check_witness(
    run: RunRow, links: Sequence[ChainLink], witness: Witness, flag: Findings
) -> tuple[str | None, bool]:
    """Flag what the journal no longer holds of what `witness` saw of `run`; return what
    the witness says of the run (None: no witness given) and whether it saw the run's head
    as the journal has it now (the events after it, if any, were never witnessed)."""
    if not witness.given:
        return None, False
    for s in witness.forged.get(run.run_id, ()):
        flag(
            "witness_forged",
            s.seq,
            f"{s.where} claims key id {s.key_id} but its signature does not match: the line"
            " was forged or edited (it is not used)",
            FIELD,
        )
    seen = sorted(witness.seen.get(run.run_id, ()), key=lambda s: (s.seq, s.seal is not None))
    if not seen:
        other = witness.foreign.get(run.run_id)
        why = f" ({other} lines signed with another key)" if other else ""
        return f"not in the witness{why}", False
    hashes = {x.seq: x.hash for x in links}
    last = links[-1].seq if links else -1
    for s in seen:
        _check_sighting(run, s, hashes, last, flag, links)
    top = seen[-1]
    halted = any(s.seal is not None for s in seen)
    said = f"witnessed to seq {top.seq}{', halted' if halted else ''} ({top.where})"
    at_head = top.seq == last and hashes.get(last) == top.head
    return said, at_head


def _check_sighting(
    run: RunRow,
    s: Sighting,
    hashes: dict[int, str | None],
    last: int,
    flag: Findings,
    links: Sequence[ChainLink],
) -> None:
    got = hashes.get(s.seq)
    if s.seq > last:
        flag(
            "truncated",
            last + 1,
            f"the witness saw seq {s.seq} (head {s.head[:12]}…, {s.where}, {s.at}); the"
            f" journal's events of this run end at seq {last}: its tail was cut off",
            FIELD,
        )
    elif got is not None and got != s.head:
        flag(
            "rewritten",
            s.seq,
            f"the witness saw seq {s.seq} with head {s.head[:12]}… ({s.where}); the journal's"
            f" event there hashes to {got[:12]}…: the run was rewritten from here or before",
            FIELD,
        )
    if s.seal is None or chain_waits.decided_seal(links, s.seq) == s.seal:
        return  # a halt a person's decision continued carries the seal the witness saw
    if run.status != "halted":
        flag(
            "reopened",
            s.seq,
            f"the witness saw the run halt at seq {s.seq}, its record sealed ({s.where},"
            f" {s.at}); the journal shows it {run.status}"
            + ("" if run.record is None else " (and holds a record)"),
            FIELD,
        )
    elif run.record_hash is not None and run.record_hash != s.seal:  # (a removed seal or
        flag(  # record is a finding of its own: unchained, record_missing)
            "rewritten",
            s.seq,
            f"the witness saw the run halt with seal {s.seal[:12]}… ({s.where}); the"
            f" journal's record is sealed {run.record_hash[:12]}…: it was resealed",
            FIELD,
        )


def unproven(
    mode: ChainMode, links: Sequence[ChainLink], sealed: bool, witness: Witness, at_head: bool
) -> str | None:
    """What verify cannot prove of a keyed run whose record is not sealed: that nothing
    was cut off its tail (None: it can, or the run is not keyed or is sealed)."""
    if mode.key_id is None or sealed or at_head:
        return None
    last = links[-1].seq if links else 0
    if not witness.given:
        return (
            f"keyed, not sealed: truncation after seq {last} cannot be ruled out without a witness"
        )
    return (
        f"keyed, not sealed, and the witness did not see its head at seq {last}: truncation"
        f" after seq {last} cannot be ruled out (a live run's newest commit, or a writer"
        " without the witness)"
    )


def deleted_run(run_id: str, witness: Witness) -> Finding | None:
    """The finding for a run the witness saw that the journal does not hold (None: the
    witness has no signed line for it)."""
    seen = witness.seen.get(run_id)
    if not seen:
        return None
    top = max(seen, key=lambda s: (s.seq, s.seal is not None))
    halted = any(s.seal is not None for s in seen)
    return Finding(
        "run_deleted",
        top.seq,
        f"the witness saw this run reach seq {top.seq}{' and halt' if halted else ''}"
        f" ({top.where}, {top.at}); the journal does not hold it: it was deleted",
        FIELD,
    )
