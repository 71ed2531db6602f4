"""Halts a person's decision continued: the one way a run's chain goes on past a halt.

A run that waited in `handoff` (`fsm_agent.runtime.decisions`) has a halt in the middle of its
chain, followed by a `decided` event that carries the waiting record and that record's seal
onto the halt's hash. Verify holds every halt but the last to it: the halt is one a decision
may continue (`approval_required`, `handoff_requested`), the next event is a `decided` one,
and the record it carries is sealed onto the halt (checked where the hashes can be). Anything
else past a halt is a run reopened by hand, and the witness's sighting of a halt is answered
by the decision that carried its seal.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

import attrs

from fsm_agent.halt import AWAITS
from fsm_agent.journal import serde
from fsm_agent.journal.chain_hash import (
    ChainLink,
    base_of,
    chain_version,
    event_columns,
    genesis,
    link_for,
    record_link,
)
from fsm_agent.journal.findings import Findings
from fsm_agent.journal.store import Event, RunRow
from fsm_agent.runtime.record import HaltRecord

_KIND, _HALT, _FACTS = 2, 8, 13
_CONTINUABLE = frozenset(r.value for r in AWAITS)


def carried(link: ChainLink) -> tuple[str | None, Any]:
    """The seal and the record (as stored) a `decided` event carries; (None, None) for any
    other event, or one whose facts do not read."""
    if link.columns[_KIND] != "decided":
        return None, None
    try:
        facts = json.loads(link.columns[_FACTS])
    except (TypeError, ValueError):
        return None, None
    if isinstance(facts, list) and len(facts) == 2:  # a chain-version-4 text
        facts = facts[1]
    reply = facts.get("reply") if isinstance(facts, dict) else None
    if not isinstance(reply, dict) or not isinstance(reply.get("record_seal"), str):
        return None, None
    return reply["record_seal"], reply.get("record")


def check_waits(
    links: Sequence[ChainLink], key: bytes | None, can_hash: bool, flag: Findings
) -> None:
    """Every halt before the last event is a wait a person's decision continued."""
    for before, after in itertools.pairwise(links):
        halt = before.columns[_HALT]
        if halt is None:
            continue
        seal, record = carried(after)
        if halt not in _CONTINUABLE or seal is None:
            flag(
                "reopened",
                after.seq,
                f"the run halted at seq {before.seq} ({halt}) and its chain goes on without a"
                " person's decision on a wait: it was reopened past its halt",
            )
        elif can_hash and before.hash is not None and _seal_of(before.hash, record, key) != seal:
            flag(
                "record_edited",
                after.seq,
                f"the waiting record this decision carries is not the one sealed onto the halt"
                f" at seq {before.seq}",
            )


def decided_seal(links: Sequence[ChainLink], seq: int) -> str | None:
    """The seal the event after `seq` carries, if it is a person's decision on a wait."""
    for i, link in enumerate(links[:-1]):
        if link.seq == seq:
            return carried(links[i + 1])[0]
    return None


def _seal_of(head: str, record: Any, key: bytes | None) -> str | None:
    try:
        return record_link(head, serde.structure(record, HaltRecord), key)
    except (TypeError, ValueError, KeyError, AttributeError):
        return None


def resealed(run: RunRow, events: Sequence[Event], key: bytes | None) -> list[Event]:
    """`events`, about to be chained as the run `run` (a fork's copy of its parent's past),
    with each decision's carried seal made again onto the halt it follows in this chain:
    the record it carries is the same, the hash of the halt it was sealed onto is not."""
    version = chain_version(run.chain)
    base = base_of(events, version)
    link = link_for(version)
    prev, out = genesis(run, key), list[Event]()
    for event in events:
        facts = event.facts
        before = out[-1] if out else None
        if (
            event.kind == "decided"
            and before is not None
            and before.halt is not None
            and facts is not None
            and isinstance(facts.reply, dict)
            and isinstance(facts.reply.get("record"), dict)
        ):
            seal = _seal_of(prev, facts.reply["record"], key)
            reply = {**facts.reply, "record_seal": seal}
            event = attrs.evolve(event, facts=attrs.evolve(facts, reply=reply))
        prev = link(prev, event_columns(event, version, base), key)
        out.append(event)
    return out
