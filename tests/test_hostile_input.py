"""Hostile and broken input (issue 7): model replies and YAML declarations built to break the
parser, the journal or the loader. Every reply ends in a named proposal or rejection and every
run in a halt reason from the enum, journaled, read back and replayed; every bad declaration
is an `InvalidInputError` naming the file (and the line), refused before it costs much.

The fuzz properties run a modest number of examples here (the figures are in each
`settings`); the `slow` ones run the same properties with many more.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm_agent import HaltReason, InvalidInputError, load_machine
from fsm_agent.declaration.load import parse_machine
from fsm_agent.declaration.policy import PolicyError, load_policy, parse_policy
from fsm_agent.declaration.yamlsource import (
    MAX_YAML_BYTES,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    LineIndex,
)
from fsm_agent.errors import FsmAgentError, MachineSpecError
from fsm_agent.runtime.outcomes import NOT_KEPT, PREVIEW_CHARS, jsonable
from fsm_agent.runtime.proposals import (
    MAX_DETAIL_CHARS,
    MAX_REPLY_BYTES,
    MAX_REPLY_CHARS,
    MAX_REPLY_DEPTH,
    FinalAnswer,
    HandoffRequest,
    Proposal,
    Rejection,
    ToolCall,
    parse_reply,
)
from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.testing import assert_replays
from tests.conftest import MINIMAL_MACHINE
from tests.lab import LOOKUP, lab_run

ROOT = Path(__file__).parent.parent
SEED_POLICY = (ROOT / "machines" / "halt-policy.yml").read_text(encoding="utf-8")
PROPOSAL_TYPES = (ToolCall, FinalAnswer, HandoffRequest, Rejection)
#: The longest a marker for a value the journal does not keep as is may be.
MARKER_LIMIT = len(NOT_KEPT) + 2 * PREVIEW_CHARS


def parse(raw: Any, *, step: int = 1, max_steps: int = 8) -> Proposal:
    return parse_reply(raw, step=step, max_steps=max_steps)


def nested(depth: int, leaf: Any = "x") -> Any:
    """`leaf` inside `depth` lists."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def call_with(value: Any) -> dict[str, Any]:
    """A lookup tool call carrying `value` as its argument (depth 3 before `value`)."""
    return {"tool_call": {"name": "lookup", "args": {"q": value}}}


def through_journal(value: Any) -> Any:
    """What the journal gives back for a raw value: its kept form, through JSON text."""
    return json.loads(json.dumps(jsonable(value), allow_nan=False))


def same_outcome(a: Proposal, b: Proposal) -> bool:
    """What replay compares: a rejection's kind, any other proposal whole (as the journal
    reads it back: a tuple in a Python reply's args is a JSON array)."""
    if isinstance(a, Rejection) and isinstance(b, Rejection):
        return a.kind == b.kind
    return type(a) is type(b) and _as_json(a) == _as_json(b)


def _as_json(proposal: Proposal) -> Any:
    return json.loads(json.dumps(attrs.asdict(proposal)))


class Unreadable:
    """A Python value an adapter might hand back: not JSON, and hostile to look at."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing me")

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        raise RuntimeError("no printing me")


class Forger:
    """Not JSON, but printed as a proposal: the journal must not keep the print as the reply
    (it once did, and the replay then read an answer the live run never saw)."""

    def __repr__(self) -> str:
        return '{"answer": "forged"}'


class Opaque:
    """A Python value that is not JSON (with a repr, so hypothesis can report it)."""


class RaisingDict(dict[str, Any]):
    def __len__(self) -> int:
        raise RuntimeError("no measuring me")


def cyclic() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


HUGE_TEXT = "x" * (MAX_REPLY_CHARS * 3)
HUGE_ANSWER = {"answer": "y" * (MAX_REPLY_CHARS + 1)}
WIDE = {"tool_call": {"name": "lookup", "args": {"q": [None] * (MAX_REPLY_CHARS * 2)}}}


# --- the parser, case by case ---------------------------------------------------------------

# (id, raw reply, fragment of the rejection detail): each is schema_fail
REJECTED: list[Any] = [
    ("truncated", '{"tool_call": {"name": "lookup", "args": {"q": "lab pa', "does not parse"),
    ("truncated-bytes", b'{"answer": "swordf', "does not parse"),
    ("invalid-utf8", b'{"answer": "caf\xe9"}', "not valid UTF-8"),
    ("utf8-surrogate-bytes", b'{"answer": "\xed\xa0\x80"}', "not valid UTF-8"),
    ("huge-text", HUGE_TEXT, "the limit is 1000000"),
    ("huge-bytes", b"x" * (MAX_REPLY_BYTES + 1), "bytes; the limit"),
    ("huge-python-answer", HUGE_ANSWER, "larger than 1000000"),
    ("wide-python-args", WIDE, "larger than 1000000"),
    ("deeper-text", '{"answer": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    ("deep-text", json.dumps(call_with(nested(500))), f"more than {MAX_REPLY_DEPTH} levels"),
    ("deep-python", call_with(nested(100_000)), f"more than {MAX_REPLY_DEPTH} levels"),
    ("cyclic-python", call_with(cyclic()), f"more than {MAX_REPLY_DEPTH} levels"),
    ("nan-text", '{"tool_call": {"name": "lookup", "args": {"q": NaN}}}', "non-finite"),
    ("infinity-text", '{"answer": Infinity}', "non-finite"),
    ("overflow-text", '{"tool_call": {"name": "lookup", "args": {"q": 1e999}}}', "non-finite"),
    ("nan-python", call_with(float("nan")), "non-finite"),
    ("inf-python-nested", call_with([1.0, {"x": float("-inf")}]), "non-finite"),
    ("duplicate-keys", '{"answer": "a", "answer": "b"}', "duplicate key 'answer'"),
    ("duplicate-nested", '{"tool_call": {"name": "a", "name": "wire_money"}}', "duplicate key"),
    ("huge-duplicate-key", '{"' + "k" * 5000 + '": 1, "' + "k" * 5000 + '": 2}', "duplicate key"),
    ("done-alone", {"done": True}, "no proposal"),
    ("done-as-text", '{"done": true, "answer": ""}', "final answer"),
    ("int", 7, "got int"),
    ("float-nan", float("nan"), "got float"),
    ("bool", True, "got bool"),
    ("list", [LOOKUP], "got list"),
    ("tuple", (LOOKUP,), "got tuple"),
    ("python-object", Unreadable(), "got Unreadable"),
    ("repr-as-json", Forger(), "got Forger"),
    ("object-in-args", call_with(Unreadable()), "Unreadable, which is not JSON"),
    ("set-in-args", call_with({1, 2}), "set, which is not JSON"),
    ("bytes-in-args", call_with(b"q"), "bytes, which is not JSON"),
    ("int-key", {1: "x"}, "non-string key"),
    ("big-int-python", call_with(10**5000), "more than 4300 digits"),
    ("big-int-text", '{"tool_call": {"name": "l", "args": {"q": ' + "9" * 5000 + "}}}", "parse"),
    ("raising-len", RaisingDict(answer="x"), "cannot be read: RuntimeError"),
    ("nul-prose", "\x00\x00 binary", "prose"),
]


@pytest.mark.parametrize(
    ("raw", "fragment"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED]
)
def test_hostile_reply_is_schema_fail_with_what_was_wrong(raw: Any, fragment: str) -> None:
    result = parse(raw)
    assert isinstance(result, Rejection), result
    assert result.kind == "schema_fail"
    assert fragment in result.detail
    assert len(result.detail) <= MAX_DETAIL_CHARS


def test_depth_limit_is_exact_for_text_and_python() -> None:
    deepest_ok = MAX_REPLY_DEPTH - 3  # the reply, tool_call and args objects are 3 levels
    for depth, ok in ((deepest_ok, True), (deepest_ok + 1, False)):
        reply = call_with(nested(depth))
        for raw in (reply, json.dumps(reply), json.dumps(reply).encode()):
            assert isinstance(parse(raw), ToolCall) is ok, (depth, type(raw))


def test_done_beside_a_tool_call_is_recorded_and_not_obeyed() -> None:
    """Seed 000: the drafting model's done flag never votes, even glued to a real call."""
    for raw in ({"done": True, **LOOKUP}, json.dumps({**LOOKUP, "done": True})):
        assert parse(raw) == ToolCall(name="lookup", args={"q": "lab password"}, ignored=("done",))


@pytest.mark.parametrize(
    "raw",
    [{"answer": "swordfish \ud800"}, '{"answer": "swordfish \\ud800"}', '{"answer": "\\udfff"}'],
    ids=["python", "escaped", "low-surrogate"],
)
def test_lone_surrogates_parse_and_survive_the_journal(raw: Any) -> None:
    result = parse(raw)
    assert isinstance(result, FinalAnswer)
    assert parse(through_journal(raw)) == result


@pytest.mark.parametrize(
    "raw",
    [None, "", " \n\t", b"", {}, [], ()],
    ids=["none", "empty", "space", "b", "{}", "[]", "()"],
)
def test_nothing_is_empty_response_live_and_after_the_journal(raw: Any) -> None:
    assert parse(raw).kind == "empty_response"  # type: ignore[union-attr]
    assert parse(through_journal(raw)).kind == "empty_response"  # type: ignore[union-attr]


# --- the journal's form of a reply ------------------------------------------------------------


@pytest.mark.parametrize(("raw", "_"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_the_journal_keeps_every_hostile_reply_bounded_and_replayable(raw: Any, _: str) -> None:
    kept = jsonable(raw)
    text = json.dumps(kept, allow_nan=False)  # the journal's encoder refuses NaN
    if isinstance(kept, str) and kept.startswith(NOT_KEPT):
        assert len(kept) <= MARKER_LIMIT
    else:
        assert len(text) <= 7 * MAX_REPLY_CHARS
    assert same_outcome(parse(json.loads(text)), parse(raw))


def test_a_value_the_journal_cannot_keep_becomes_a_marker_naming_why() -> None:
    marker = jsonable(HUGE_TEXT)
    why = f"the value is {len(HUGE_TEXT)} characters, over the limit of {MAX_REPLY_CHARS}"
    assert marker.startswith(f"{NOT_KEPT}{why}; preview: 'xxxxxxxx")
    assert marker.endswith(">")
    assert len(marker) <= MARKER_LIMIT
    marker = jsonable(call_with(float("nan")))
    assert marker.startswith(f"{NOT_KEPT}the value has a non-finite number (NaN or infinity);")
    assert "'q': nan" in marker  # a preview for the person reading the journal
    marker = jsonable(Unreadable())
    assert marker.startswith(f"{NOT_KEPT}the value is a Unreadable, which is not JSON data;")
    assert jsonable(b"\xff\xfe").startswith(f"{NOT_KEPT}the value is bytes that are not UTF-8;")
    assert jsonable(b'{"answer": "ok"}') == '{"answer": "ok"}'  # UTF-8 bytes: their text
    assert jsonable(LOOKUP) is LOOKUP  # plain JSON data: as is


# --- the parser, fuzzed -----------------------------------------------------------------------

#: Any code point, lone surrogates included.
any_char = st.characters(exclude_categories=())
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and the infinities on purpose
    | st.text(any_char, max_size=12)
)
finite_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=10,
)  # fmt: skip
reply_keys = st.sampled_from(["tool_call", "answer", "handoff", "done", "name", "args", "why"])
reply_like = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(reply_keys | st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=16,
)
not_json = st.sampled_from([{1, 2}, b"\xff", Opaque(), 10**5000, cyclic(), (1, "a"), 1j])
proposals = st.one_of(
    st.builds(
        lambda name, args: {"tool_call": {"name": name, "args": args}},
        st.text(min_size=1, max_size=10).filter(str.strip),
        st.dictionaries(st.text(max_size=6), finite_like, max_size=3),
    ),
    st.builds(lambda text: {"answer": text}, st.text(min_size=1).filter(str.strip)),
    st.builds(lambda why: {"handoff": {"why": why}}, st.text(min_size=1).filter(str.strip)),
)


def _cut(text: str, at: float) -> str:
    return text[: int(len(text) * at)]


hostile = st.one_of(
    reply_like,
    reply_like.map(lambda v: json.dumps(v)),  # NaN and Infinity appear as bare tokens
    reply_like.map(lambda v: json.dumps(v).encode("utf-8", "surrogatepass")),  # bad UTF-8
    st.builds(_cut, proposals.map(json.dumps), st.floats(0, 0.999)),  # truncated
    st.binary(max_size=64),
    st.text(any_char, max_size=64),
    st.text(max_size=32).map(lambda t: "{" + t),
    st.builds(
        lambda d: json.dumps(call_with(None)).replace("null", "[" * d + "]" * d),
        st.integers(0, 5000),
    ),  # deep text
    st.builds(lambda d: call_with(nested(d)), st.integers(0, 2000)),  # deep Python
    st.builds(
        lambda rest, x: {**rest, "tool_call": {"name": "t", "args": {"x": x}}},
        st.dictionaries(reply_keys, reply_like, max_size=2),
        not_json,
    ),
    st.builds(lambda p, done: {**p, "done": done}, proposals, reply_like),  # done beside
    st.builds(lambda k, v: f'{{"{k}": {v}, "{k}": {v}}}', reply_keys, st.just('"x"')),  # twice
    not_json,
    st.sampled_from([HUGE_TEXT, HUGE_ANSWER, WIDE, 7, 1.5, True, [LOOKUP]]),
)


def check_reply(raw: Any, step: int, max_steps: int) -> Proposal:
    """The parser's contract for one reply, and the journal's: a named outcome, the same
    twice, and the same again from what the journal keeps (what replay parses)."""
    result = parse_reply(raw, step=step, max_steps=max_steps)
    assert type(result) in PROPOSAL_TYPES
    if isinstance(result, Rejection):
        assert result.kind in ("schema_fail", "empty_response")
        assert 0 < len(result.detail) <= MAX_DETAIL_CHARS
    elif isinstance(result, ToolCall):
        assert result.name.strip()
        assert step <= max_steps
    assert same_outcome(parse_reply(raw, step=step, max_steps=max_steps), result)
    again = parse_reply(through_journal(raw), step=step, max_steps=max_steps)
    assert same_outcome(again, result), (again, result)
    return result


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=hostile, step=st.integers(0, 9), max_steps=st.integers(1, 8))
def test_fuzz_every_reply_ends_in_a_named_outcome(raw: Any, step: int, max_steps: int) -> None:
    check_reply(raw, step, max_steps)


@settings(max_examples=150, deadline=None)
@given(reply=proposals, indent=st.sampled_from([None, 2]), at=st.integers(min_value=1))
def test_fuzz_a_truncated_proposal_never_parses_as_one(
    reply: dict[str, Any], indent: int | None, at: int
) -> None:
    """Seed 000: a truncated JSON body once scored as success. No prefix of a proposal's
    text (as text or bytes) is a proposal."""
    text = json.dumps(reply, indent=indent)
    assert not isinstance(parse(text), Rejection)
    cut = text[: at % len(text)]
    for raw in (cut, cut.encode("utf-8", "surrogatepass")):
        assert isinstance(parse(raw), Rejection), raw


# --- whole runs on hostile replies --------------------------------------------------------------


def model_replies(db: Path, run_id: str) -> list[Any]:
    store = SqliteStore(db)
    try:
        events = store.events(run_id)
    finally:
        store.close()
    assert events[-1].halt is not None
    return [e.facts.reply for e in events if e.facts is not None and e.facts.action == "model"]


def check_run(tmp_path: Path, replies: list[Any], **budgets: int) -> tuple[HaltReason, int]:
    """A whole run on `replies`: a halt reason from the enum that no reply made an internal
    error, a journal that reads back holding each reply as the journal keeps it, and a clean
    replay. Returns the halt reason and how many replies the journal holds."""
    tmp_path.mkdir(exist_ok=True)
    record = lab_run(tmp_path, replies, budgets={"max_steps": 4, **budgets})
    assert isinstance(record.halt_reason, HaltReason)
    assert record.halt_reason is not HaltReason.INTERNAL_ERROR, record.error
    journaled = model_replies(tmp_path / "j.db", record.run_id)
    expected = [through_journal(r) for r in [*replies, *[None] * len(journaled)]]
    assert journaled == expected[: len(journaled)]
    for kept in journaled:
        if isinstance(kept, str) and kept.startswith(NOT_KEPT):
            assert len(kept) <= MARKER_LIMIT
    assert_replays(tmp_path / "j.db", record.run_id)
    return record.halt_reason, len(journaled)


def test_a_run_on_every_hostile_reply_halts_named_journaled_and_replays(tmp_path: Path) -> None:
    """One run through every case above (each a rejected step, retried), then nothing."""
    replies = [raw for _, raw, _ in REJECTED]
    n = len(replies)
    reason, journaled = check_run(tmp_path, replies, max_steps=n + 1, max_retries=n)
    assert (reason, journaled) == (HaltReason.EMPTY_RESPONSE, n + 1)
    assert (tmp_path / "j.db").stat().st_size < 4 * MAX_REPLY_CHARS  # no reply over the limit


def test_a_hostile_reply_before_a_good_one_still_completes(tmp_path: Path) -> None:
    replies = [call_with(nested(10_000)), LOOKUP, {"answer": "swordfish"}]
    assert check_run(tmp_path, replies) == (HaltReason.COMPLETED, 3)


def test_a_deep_but_allowed_reply_is_journaled_as_is(tmp_path: Path) -> None:
    deepest = nested(MAX_REPLY_DEPTH - 3)  # under the three objects of the reply
    handoff = {"handoff": {"why": "deep", "args": {"a": deepest}}}
    assert check_run(tmp_path / "a", [handoff]) == (HaltReason.HANDOFF_REQUESTED, 1)
    refused = {"tool_call": {"name": "format_disk", "args": {"a": deepest}}}
    assert check_run(tmp_path / "b", [refused]) == (HaltReason.TOOL_REFUSED, 1)


def test_truncated_replies_never_complete_a_run(tmp_path: Path) -> None:
    text = json.dumps(LOOKUP)
    cuts = [text[:n] for n in (len(text) - 1, len(text) // 2, 1)]
    assert check_run(tmp_path, cuts) == (HaltReason.SCHEMA_FAIL, 3)  # no retry left


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(replies=st.lists(hostile, min_size=1, max_size=4))
def test_fuzz_a_run_on_hostile_replies_halts_named_and_replays(
    tmp_path_factory: pytest.TempPathFactory, replies: list[Any]
) -> None:
    check_run(tmp_path_factory.mktemp("run"), replies)


# --- YAML declarations ----------------------------------------------------------------------


def laughs(levels: int = 9) -> str:
    """Billion laughs: each level is nine aliases of the one before (9**9 lols)."""
    lines = ["lol0: &lol0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels):
        lines.append(f"lol{i}: &lol{i} [" + ", ".join([f"*lol{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


# (id, document, the line the error names, fragment of the message)
MALICIOUS: list[tuple[str, str, int, str]] = [
    (
        "python-apply",
        MINIMAL_MACHINE + "x: !!python/object/apply:os.system ['touch {pwned}']\n",
        line_of(MINIMAL_MACHINE, "transitions:") + 4,
        "could not determine a constructor for the tag",
    ),
    (
        "python-name",
        "name: !!python/name:os.system\n" + MINIMAL_MACHINE.replace("name: minimal\n", ""),
        1,
        "python/name:os.system",
    ),
    (
        "python-new",
        "description: !!python/object/new:subprocess.Popen [['touch', '{pwned}']]\n",
        1,
        "python/object/new:subprocess.Popen",
    ),
    ("billion-laughs", laughs(), 5, f"expands to more than {MAX_YAML_NODES} nodes"),
    ("recursive-alias", "name: &loop [a, *loop]\n", 1, "recursive alias"),
    ("undefined-alias", "name: *nothing\n", 1, "undefined alias"),
    ("deep-flow", "name: " + "[" * 100 + "]" * 100 + "\n", 1, "more than 64 levels"),
    ("deep-block", "".join(" " * i + "k:\n" for i in range(200)), MAX_YAML_DEPTH, "64 levels"),
    ("nul", MINIMAL_MACHINE.replace("initial: drafting", "initial: draft\x00ing"), 3, "'\\x00'"),
    ("bell", "name: a\nstates: \x07\n", 2, "'\\x07' is not allowed"),
    ("tab", MINIMAL_MACHINE.replace("  max_steps: 3", "\tmax_steps: 3"), 5, "spaces"),
    ("unhashable-key", "name: a\n? [a, b]\n: 1\n", 2, "a key that is a mapping or a sequence"),
    ("two-documents", "name: a\n---\nname: b\n", 2, "expected a single document"),
    ("duplicate-key", "name: a\nname: b\n", 2, "found duplicate key 'name'"),
]


@pytest.fixture(params=["machine", "policy"])
def loader(request: pytest.FixtureRequest) -> Callable[[Path], Any]:
    """Load a file as a machine declaration or as a halt policy."""
    if request.param == "machine":
        return lambda path: load_machine(str(path))
    return load_policy


@pytest.mark.parametrize(
    ("text", "line", "fragment"), [m[1:] for m in MALICIOUS], ids=[m[0] for m in MALICIOUS]
)
def test_malicious_declaration_is_refused_with_file_and_line(
    tmp_path: Path, loader: Callable[[Path], Any], text: str, line: int, fragment: str
) -> None:
    pwned = tmp_path / "pwned"
    path = tmp_path / "declaration.yaml"
    path.write_text(text.replace("{pwned}", str(pwned)), encoding="utf-8")
    with pytest.raises(InvalidInputError) as info:
        loader(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: not valid YAML: ")
    assert fragment in message
    assert "\n" not in message  # one line, no PyYAML snippet
    assert not pwned.exists()  # nothing was constructed, let alone run


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"name: a\n# caf\xe9\nstates: {}\n", "byte 0xe9 at line 2, column 6"),
        (b"\xff\xfename: a\n", "byte 0xff at line 1, column 1"),
        (b"# " + b"x" * MAX_YAML_BYTES + b"\n", f"larger than {MAX_YAML_BYTES} bytes"),
    ],
    ids=["latin-1", "utf-16-bom", "huge"],
)
def test_unreadable_declaration_file_is_refused_with_why(
    tmp_path: Path, loader: Callable[[Path], Any], data: bytes, fragment: str
) -> None:
    path = tmp_path / "declaration.yaml"
    path.write_bytes(data)
    with pytest.raises(InvalidInputError, match="cannot read") as info:
        loader(path)
    assert str(info.value).startswith(str(path))
    assert fragment in str(info.value)


def test_anchors_within_the_budget_are_fine() -> None:
    text = MINIMAL_MACHINE.replace("guards: [evidence_complete]", "guards: &g [evidence_complete]")
    text = text.replace("dest: handoff, halt: handoff_requested", "dest: handoff, guards: *g,"
                        " halt: handoff_requested")  # fmt: skip
    spec = parse_machine(text, source="m.yaml")
    assert spec.transitions[2].guards == ("evidence_complete",)


def test_the_line_index_stops_where_the_loader_does() -> None:
    """Error lines come from a second, node-level pass: it must not walk 9**9 nodes either."""
    assert LineIndex(laughs(), "m.yaml").lines == {}
    lines = LineIndex("a: &x [b]\nc: *x\n", "m.yaml").lines
    assert lines == {"$": 1, "$.a": 1, "$.a[0]": 1, "$.c": 2, "$.c[0]": 1}  # alias: anchor's


def test_a_billion_laughs_is_refused_by_the_cli_without_a_traceback(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from fsm_agent.cli.main import cli

    path = tmp_path / "laughs.yaml"
    path.write_text(laughs(), encoding="utf-8")
    for args in (["validate", str(path)], ["lint", str(path)]):
        result = CliRunner().invoke(cli, args, catch_exceptions=False)
        assert result.exit_code == 2, result.output
        assert result.output.startswith(f"Error: {path}:5: not valid YAML: the document expands")


def _mutate(base: str, index: int, mode: int, snippet: str) -> str:
    lines = base.splitlines(keepends=True)
    i = index % len(lines)
    key = lines[i].partition(":")[0]
    if mode == 0:
        lines[i] = f"{key}: {snippet}\n"
    elif mode == 1:
        lines.insert(i, lines[i])
    else:
        at = index % max(1, len(lines[i]))
        lines[i] = lines[i][:at] + snippet + lines[i][at:]
    return "".join(lines)


SNIPPETS = [
    "[a, b]", "{a: 1}", "~", "!!binary aGk=", "!!set {a, b}", "2001-01-01", "1e999", ".nan",
    "-.inf", "&x [*x]", "*undefined", "!!omap [a: 1]", "? [a]\n  : 1", "!!python/name:os.system",
    "!!python/object/apply:os.getcwd []", "0x10", "99999999999999999999999999999",
    "<<: {a: 1}", "'\\x00'", "\t", "\x00", "\ud800", "[[[[[[[[", "]]]", "- a\n- b",
    "|\n  block", "&a a", "!!str", "!custom x",
]  # fmt: skip
yaml_snippets = st.sampled_from(SNIPPETS) | st.text(any_char, max_size=20)


def check_declaration(text: str) -> None:
    """Parsing as a machine and as a policy either loads or raises the project's error that
    names the source first: never a traceback."""
    for parse_text, source in ((parse_machine, "m.yaml"), (parse_policy, "p.yml")):
        error = _refusal(parse_text, text, source)
        if error is not None:
            assert isinstance(error, MachineSpecError | PolicyError), error
            assert str(error).startswith(source), error


def _refusal(parse_text: Callable[..., Any], text: str, source: str) -> FsmAgentError | None:
    try:
        parse_text(text, source=source)
    except FsmAgentError as exc:
        return exc
    return None


@settings(max_examples=120, deadline=None)
@given(
    base=st.sampled_from([MINIMAL_MACHINE, SEED_POLICY]),
    index=st.integers(0, 60),
    mode=st.integers(0, 2),
    snippet=yaml_snippets,
)
def test_fuzz_a_mangled_declaration_loads_or_says_where(
    base: str, index: int, mode: int, snippet: str
) -> None:
    check_declaration(_mutate(base, index, mode, snippet))


@settings(max_examples=100, deadline=None)
@given(text=st.text(any_char) | st.binary().map(lambda b: b.decode("latin-1")))
def test_fuzz_arbitrary_text_as_a_declaration_says_where(text: str) -> None:
    check_declaration(text)


# --- the same properties, many more examples ---------------------------------------------------


@pytest.mark.slow
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=hostile, step=st.integers(0, 9), max_steps=st.integers(1, 8))
def test_fuzz_many_replies(raw: Any, step: int, max_steps: int) -> None:
    check_reply(raw, step, max_steps)


@pytest.mark.slow
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(replies=st.lists(hostile, min_size=1, max_size=4))
def test_fuzz_many_runs(tmp_path_factory: pytest.TempPathFactory, replies: list[Any]) -> None:
    check_run(tmp_path_factory.mktemp("run"), replies)


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(
    base=st.sampled_from([MINIMAL_MACHINE, SEED_POLICY]),
    index=st.integers(0, 60),
    mode=st.integers(0, 2),
    snippet=yaml_snippets,
)
def test_fuzz_many_declarations(base: str, index: int, mode: int, snippet: str) -> None:
    check_declaration(_mutate(base, index, mode, snippet))
