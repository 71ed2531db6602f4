"""How the hash chain is computed: an event's link, a run's genesis, a halt record's seal.

Each event's hash is a digest of the previous event's hash and the event's canonical bytes
(its stored column texts, in a fixed order, as one JSON array — the same for every store
and for run files). The first event's "previous hash" is the run's genesis: a digest of what
the run row freezes. The halt record is sealed onto the run's head (`record_link`), in the
same write that stores it, so it is covered by the chain too.

A run's chain mode (`runs.chain`) says how its digests are made:

- `None`: chain version 1, written before halt records were sealed (sha256; its record is
  not covered). Its genesis and links are exactly what they always were.
- `"sha256"`: chain version 2, unkeyed. The mode is in the genesis, so setting it back to
  `None` (to pass an unsealed record off as an old one) breaks the first link.
- `"hmac-sha256:<key id>"`: version 2, keyed. Every digest is HMAC-SHA256 under a key the
  journal does not hold (`fsm_agent.journal.chain_key`); the key id (a digest of the key, not the
  key) says which key, so a wrong one is named as such.
- `"sha256/3"` and `"hmac-sha256/3:<key id>"`: version 3, unkeyed and
  keyed. An event's link is taken over the stored column texts themselves, each framed by
  a type tag and its length (`link_v3`), not over a JSON array of them; a store keeps the
  digest as 32 bytes and no copy of the previous one (it is the previous row's). The mode,
  version included, is in the genesis, as in version 2.
- `"sha256/4"` and `"hmac-sha256/4:<key id>"`: version 4 (every new run): linked as in
  version 3; its JSON columns are written by `fsm_agent.journal.content` (what the run's first
  event already says left out, orjson's text). The version names the content rules, so an
  event's stored columns follow from the event, the run's mode and its first event.

Versions 1 and 2 compute an event's link the same way: keyed or not, only the digest
function changes, never the bytes it is taken over. Every hash a reader is shown is hex.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal

import attrs

from fsm_agent.errors import InvalidInputError
from fsm_agent.journal import content, serde
from fsm_agent.journal.store import Event, RunRow
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.runtime.snapshot import Snapshot

CHAIN_FORMAT: Final = "fsm-agent/chain/1"
CHAIN_FORMAT_2: Final = "fsm-agent/chain/2"
CHAIN_FORMAT_3: Final = "fsm-agent/chain/3"
CHAIN_FORMAT_4: Final = "fsm-agent/chain/4"
UNKEYED: Final = "sha256"
KEYED_PREFIX: Final = "hmac-sha256:"
UNKEYED_3: Final = "sha256/3"
KEYED_PREFIX_3: Final = "hmac-sha256/3:"
UNKEYED_4: Final = "sha256/4"
KEYED_PREFIX_4: Final = "hmac-sha256/4:"
#: The chain version new runs are written with (tests set 2 or 3 to write runs as before).
CURRENT_VERSION = 4
_UNKEYED: Final = {UNKEYED: 2, UNKEYED_3: 3, UNKEYED_4: 4}
_KEYED: Final = ((2, KEYED_PREFIX), (3, KEYED_PREFIX_3), (4, KEYED_PREFIX_4))
_FORMATS: Final = {2: CHAIN_FORMAT_2, 3: CHAIN_FORMAT_3, 4: CHAIN_FORMAT_4}
_KEY_ID_CONTEXT: Final = b"fsm-agent/chain-key-id"
_V3_CONTEXT: Final = b"fsm-agent/chain/3\n"

Mode = Literal["unkeyed", "keyed"]


class ChainModeError(InvalidInputError):
    """A run's chain mode is one this fsm-agent does not know (`runs.chain` was edited, or
    a newer fsm-agent wrote it)."""


@attrs.frozen
class ChainMode:
    """How one run's digests are made: its chain version, and the id of its key (None:
    unkeyed)."""

    version: int
    key_id: str | None = None

    @property
    def mode(self) -> Mode:
        return "unkeyed" if self.key_id is None else "keyed"

    @property
    def sealed(self) -> bool:
        """Whether the run's halt record is sealed onto its chain (version 2 on)."""
        return self.version >= 2


def parse_mode(chain: str | None) -> ChainMode:
    """The mode a `runs.chain` value names; raises `ChainModeError` for one it does not."""
    if chain is None:
        return ChainMode(1)
    if chain in _UNKEYED:
        return ChainMode(_UNKEYED[chain])
    for version, prefix in _KEYED:
        if chain.startswith(prefix) and len(chain) == len(prefix) + 16:
            return ChainMode(version, chain[len(prefix) :])
    raise ChainModeError(f"chain mode {chain!r} is not one this fsm-agent knows")


def chain_version(chain: str | None) -> int:
    """The chain version of a run with chain mode `chain` (2 for one this fsm-agent does
    not know: verify reports it, and nothing is written to it past its key check)."""
    try:
        return parse_mode(chain).version
    except ChainModeError:
        return 2


def key_id(key: bytes) -> str:
    """A key's public name: 16 hex digits of an HMAC under it (it does not reveal the key)."""
    return hmac.new(key, _KEY_ID_CONTEXT, hashlib.sha256).hexdigest()[:16]


def mode_for(key: bytes | None, version: int | None = None) -> str:
    """The `runs.chain` value of a run written with `key` (None: unkeyed) in chain
    `version` (2, 3 or 4; None: `CURRENT_VERSION`, what new runs are written with)."""
    version = version or CURRENT_VERSION
    if key is None:
        return next(mode for mode, v in _UNKEYED.items() if v == version)
    return f"{dict(_KEYED)[version]}{key_id(key)}"


def run_key(chain: str | None, key: bytes | None) -> bytes | None:
    """The key a run's digests are made with: None for an unkeyed run; `key` for a keyed
    one, which must be the run's own. Raises `ChainModeError` otherwise."""
    mode = parse_mode(chain)
    if mode.key_id is None:
        return None
    if key is None:
        raise ChainModeError(
            f"the run's hash chain is keyed (key id {mode.key_id}) and no key was given: set"
            " FSM_AGENT_CHAIN_KEY or FSM_AGENT_CHAIN_KEY_FILE"
        )
    if key_id(key) != mode.key_id:
        raise ChainModeError(
            f"the run's hash chain is keyed with key id {mode.key_id}; the key given has id"
            f" {key_id(key)} (a different key)"
        )
    return key


def _digest(data: str, key: bytes | None) -> str:
    raw = data.encode("ascii")
    if key is None:
        return hashlib.sha256(raw).hexdigest()
    return hmac.new(key, raw, hashlib.sha256).hexdigest()


def event_columns(e: Event, version: int = 3, base: Snapshot | None = None) -> tuple[Any, ...]:
    """The stored columns of an event of a run in chain `version`, in schema order (run_id
    and seq first); a store keeps these exact values (and hashes them with `link_for`).
    From version 4 the JSON columns are written against the run's `base` (its seq-0
    event's snapshot: `base_of`; None for that event itself)."""
    if version >= 4:
        return content.columns(e, None if e.seq == 0 else base)
    return content.row_columns(
        e,
        serde.dumps_compact(e.guards),
        serde.dumps_compact(e.check),
        serde.dumps_compact(e.snapshot),
        None if e.facts is None else serde.dumps_compact(e.facts),
    )


def base_of(events: Sequence[Event], version: int) -> Snapshot | None:
    """What a run's events are written against in chain `version` (see `event_columns`),
    from its events in order: its seq-0 event's snapshot from version 4, else None."""
    if version < 4 or not events or events[0].seq != 0:
        return None
    return events[0].snapshot


def genesis(run: RunRow, key: bytes | None = None) -> str:
    """The 'previous hash' of a run's first event: a digest of what the run row freezes
    (and, from chain version 2, of the run's chain mode)."""
    frozen = [
        run.run_id,
        run.machine,
        run.machine_sha256,
        run.task,
        serde.unstructure(run.budgets),
        run.started_at,
    ]
    if run.chain is None:  # version 1, exactly as it was
        header = [CHAIN_FORMAT, *frozen]
        return _digest(json.dumps(header, sort_keys=True, separators=(",", ":")), None)
    header = [_FORMATS[chain_version(run.chain)], run.chain, *frozen]
    return _digest(json.dumps(header, sort_keys=True, separators=(",", ":")), key)


def link(prev: str, columns: Sequence[Any], key: bytes | None = None) -> str:
    """The hash of one event: its predecessor's hash and its stored columns after the
    (run_id, seq) key. ASCII JSON, so any text (lone surrogates included) hashes."""
    body = json.dumps(list(columns[2:]), separators=(",", ":"), allow_nan=False)
    return _digest(f"{prev}\n{body}", key)


def link_v3(prev: str, columns: Sequence[Any], key: bytes | None = None) -> str:
    """The hash of one event in chain version 3: a digest of the predecessor's 32 bytes and
    the event's stored columns after (run_id, seq), each framed so that no two column lists
    share bytes: `n` for NULL, `i<decimal>;` for an integer, `s<byte length>:<UTF-8>` for
    text (lone surrogates kept as they are: any text hashes)."""
    parts = [_V3_CONTEXT, bytes.fromhex(prev)]
    for value in columns[2:]:
        if value is None:
            parts.append(b"n")
        elif type(value) is int:
            parts.append(b"i%d;" % value)
        else:
            raw = value.encode("utf-8", "surrogatepass")
            parts.append(b"s%d:" % len(raw))
            parts.append(raw)
    data = b"".join(parts)
    if key is None:
        return hashlib.sha256(data).hexdigest()
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def link_for(version: int) -> Callable[[str, Sequence[Any], bytes | None], str]:
    """The event link function of chain `version`."""
    return link_v3 if version >= 3 else link


#: Fields of the handoff packet added after records were sealed: left out of the sealed form
#: while they hold their default (None), so a record sealed before they existed still
#: verifies, and one that says what its run waits for is sealed with it.
LATER_PACKET_FIELDS = ("call_sha256", "awaits", "wait_until")


def record_link(head: str, record: HaltRecord, key: bytes | None = None) -> str:
    """The seal of a halt record onto the run's head: a digest of the head and the record's
    canonical JSON (every field: reason, state, answer, packet, meters …; those added later
    only when set). Its body starts with `record`, so no event's link can be passed off as
    a record's."""
    return _digest(f"{head}\nrecord\n{_sealed_text(record)}", key)


def _sealed_text(record: HaltRecord) -> str:
    data = serde.unstructure(record)
    packet = data.get("handoff")
    if isinstance(packet, dict):
        for name in LATER_PACKET_FIELDS:
            if packet.get(name) is None:
                packet.pop(name, None)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False, default=repr)


@attrs.frozen
class ChainLink:
    """One stored event as the chain sees it: its key, its columns, and its two hashes."""

    seq: int
    columns: tuple[Any, ...]
    prev_hash: str | None
    hash: str | None
