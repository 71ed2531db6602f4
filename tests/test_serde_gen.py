"""The generated encoders and decoders (`fsm_agent.journal.serde_gen`) are the converter's, faster:
the compact text is byte for byte the converter's, decoding gives the converter's value,
and nothing the converter refuses gets past the fast path (it hands such data back to the
converter, which raises the error it always raised)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm_agent.halt import HaltReason
from fsm_agent.journal import serde
from fsm_agent.journal.store import Event, Facts, GuardResult
from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.snapshot import Snapshot, ToolOutcome
from tests.test_serde import JOURNAL_TYPES, events, facts, guard_logs, json_values, snapshots

HOT: list[tuple[Any, Any]] = [
    (Snapshot, snapshots),
    (tuple[GuardResult, ...], guard_logs),
    (Facts, facts),
    (Event, events),
]
CHECKS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: What a mutation puts at a path: wrong types, coercible look-alikes, containers.
ODD = st.sampled_from([1, 0, -1, 2**70, 1.5, 0.0, "x", "1", "", None, True, False, [], {}, ["x"]])


def _reference_compact(value: Any) -> str:
    """The compact text as the converter alone makes it (the encoding before generation)."""
    hook = serde._compact.get_unstructure_hook(type(value))
    return serde._encode_compact(hook(value))


def _paths(data: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [here]
    if isinstance(data, dict):
        for k, v in data.items():
            found += _paths(v, (*here, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            found += _paths(v, (*here, i))
    return found


def _mutated(data: Any, path: tuple[Any, ...], value: Any, extra: bool) -> Any:
    if not path:
        return {**data, "extra": value} if extra and isinstance(data, dict) else value
    copy = json.loads(json.dumps(data))
    target = copy
    for key in path[:-1]:
        target = target[key]
    if extra and isinstance(target[path[-1]], dict):
        target[path[-1]]["extra"] = value
    else:
        target[path[-1]] = value
    return copy


@pytest.mark.parametrize(("cls", "strategy"), HOT, ids=["Snapshot", "guards", "Facts", "Event"])
@CHECKS
@given(data=st.data())
def test_compact_text_is_the_converters_byte_for_byte(
    cls: Any, strategy: Any, data: st.DataObject
) -> None:
    value = data.draw(strategy)
    assert serde.dumps_compact(value) == _reference_compact(value)


@pytest.mark.parametrize(
    ("cls", "strategy"), JOURNAL_TYPES, ids=[cls.__name__ for cls, _ in JOURNAL_TYPES]
)
@CHECKS
@given(data=st.data())
def test_fast_structure_takes_both_forms_and_gives_the_converters_value(
    cls: Any, strategy: Any, data: st.DataObject
) -> None:
    value = data.draw(strategy)
    fast = serde._fast.value_structurer(cls)
    for text in (serde.dumps(value), serde.dumps_compact(value)):
        plain = json.loads(text)
        assert fast(plain) == serde.converter.structure(json.loads(text), cls) == value


@pytest.mark.parametrize(("cls", "strategy"), HOT, ids=["Snapshot", "guards", "Facts", "Event"])
@CHECKS
@given(data=st.data())
def test_fast_structure_never_takes_what_the_converter_refuses(
    cls: Any, strategy: Any, data: st.DataObject
) -> None:
    value = data.draw(strategy)
    plain = json.loads(data.draw(st.sampled_from([serde.dumps, serde.dumps_compact]))(value))
    path = data.draw(st.sampled_from(_paths(plain)))
    bad = _mutated(plain, path, data.draw(ODD), data.draw(st.booleans()))
    try:
        expected = serde.converter.structure(json.loads(json.dumps(bad)), cls)
    except Exception:
        expected = None
    try:
        got = serde._fast.value_structurer(cls)(json.loads(json.dumps(bad)))
    except Exception:
        got = None  # handed back to the converter
    if expected is None:
        assert got is None, f"the fast path took {bad!r}, which the converter refuses"
        with pytest.raises(Exception):  # noqa: B017, PT011 - the converter's own error
            serde.structure_fast(json.loads(json.dumps(bad)), cls)
        return
    if got is not None:
        assert got == expected
    assert serde.structure_fast(json.loads(json.dumps(bad)), cls) == expected


@CHECKS
@given(value=json_values | st.integers() | st.text() | st.floats(allow_nan=False))
def test_loads_reads_what_json_reads(value: Any) -> None:
    """Big integers, lone surrogates, non-ASCII and exponent spellings included."""
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        got, want = serde.loads(text), json.loads(text)
        assert got == want
        assert json.dumps(got) == json.dumps(want)  # and the same types (int vs float)


@pytest.mark.parametrize(
    "text",
    [
        '"\\ud800"',
        "123456789012345678901234567890",
        "-9223372036854775809",
        "[NaN]",
        "[1e400]",
        "[1e+16]",
        '"\\u00e9"',
        "18446744073709551616",
    ],
)
def test_loads_edge_cases_read_as_json_reads_them(text: str) -> None:
    got, want = serde.loads(text), json.loads(text)
    assert repr(got) == repr(want)


@pytest.mark.parametrize(
    "observation",
    [
        Receipt(200, "a"),
        {"a": [Receipt(200, "a", checksum="c")]},
        HaltReason.COMPLETED,
        {1, 2},
        b"x",
        (1, 2),
        {1: "x", None: 2},
        2**100,
        "\ud800\x00\x7f\u00e9",
    ],
)
def test_an_odd_observation_encodes_as_the_converter_encodes_it(observation: Any) -> None:
    """The generated encoders pass a field of type `Any` through: what JSON has no form
    for still comes out as the converter made it (or is refused the same way)."""
    outcome = ToolOutcome(name="t", args={}, status="returned", observation=observation)
    results = []
    for encode in (_reference_compact, serde.dumps_compact):
        try:
            results.append(encode(outcome))
        except TypeError as exc:
            results.append(str(exc))
    assert results[0] == results[1]


def test_a_tool_outcome_with_a_big_int_observation_round_trips() -> None:
    outcome = ToolOutcome(name="t", args={}, status="returned", observation={"n": 2**80})
    text = serde.dumps_compact(outcome)
    assert serde.structure_fast(serde.loads(text), ToolOutcome) == outcome
