"""The journal's JSON columns of a chain-version-4 run: what is written, and how it reads.

Chain version 4 (`runs.chain` = `sha256/4` or `hmac-sha256/4:<key id>`) links events as
version 3 does (`chain_hash.link_v3`, over the stored column texts); what changes is the
text of the JSON columns, which leaves out what the row or the run already says:

- `snapshot` is `[4,{...}]` (the 4 marks the rules, so a reader tells the row from an older
  one by its text alone): the snapshot's compact form, less every top-level field equal to
  the one it is written against: the run's first (seq 0) event's snapshot, the run's base
  (its `BASE_FIELDS`), with `state` = the row's source, `outcome` = its trigger,
  `clock_ms` = its at_ms and no `next_action` (`row_base`); a field that differs is written
  in full, in declared order (at its default where the base's is not: the default's compact
  form). The base event itself is complete (its compact form). Reading takes what was left
  out from the decoded first snapshot and the row: the value is `{**against, **written}`.
- `facts`: the compact form, its `tool` written `true` when it is the snapshot's own tool.
- `guards` and `checks`: `[[transition, guard, result], ...]`.

The text is orjson's, where it is correct: a value orjson does not take (a non-string key,
an integer beyond 64 bits, a lone surrogate, a type JSON has no form for) is written the way
the journal always wrote it (and marked by a trailing space where orjson cannot read it
back), and NaN and the infinities are refused as they always were. The text is a function
of the value only: decoding it and writing the value again gives it back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

import attrs
import orjson

from fsm_agent.halt import HaltReason
from fsm_agent.journal import serde
from fsm_agent.journal.store import Event, Facts, GuardResult
from fsm_agent.runtime.budgets import Meters
from fsm_agent.runtime.proposals import Proposal
from fsm_agent.runtime.snapshot import Snapshot, ToolOutcome

#: The first element of a version-4 snapshot text.
MARK: Final = 4
PREFIX: Final = "[4,"
T = TypeVar("T")

_OPTIONS: Final = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def _on_first_use(name: str, make: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
    """A stand-in for the generated function `name` of this module: it generates it at its
    first call and puts it in its place, so importing fsm-agent (`--help`, `runs`) does not
    pay for code generation, and every later call goes to the generated function directly."""

    def first(*args: Any) -> Any:
        made = globals()[name] = make()
        return made(*args)

    return first


_snapshot_form = _on_first_use("_snapshot_form", lambda: serde.compact_hook(Snapshot))
_facts_form = _on_first_use("_facts_form", lambda: serde.compact_hook(Facts))
#: The snapshot fields written against the base: all but those holding free-form values
#: (arguments, observations), which JSON-equal values of other types (1 and 1.0, 1 and
#: true) could pass for one another, and the meters (always written: a run's live steps
#: are read from its newest row by SQL).
BASE_FIELDS: Final = frozenset(attrs.fields_dict(Snapshot)) - {
    "proposal", "tool", "unreceipted", "receipted", "meters", "effects"
}  # fmt: skip
#: What a later snapshot's fields are written against (`row_base`), over the run's base
#: snapshot `b` and the row's own columns.
_AGAINST: Final = {
    **{name: f"b.{name}" for name in BASE_FIELDS},
    "state": "source",
    "outcome": "trigger",
    "next_action": "None",
    "clock_ms": "at_ms",
}
_snapshot_delta = _on_first_use(
    "_snapshot_delta", lambda: serde.compact_delta(Snapshot, _AGAINST, "b, source, trigger, at_ms")
)


def dumps(data: Any) -> str:
    """The canonical text of plain data (the compact form of a journal value)."""
    try:
        raw = orjson.dumps(data, default=serde.json_default, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return _fallback(data)
    if b"null" in raw:  # orjson writes NaN and the infinities as null: refuse them as ever
        serde.encode_compact(data)
    return raw.decode("utf-8")


def _fallback(data: Any) -> str:
    """What orjson does not take: the stdlib's text (which refuses what the journal always
    refused), then orjson's text of what that text reads as where orjson takes it (so a
    decoded value writes the same text again), else the stdlib's text and a space (which
    orjson never writes: `loads` reads such a text with the stdlib)."""
    text = serde.encode_compact(data)
    try:
        return orjson.dumps(json.loads(text)).decode("utf-8")
    except orjson.JSONEncodeError:  # an integer beyond 64 bits, a lone surrogate
        return text + " "


def loads(text: str) -> Any:
    """The value of a text `dumps` wrote: orjson's own text by orjson (which reads back
    the value it wrote), one ending in a space by the stdlib (orjson would read an integer
    beyond 64 bits as a float)."""
    if text[-1:] == " ":
        return json.loads(text)
    return orjson.loads(text)


# --- write --------------------------------------------------------------------------------


def row_base(base: Mapping[str, Any], source: Any, trigger: Any, at_ms: Any) -> dict[str, Any]:
    """What one later event's snapshot is written against, as a reader restores it: the
    run's base (its first snapshot's `BASE_FIELDS`), and what the row says itself (the
    state it left, the outcome that triggered it, its clock) or usually holds (no next
    action)."""
    return {**base, "state": source, "outcome": trigger, "next_action": None, "clock_ms": at_ms}


def snapshot_data(e: Event, base: Snapshot | None) -> dict[str, Any]:
    """The written form of `e`'s snapshot against its run's `base` snapshot (None: `e` is
    the base event): each field that differs from what `row_base` restores, in declared
    order (a field at its default where the base's is not: the default's compact form)."""
    if base is None:
        return _snapshot_form(e.snapshot)  # type: ignore[no-any-return]
    return _snapshot_delta(e.snapshot, base, e.source, e.trigger, e.at_ms)  # type: ignore[no-any-return]


def guards_data(guards: tuple[GuardResult, ...]) -> list[list[Any]]:
    return [[g.transition, g.guard, g.result] for g in guards]


def facts_data(facts: Facts, snapshot: Snapshot) -> dict[str, Any]:
    form: dict[str, Any] = _facts_form(facts)
    tool = facts.tool
    if tool is not None and (tool is snapshot.tool or tool == snapshot.tool):
        form["tool"] = True
    return form


def columns(e: Event, base: Snapshot | None) -> tuple[Any, ...]:
    """The stored columns of event `e` of a version-4 run whose first event's snapshot is
    `base` (None for that event itself)."""
    guards, check = dumps(guards_data(e.guards)), dumps(guards_data(e.check))
    snapshot = dumps([MARK, snapshot_data(e, base)])
    facts = None if e.facts is None else dumps(facts_data(e.facts, e.snapshot))
    return row_columns(e, guards, check, snapshot, facts)


def row_columns(
    e: Event, guards: str, check: str, snapshot: str, facts: str | None
) -> tuple[Any, ...]:
    """An event's stored columns in schema order (run_id and seq first), given the texts of
    its JSON columns as its chain version writes them."""
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
        guards,
        check,
        snapshot,
        facts,
        e.note,
        e.control,
    )


# --- read ---------------------------------------------------------------------------------


class Corrupt(ValueError):
    """A version-4 column that does not read; the message names the column."""


def is_v4(snapshot_text: Any) -> bool:
    """Whether a stored snapshot text is written by these rules."""
    return snapshot_text.__class__ is str and snapshot_text.startswith(PREFIX)


_bases: dict[str, dict[str, Any]] = {}


def written(text: str) -> dict[str, Any]:
    """The written snapshot data of a version-4 snapshot text (read-only: it may be shared)."""
    try:
        data = loads(text)
    except Exception as exc:
        raise Corrupt(f"snapshot: {exc}") from exc
    if data.__class__ is not list or len(data) != 2 or data[0] != MARK:
        raise Corrupt(f"snapshot: not [{MARK}, {{...}}]")
    if data[1].__class__ is not dict:
        raise Corrupt("snapshot: its data is not an object")
    return data[1]


def base_of(text: str) -> dict[str, Any]:
    """The base form a run's seq-0 snapshot text gives (cached by text)."""
    found = _bases.get(text)
    if found is None:
        found = {k: v for k, v in written(text).items() if k in BASE_FIELDS}
        if len(_bases) >= 256:
            _bases.clear()
        _bases[text] = found
    return found


_guard_texts: dict[str, tuple[GuardResult, ...]] = {}
#: How many decoded texts a cache of them keeps (`remember`).
TEXT_CACHE_LIMIT: Final = 4096


def remember(cache: dict[str, T], text: str, value: T) -> T:
    """Keep the immutable `value` decoded from `text` in `cache` (emptied when it holds
    `TEXT_CACHE_LIMIT` texts: bounded memory for any journal); return it."""
    if len(cache) >= TEXT_CACHE_LIMIT:
        cache.clear()
    cache[text] = value
    return value


def _guard(item: Any) -> GuardResult:
    if item.__class__ is not list or len(item) != 3:
        raise ValueError(f"{item!r} is not [transition, guard, result]")
    t, g, r = item
    if t.__class__ is not int or g.__class__ is not str or r.__class__ is not bool:
        raise ValueError(f"{item!r} is not [integer, string, true or false]")
    return GuardResult(t, g, r)


def guards(text: str, column: str) -> tuple[GuardResult, ...]:
    found = _guard_texts.get(text)
    if found is None:
        try:
            data = loads(text)
            if data.__class__ is not list:
                raise ValueError("not an array")
            found = tuple([_guard(g) for g in data])
        except Exception as exc:
            raise Corrupt(f"{column}: {exc}") from exc
        remember(_guard_texts, text, found)
    return found


def _column(column: str, build: Any, data: Any, cls: Any) -> Any:
    try:
        return build(data, cls)
    except Exception as exc:
        raise Corrupt(f"{column}: {serde.error_path(exc)}") from exc


#: A later snapshot from its written data, the run's base snapshot and the row's columns.
_ROW: Final = {"state": "source", "outcome": "trigger", "next_action": "None", "clock_ms": "at_ms"}
_snapshot_read = _on_first_use("_snapshot_read", lambda: serde.structure_delta(
    Snapshot, {name: f"b.{name}" for name in BASE_FIELDS}, _ROW, "b, source, trigger, at_ms"
))  # fmt: skip
_facts_read = _on_first_use(
    "_facts_read", lambda: serde.structure_delta(Facts, {"tool": "tool"}, {}, "tool")
)
#: The same, with the fields that repeat from event to event (`MEMO_FIELDS`) given built.
_snapshot_memo_read = _on_first_use("_snapshot_memo_read", lambda: serde.structure_delta(
    Snapshot,
    {**{name: f"b.{name}" for name in BASE_FIELDS}, "meters": "meters", "tool": "tool",
     "proposal": "proposal"},
    _ROW,
    "b, source, trigger, at_ms, meters, tool, proposal",
))  # fmt: skip
#: Snapshot fields given built to `_snapshot_memo_read`, with their structurers.
_MEMO_READ: Final = {
    "meters": serde.fast_structurer(Meters),
    "tool": serde.fast_structurer(ToolOutcome | None),
    "proposal": serde.fast_structurer(Proposal | None),
}
_MEMO_DEFAULT: Final[dict[str, Callable[[], Any]]] = {
    "meters": Meters, "tool": lambda: None, "proposal": lambda: None
}  # fmt: skip
#: What one read of a run's events keeps of its previous row: the snapshot text, and what
#: that text gave (the other written fields, and the built `_MEMO_READ` values). A row
#: with the very same text (a run often writes its snapshot again unchanged: only the row's
#: own columns moved) is built from them without reading the text again. The values are
#: shared among the events of that read only, as the run itself shared them.
Memo = dict[str, Any]
_base_snapshots: dict[str, Snapshot] = {}


def _base_snapshot(text: str) -> Snapshot:
    """The run's first snapshot, from its text (cached by text)."""
    found = _base_snapshots.get(text)
    if found is None:
        found = _column(
            "snapshot of the run's first event", serde.structure_fast, written(text), Snapshot
        )
        if len(_base_snapshots) >= 256:
            _base_snapshots.clear()
        _base_snapshots[text] = found
    return found


def _memo_value(name: str, value: Any, before: Any, built: Any) -> Any:
    """Field `name` of a written snapshot from its written `value` (`_MISSING`: left out);
    the previous row's `built` value when that row wrote the very same value (`before`:
    equal, and of the same JSON types, which orjson's text tells apart: 1, 1.0 and true).
    Raises `serde_gen.Refused` for one the fast path does not take."""
    if value is _MISSING:
        return _MEMO_DEFAULT[name]()
    if value == before and value.__class__ is dict and _same_text(value, before):
        return built
    return _MEMO_READ[name](value)


def _same_text(a: Any, b: Any) -> bool:
    try:
        return orjson.dumps(a) == orjson.dumps(b)
    except orjson.JSONEncodeError:  # a value orjson does not write: not compared
        return False


_MISSING: Final = object()


def _snapshot_memo(
    r: Mapping[str, Any], data: dict[str, Any] | None, first_text: str, memo: Memo
) -> Any:
    first = _base_snapshot(first_text)
    if data is not None:  # else the memo holds this row's text (`event` saw it)
        key = (first_text, r["snapshot"])
        same = memo.get("first") == first_text
        raw, built = (memo["raw"], memo["values"]) if same else ((_MISSING,) * 3, (None,) * 3)
        memo.clear()  # a row that does not read leaves nothing behind
        rest = {k: v for k, v in data.items() if k not in _MEMO_READ}
        now = [data.get(name, _MISSING) for name in _MEMO_READ]
        values = [
            _memo_value(name, v, b, o)
            for name, v, b, o in zip(_MEMO_READ, now, raw, built, strict=True)
        ]
        memo.update(key=key, first=first_text, rest=rest, raw=now, values=values)
    return _snapshot_memo_read(
        memo["rest"], first, r["source"], r["trigger"], r["at_ms"], *memo["values"]
    )


def _snapshot(
    r: Mapping[str, Any], data: dict[str, Any] | None, base: Mapping[str, Any], memo: Memo | None
) -> Snapshot:
    """A later event's snapshot: its written `data` (None: the `memo`'s) and what
    `row_base` restores."""
    first = base["snapshot"]
    try:
        if memo is not None:
            return _snapshot_memo(r, data, first, memo)  # type: ignore[no-any-return]
        assert data is not None  # noqa: S101 - no memo: `event` read the text
        return _snapshot_read(data, _base_snapshot(first), r["source"], r["trigger"], r["at_ms"])  # type: ignore[no-any-return]
    except Corrupt:
        raise
    except Exception:  # not taken as it is: the converter builds it or says what is wrong
        data = written(r["snapshot"])
        merged = {**row_base(base_of(first), r["source"], r["trigger"], r["at_ms"]), **data}
        return _column("snapshot", serde.structure_fast, merged, Snapshot)  # type: ignore[no-any-return]


def event(r: Mapping[str, Any], base: Mapping[str, Any] | None, memo: Memo | None = None) -> Event:
    """One version-4 `events` row as an `Event`; `base`: the run's seq-0 row (None when
    this row is that one); `memo`: the values already built by this read of the run's
    events (`Memo`). Raises `Corrupt` (naming the column) for one that does not read."""
    seq = r["seq"]
    text = r["snapshot"]
    hit = memo is not None and base is not None and memo.get("key") == (base["snapshot"], text)
    data = None if hit else written(text)
    if seq == 0:
        snapshot = _column("snapshot", serde.structure_fast, data, Snapshot)
    elif base is None:
        raise Corrupt("snapshot: the run's first event is needed to read it")
    else:
        snapshot = _snapshot(r, data, base, memo)
    facts = r["facts"]
    if facts is not None:
        facts = _facts(facts, snapshot)
    halt = r["halt"]
    return Event(
        run_id=r["run_id"],
        seq=seq,
        kind=r["kind"],
        at_ms=r["at_ms"],
        wall_time=r["wall_time"],
        source=r["source"],
        dest=r["dest"],
        trigger=r["trigger"],
        snapshot=snapshot,
        guards=guards(r["guards"], "guards"),
        check=guards(r["checks"], "checks"),
        facts=facts,
        halt=None if halt is None else HaltReason(halt),
        retry=bool(r["retry"]),
        note=r["note"],
        control=r["control"],
    )


#: Facts columns already decoded whose value holds nothing mutable and no tool outcome (an
#: action with no reply: one serves every event with the same text).
_facts_texts: dict[str, Facts] = {}


def _facts(text: str, snapshot: Snapshot) -> Facts:
    found = _facts_texts.get(text)
    if found is None:
        found = _facts_read_text(text, snapshot)
        if found.tool is None and found.reply is None and found.repaired is None:
            remember(_facts_texts, text, found)
    return found


def _facts_read_text(text: str, snapshot: Snapshot) -> Facts:
    try:
        data = loads(text)
    except Exception as exc:
        raise Corrupt(f"facts: {exc}") from exc
    if data.__class__ is not dict or data.get("tool") is not True:
        return _column("facts", serde.structure_fast, data, Facts)  # type: ignore[no-any-return]
    if snapshot.tool is None:
        raise Corrupt("facts: tool is the snapshot's tool, and the snapshot has none")
    rest = {k: v for k, v in data.items() if k != "tool"}
    try:
        return _facts_read(rest, snapshot.tool)  # type: ignore[no-any-return]
    except Exception:  # the converter says what is wrong
        facts = _column("facts", serde.structure_fast, rest, Facts)
        return attrs.evolve(facts, tool=snapshot.tool)  # type: ignore[no-any-return]
