"""The reply parser: one model reply becomes exactly one proposal or a rejection, and never
raises. A `done: true` flag is data, never a vote; prose is `schema_fail`; nothing is
`empty_response`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsm_agent.runtime.proposals import (
    MAX_REPLY_CHARS,
    FinalAnswer,
    HandoffRequest,
    Rejection,
    ToolCall,
    parse_reply,
)

PROPOSAL_TYPES = (ToolCall, FinalAnswer, HandoffRequest, Rejection)


def parse(raw: Any, *, step: int = 1, max_steps: int = 8) -> Any:
    return parse_reply(raw, step=step, max_steps=max_steps)


def assert_schema_fail(result: Any, fragment: str = "") -> None:
    assert isinstance(result, Rejection), result
    assert result.kind == "schema_fail"
    assert fragment in result.detail


# --- the seed shapes --------------------------------------------------------------------------

SEED_TOOL_CALL = {"tool_call": {"name": "lookup", "args": {"q": "again"}}}
SEED_ANSWER = {"answer": "the lab password is hunter2"}
SEED_HANDOFF = {"handoff": {"why": "I would need to click Pay"}}


@pytest.mark.parametrize("form", ["dict", "text", "bytes", "padded-text"])
@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (SEED_TOOL_CALL, ToolCall(name="lookup", args={"q": "again"})),
        (SEED_ANSWER, FinalAnswer(text="the lab password is hunter2")),
        (SEED_HANDOFF, HandoffRequest(why="I would need to click Pay")),
    ],
    ids=["tool_call", "answer", "handoff"],
)
def test_seed_shapes(reply: dict[str, Any], expected: Any, form: str) -> None:
    raw: Any = {
        "dict": reply,
        "text": json.dumps(reply),
        "bytes": json.dumps(reply).encode("utf-8"),
        "padded-text": "\n  " + json.dumps(reply, indent=2) + "\n\t",
    }[form]
    assert parse(raw) == expected


def test_handoff_may_carry_args_for_review() -> None:
    reply = {"handoff": {"why": "needs approval", "args": {"amount_cents": 1299}}}
    assert parse(json.dumps(reply)) == HandoffRequest(
        why="needs approval", args={"amount_cents": 1299}
    )
    assert parse({"handoff": {"why": "x"}}) == HandoffRequest(why="x", args=None)


def test_tool_call_without_args_gets_empty_args() -> None:
    assert parse({"tool_call": {"name": "lookup"}}) == ToolCall(name="lookup", args={})


# --- prose and emptiness ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "I have finished the task. The answer is 42.",
        "Done!",
        'Sure! Here is the JSON: {"answer": "42"}',
        "[1, 2, 3]",
        "[]",
        "null",
        "true",
        "42",
        '"a JSON string"',
    ],
)
def test_prose_and_non_object_text_is_schema_fail(raw: str) -> None:
    assert_schema_fail(parse(raw))


@pytest.mark.parametrize("raw", [None, "", "   ", "\n\t \n", b"", b"  \n", {}, "{}", " {} "])
def test_nothing_is_empty_response(raw: Any) -> None:
    assert parse(raw) == Rejection(kind="empty_response", detail="the model returned nothing")


@pytest.mark.parametrize("raw", [42, 1.5, True, ["answer", "x"], ("a",), object()])
def test_non_object_python_values_are_schema_fail(raw: Any) -> None:
    assert_schema_fail(parse(raw), "expected a JSON object")


# --- done is data, not a vote -----------------------------------------------------------------


@pytest.mark.parametrize("raw", [{"done": True}, '{"done": true}', {"done": False}])
def test_done_flag_alone_is_schema_fail(raw: Any) -> None:
    assert_schema_fail(parse(raw), "no proposal")


def test_done_flag_beside_a_tool_call_is_ignored_not_obeyed() -> None:
    result = parse('{"done": true, "tool_call": {"name": "lookup", "args": {"q": "x"}}}')
    assert result == ToolCall(name="lookup", args={"q": "x"}, ignored=("done",))


def test_done_flag_beside_an_answer_is_recorded_as_ignored() -> None:
    assert parse({"done": True, "answer": "42"}) == FinalAnswer(text="42", ignored=("done",))


def test_done_flag_beside_a_handoff_is_recorded_as_ignored() -> None:
    result = parse({"handoff": {"why": "unsafe"}, "done": True})
    assert result == HandoffRequest(why="unsafe", ignored=("done",))


# --- malformed JSON ---------------------------------------------------------------------------


def test_truncated_json_body_is_schema_fail() -> None:
    """Seed 000: a truncated JSON body once scored as success."""
    whole = json.dumps({"tool_call": {"name": "capture", "args": {"amount": 1200}}})
    for cut in range(1, len(whole)):
        assert_schema_fail(parse(whole[:cut]))
    assert_schema_fail(parse('{"answer": "captured pay'), "does not parse")


def test_invalid_utf8_bytes_are_schema_fail() -> None:
    assert_schema_fail(parse(b'{"answer": "caf\xe9"}'), "UTF-8")
    assert_schema_fail(parse(b"\xff\xfe\x00"), "UTF-8")


@pytest.mark.parametrize(
    "raw",
    [
        '{"answer": NaN}',
        '{"tool_call": {"name": "t", "args": {"x": Infinity}}}',
        '{"tool_call": {"name": "t", "args": {"x": -Infinity}}}',
        '{"tool_call": {"name": "t", "args": {"x": 1e400}}}',
        {"tool_call": {"name": "t", "args": {"x": float("nan")}}},
        {"tool_call": {"name": "t", "args": {"x": [1.0, float("inf")]}}},
    ],
    ids=["NaN", "Infinity", "-Infinity", "overflow", "py-nan", "py-inf-nested"],
)
def test_non_finite_numbers_are_schema_fail(raw: Any) -> None:
    assert_schema_fail(parse(raw))


@pytest.mark.parametrize(
    "raw",
    [
        '{"answer": "a", "answer": "b"}',
        '{"tool_call": {"name": "safe", "name": "wire_money", "args": {}}}',
        '{"tool_call": {"name": "t", "args": {"q": 1, "q": 2}}}',
    ],
)
def test_duplicate_keys_are_schema_fail(raw: str) -> None:
    assert_schema_fail(parse(raw), "duplicate key")


def test_deeply_nested_text_does_not_raise() -> None:
    depth = 100_000
    assert_schema_fail(parse('{"answer": ' + "[" * depth + "]" * depth + "}"))
    assert_schema_fail(parse("[" * depth + "]" * depth))
    assert_schema_fail(parse('{"a":' * depth + "1" + "}" * depth))


def test_deeply_nested_python_value_does_not_raise() -> None:
    nested: Any = []
    for _ in range(100_000):
        nested = [nested]
    assert_schema_fail(parse({"tool_call": {"name": "t", "args": {"x": nested}}}))
    assert_schema_fail(parse(nested))


def test_reply_over_the_size_limit_is_schema_fail() -> None:
    huge = json.dumps({"answer": "x" * MAX_REPLY_CHARS})
    assert len(huge) > MAX_REPLY_CHARS
    assert_schema_fail(parse(huge), "limit")
    assert_schema_fail(parse(huge.encode("utf-8")), "limit")
    assert_schema_fail(parse("y" * (MAX_REPLY_CHARS + 1)), "limit")


def test_reply_at_the_size_limit_is_parsed() -> None:
    text = "x" * (MAX_REPLY_CHARS - len('{"answer": ""}'))
    raw = json.dumps({"answer": text})
    assert len(raw) == MAX_REPLY_CHARS
    assert parse(raw) == FinalAnswer(text=text)


# --- shape rules ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        {"answer": "42", "tool_call": {"name": "lookup", "args": {}}},
        {"answer": "42", "handoff": {"why": "stuck"}},
        {"tool_call": {"name": "a"}, "handoff": {"why": "b"}},
    ],
)
def test_two_proposals_at_once_are_schema_fail(raw: dict[str, Any]) -> None:
    assert_schema_fail(parse(raw), "more than one proposal")


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"answer": "42", "confidence": 0.99}, "confidence"),
        ({"tool_call": {"name": "lookup"}, "retry_budget": 99}, "retry_budget"),
        ({"halt": True}, "halt"),
    ],
)
def test_unknown_top_level_keys_are_schema_fail(raw: dict[str, Any], key: str) -> None:
    assert_schema_fail(parse(raw), repr(key))


def test_non_string_keys_are_schema_fail() -> None:
    assert_schema_fail(parse({1: "x"}), "keys must be strings")


@pytest.mark.parametrize(
    "body",
    [
        "lookup",
        None,
        [],
        {},
        {"name": ""},
        {"name": "   "},
        {"name": 7},
        {"name": "lookup", "args": []},
        {"name": "lookup", "args": "q=1"},
        {"name": "lookup", "args": {}, "privileged": False},
    ],
)
def test_malformed_tool_call_is_schema_fail(body: Any) -> None:
    assert_schema_fail(parse({"tool_call": body}))


@pytest.mark.parametrize("answer", [None, 42, 1.5, True, [], {}, ["a"], "", "   ", "\n"])
def test_answer_must_be_a_non_empty_string(answer: Any) -> None:
    assert_schema_fail(parse({"answer": answer}), "final answer")


@pytest.mark.parametrize(
    "body",
    [
        "please help",
        {},
        {"why": ""},
        {"why": 3},
        None,
        {"why": "x", "args": []},
        {"why": "x", "args": "amount=1"},
        {"why": "x", "urgency": "high"},
    ],
)
def test_malformed_handoff_is_schema_fail(body: Any) -> None:
    assert_schema_fail(parse({"handoff": body}), "handoff")


def test_tool_call_past_the_step_cap_is_refused() -> None:
    raw = json.dumps(SEED_TOOL_CALL)
    assert parse(raw, step=8, max_steps=8) == ToolCall(name="lookup", args={"q": "again"})
    assert_schema_fail(parse(raw, step=9, max_steps=8), "step cap")


# --- properties -------------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and infinities included on purpose
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
reply_keys = st.sampled_from(["tool_call", "answer", "handoff", "done", "name", "args", "why"])
# objects shaped like replies, so the interesting branches are reached often
reply_like = st.recursive(
    json_scalars,
    lambda inner: st.dictionaries(reply_keys | st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)
raw_replies = st.one_of(
    json_values,
    reply_like,
    reply_like.map(lambda v: json.dumps(v)),
    json_values.map(lambda v: json.dumps(v)),
    st.text(),
    st.binary(),
    reply_like.map(lambda v: json.dumps(v).encode("utf-8")),
    st.text().map(lambda t: "{" + t),
)


@settings(max_examples=200, deadline=None)
@given(raw=raw_replies, step=st.integers(-2, 12), max_steps=st.integers(0, 10))
def test_parse_reply_never_raises_and_returns_one_of_four(
    raw: Any, step: int, max_steps: int
) -> None:
    result = parse_reply(raw, step=step, max_steps=max_steps)
    assert type(result) in PROPOSAL_TYPES
    assert parse_reply(raw, step=step, max_steps=max_steps) == result
    if isinstance(result, Rejection):
        assert result.kind in ("schema_fail", "empty_response")
        assert result.detail
    elif isinstance(result, ToolCall):
        assert result.name.strip()
        assert isinstance(result.args, dict)
        assert step <= max_steps
    elif isinstance(result, FinalAnswer):
        assert result.text.strip()
    else:
        assert result.why.strip()


finite_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None)
@given(
    name=st.text(min_size=1, max_size=20).filter(str.strip),
    args=st.dictionaries(st.text(max_size=8), finite_json, max_size=4),
    done=st.booleans(),
)
def test_well_formed_tool_call_text_parses_to_that_call(
    name: str, args: dict[str, Any], done: bool
) -> None:
    reply: dict[str, Any] = {"tool_call": {"name": name, "args": args}}
    if done:
        reply["done"] = True
    result = parse(json.dumps(reply))
    assert result == ToolCall(name=name, args=args, ignored=("done",) if done else ())
