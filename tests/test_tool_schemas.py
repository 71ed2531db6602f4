"""The JSON Schema a tool is advertised with, and the strict check of its call's arguments.

Tools of `tests.fixture_typed_tools`; the end-to-end test runs the real OpenAI-compatible
lane against the 127.0.0.1 server of `tests.model_server`.
"""

from __future__ import annotations

import json
import sys
import textwrap
import typing
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fsm_agent import load_machine, load_tools, run
from fsm_agent.adapters.models import describe_tools
from fsm_agent.adapters.openai import Endpoint, OpenAIChatModel
from fsm_agent.errors import AdapterError
from fsm_agent.runtime.tool_schema import (
    MAX_PROBLEM_CHARS,
    ArgumentsRefused,
    argument_schema,
    checked_arguments,
)
from fsm_agent.runtime.tools import Tool, ToolRegistry, argument_problem
from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.testing import assert_replays
from tests import fixture_typed_tools as typed
from tests import model_server as ms
from tests.lab import granted
from tests.model_server import ModelServer, answer, tool_call

TOOLS = load_tools("tests.fixture_typed_tools")
SEARCH_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "what to look for"},
        "limit": {
            "anyOf": [{"type": "integer"}, {"type": "null"}],
            "description": "at most this many hits (None: all of them)",
            "default": None,
        },
        "mode": {"enum": ["exact", "fuzzy"], "default": "exact"},
        "tags": {"type": "array", "items": {"type": "string"}, "default": []},
    },
    "required": ["query"],
    "additionalProperties": False,
}


def spec_of(name: str) -> Any:
    [spec] = describe_tools(TOOLS, [name])
    return spec


# --- the schema a model is shown ------------------------------------------------------------


def test_a_schema_has_types_required_enums_defaults_and_descriptions() -> None:
    search = spec_of("search")
    assert search.parameters == SEARCH_SCHEMA
    # the docstring's first paragraph; the Args section is the parameters' descriptions
    assert search.description == "Search the notes for a query."


def test_nested_dataclass_typeddict_and_attrs_types_are_closed_objects_in_defs() -> None:
    order = spec_of("order").parameters
    assert order["required"] == ["lines", "ship_to"]
    assert order["properties"]["lines"] == {
        "type": "array",
        "items": {"$ref": "#/$defs/Line"},
        "description": "what to send",  # the NumPy-style Parameters section
    }
    assert order["properties"]["ship_to"]["description"] == "where the parcel goes"  # Annotated
    assert order["properties"]["rush"] == {
        "description": "ship today",  # msgspec.Meta(description=…)
        "type": "boolean",
        "default": False,
    }
    assert order["properties"]["weight_kg"] == {"type": "number", "minimum": 0, "default": 1.0}
    assert order["$defs"]["Line"] == {
        "title": "Line",
        "type": "object",
        "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "default": 1}},
        "required": ["sku"],
        "additionalProperties": False,
    }
    assert order["$defs"]["Address"]["required"] == ["city", "street"]
    assert order["$defs"]["Window"]["additionalProperties"] is False
    json.dumps(order)  # what goes on the wire


def test_kwargs_unannotated_and_object_parameters() -> None:
    tag = spec_of("tag").parameters
    assert tag["properties"] == {"note": {"type": "string", "description": "the note's id"}}
    assert tag["additionalProperties"] == {"type": "integer"}  # **labels: int
    echo = spec_of("echo").parameters
    assert echo["properties"] == {"anything": {}, "also": {"default": None}}


def test_a_builtin_without_a_signature_takes_any_object() -> None:
    schema = argument_schema(max, "max")  # inspect.signature(max) raises
    assert schema.parameters == {"type": "object"}
    assert checked_arguments(max, "max", {"key": 1, "zz": None}) == {"key": 1, "zz": None}


@pytest.mark.parametrize(
    ("doc", "description", "documented"),
    [
        (
            "Look up.\nOver two lines.\n\nArgs:\n    q: the query\n",
            "Look up. Over two lines.",
            "the query",
        ),
        ("Look up.\nArgs:\n    q (str): the\n        query\n", "Look up.", "the query"),
        ("Look up.\n\n:param q: the query\n", "Look up.", "the query"),
        ("Look up.\n\nParameters\n----------\nq : str\n    the query\n", "Look up.", "the query"),
        ("Look up.\n\nMore detail here.\n", "Look up.", None),
        ("", "", None),
    ],
    ids=["google", "google_no_blank", "rest", "numpy", "no_params", "none"],
)
def test_descriptions_from_docstrings(doc: str, description: str, documented: str | None) -> None:
    def lookup(q: str) -> None: ...

    lookup.__doc__ = doc
    schema = argument_schema(lookup, "lookup")
    assert schema.description == description
    assert schema.parameters["properties"]["q"].get("description") == documented


def test_the_schema_is_made_once_per_tool() -> None:
    assert argument_schema(typed.search, "search") is argument_schema(typed.search, "search")


# --- arguments checked before the call ------------------------------------------------------

ORDER = {"lines": [{"sku": "a"}], "ship_to": {"street": "s", "city": "c"}}
NOT_FIT = "argument %r does not fit its type: "


@pytest.mark.parametrize(
    ("tool", "args", "expected"),
    [
        ("search", {"query": 5}, f"{NOT_FIT % 'query'}Expected `str`, got `int`"),
        ("search", {"query": None}, f"{NOT_FIT % 'query'}Expected `str`, got `null`"),
        ("search", {"query": "x", "limit": "5"}, "Expected `int | null`, got `str`"),
        ("search", {"query": "x", "limit": True}, "Expected `int | null`, got `bool`"),
        ("search", {"query": "x", "limit": 2.0}, "Expected `int | null`, got `float`"),
        ("search", {"query": "x", "mode": "slow"}, "Invalid enum value 'slow'"),
        ("search", {"query": "x", "tags": ["a", 1]}, "got `int` - at `tags[1]`"),
        ("search", {"query": "x", "tags": "a"}, "Expected `array`, got `str`"),
        ("search", {}, "missing a required argument: 'query'"),
        ("search", {"query": "x", "page": 2}, "got an unexpected keyword argument 'page'"),
        ("order", {**ORDER, "lines": [{"sku": 1}]}, "got `int` - at `lines[0].sku`"),
        ("order", {**ORDER, "lines": [{"qty": 1}]}, "missing required field `sku` - at `lines[0]`"),
        ("order", {**ORDER, "lines": [{"sku": "a", "qty": 2, "quantity": 3}]},
         "unknown field - at `lines[0].quantity`"),
        ("order", {**ORDER, "ship_to": {"street": "s", "city": "c", "zip": 1}}, "at `ship_to.zip`"),
        ("order", {**ORDER, "window": {"start": 1, "end": 2, "x": 0}}, "at `window.x`"),
        ("order", {**ORDER, "weight_kg": -1}, "Expected `float` >= 0.0"),
        ("tag", {"note": "n", "urgent": "yes"}, f"{NOT_FIT % 'urgent'}Expected `int`, got `str`"),
    ],
)  # fmt: skip
def test_arguments_that_do_not_fit_are_refused_saying_why(
    tool: str, args: dict[str, Any], expected: str
) -> None:
    problem = argument_problem(TOOLS.get(tool), args)  # type: ignore[arg-type]
    assert problem is not None
    assert expected in problem
    assert problem.endswith(")")
    assert f"(it takes {tool}(" in problem


def test_a_refusal_quotes_the_schema_the_argument_should_fit() -> None:
    problem = argument_problem(TOOLS.get("search"), {"query": "x", "mode": 3})  # type: ignore[arg-type]
    assert '; mode takes {"enum": ["exact", "fuzzy"]} (it takes search(query, limit=…' in (
        problem or ""
    )


@pytest.mark.parametrize(
    "args",
    [
        {"query": "x", "mode": "z" * 100_000},  # the library's detail echoes the value
        {"query": "x", "z" * 100_000: 1},  # the binding's message echoes the name
        {"query": "x", "tags": ["a"] * 50_000 + [1]},
    ],
    ids=["value", "name", "path"],
)
def test_a_refusal_never_echoes_hostile_input_at_length(args: dict[str, Any]) -> None:
    problem = argument_problem(TOOLS.get("search"), args) or ""  # type: ignore[arg-type]
    assert problem.startswith(("argument ", "got an unexpected"))
    assert len(problem) <= MAX_PROBLEM_CHARS + 40
    assert "zzzz" not in problem or "more]" in problem
    assert problem.endswith("tags=…))")  # the signature is still told


@pytest.mark.parametrize(
    ("kind", "value", "where"),
    [
        (typed.Node, {"name": "a", "children": [{"name": "b", "children": [{"name": "c",
                                                                           "n": 1}]}]},
         "x.children[0].children[0].n"),
        (dict[str, typed.Line], {"one": {"sku": "a"}, "two": {"sku": "b", "n": 1}}, "x['two'].n"),
        (tuple[int, typed.Line], [1, {"sku": "a", "n": 1}], "x[1].n"),
        (typed.Point, [1, {"sku": "a", "n": 1}], "x[1].n"),
        (typed.Cat | typed.Dog, {"type": "Cat", "lives": 3, "n": 1}, "x.n"),
        (list[typed.Cat | typed.Dog], [{"type": "Dog"}, {"type": "Cat", "n": 1}], "x[1].n"),
    ],
    ids=["recursive", "dict_values", "tuple", "namedtuple", "tagged_union", "union_items"],
)  # fmt: skip
def test_an_unknown_field_anywhere_inside_is_refused_with_its_path(
    kind: Any, value: Any, where: str
) -> None:
    problem = argument_problem(Tool(name="probe", fn=probe_of(kind)), {"x": value}) or ""
    assert f"{NOT_FIT % 'x'}Object contains unknown field - at `{where}`" in problem
    fixed = json.loads(json.dumps(value).replace(', "n": 1', ""))
    assert argument_problem(Tool(name="probe", fn=probe_of(kind)), {"x": fixed}) is None


def test_a_struct_that_forbids_unknown_fields_is_refused_by_msgspec_itself() -> None:
    problem = argument_problem(
        Tool(name="probe", fn=probe_of(typed.Cat | typed.Dog)), {"x": {"type": "Dog", "n": 1}}
    )
    assert f"{NOT_FIT % 'x'}Object contains unknown field `n`" in (problem or "")


def test_the_values_passed_are_those_the_annotations_say() -> None:
    args = {**ORDER, "window": {"start": 1, "end": 2}, "weight_kg": 2}
    values = checked_arguments(typed.order, "order", args)
    assert values["lines"] == [typed.Line(sku="a", qty=1)]
    assert values["window"] == typed.Window(start=1, end=2)
    assert values["ship_to"] == {"street": "s", "city": "c"}  # a TypedDict is a dict
    assert type(values["weight_kg"]) is float
    assert values["weight_kg"] == 2.0
    assert args["weight_kg"] == 2  # the model's arguments (what the journal keeps) untouched
    plain = {"query": "x", "limit": 3, "tags": ["a"]}
    assert checked_arguments(typed.search, "search", plain) == plain  # JSON types: the same


def test_unannotated_any_and_object_parameters_take_anything() -> None:
    odd = object()
    assert checked_arguments(typed.echo, "echo", {"anything": odd, "also": [1, {"a": None}]}) == {
        "anything": odd,
        "also": [1, {"a": None}],
    }

    def loose(**anything: Any) -> None: ...

    assert argument_problem(Tool(name="l", fn=loose), {"x": 1, "y": "2"}) is None


def test_a_lone_surrogate_is_checked_as_the_string_it_is() -> None:
    assert checked_arguments(typed.search, "search", {"query": "\ud800"}) == {"query": "\ud800"}
    with pytest.raises(ArgumentsRefused, match="argument 'limit' does not fit its type: got a"):
        checked_arguments(typed.search, "search", {"query": "x", "limit": "\ud800"})


# --- property: refused iff the value does not fit the annotation ------------------------------

NoneType = type(None)


def literals() -> st.SearchStrategy[Any]:
    values = st.one_of(st.integers(-2, 2), st.sampled_from(["a", "b", ""]), st.booleans())
    return st.lists(values, min_size=1, max_size=3, unique_by=lambda v: (type(v), v)).map(
        lambda vs: Literal[tuple(vs)]
    )


def kinds() -> st.SearchStrategy[Any]:
    leaves = st.one_of(st.sampled_from([str, int, float, bool, NoneType]), literals())
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            inner.map(lambda t: list[t]),  # type: ignore[valid-type]
            inner.map(lambda t: dict[str, t]),  # type: ignore[valid-type]
            inner.map(lambda t: typing.Optional[t]),  # noqa: UP045 - it collapses Optional[None]
            st.lists(inner, min_size=2, max_size=3).map(lambda ts: typing.Union[tuple(ts)]),  # noqa: UP007
        ),
        max_leaves=4,
    )


def fits(value: Any, kind: Any) -> bool:
    """The oracle: what JSON value an annotation admits, written from the types' meaning."""
    if kind is NoneType:
        return value is None
    if kind in (str, bool):
        return type(value) is kind
    if kind is int:
        return type(value) is int
    if kind is float:
        if type(value) is int:
            try:
                float(value)
            except OverflowError:
                return False
        return type(value) in (int, float)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Literal:
        return any(type(value) is type(a) and value == a for a in args)
    if origin is list:
        return type(value) is list and all(fits(v, args[0]) for v in value)
    if origin is dict:
        return type(value) is dict and all(fits(v, args[1]) for v in value.values())
    assert origin is typing.Union, kind
    return any(fits(value, a) for a in args)


def float_beside_an_int_literal(kind: Any) -> bool:
    """msgspec checks an integer against a union's int-like member alone (an int Literal
    here), never against its `float` beside it: `float | Literal[1]` refuses 0 (a refusal
    too many, never one too few). Such unions are left out of the property."""
    args = typing.get_args(kind)
    if typing.get_origin(kind) is typing.Union:
        flat = [a for a in args if typing.get_origin(a) is not Literal]
        flat += [v for a in args if typing.get_origin(a) is Literal for v in typing.get_args(a)]
        if float in flat and any(type(v) is int for v in flat):
            return True
    return any(float_beside_an_int_literal(a) for a in args)


def fitting(kind: Any) -> st.SearchStrategy[Any]:
    if kind in (str, int, bool, NoneType):
        return {str: st.text(max_size=4), int: st.integers(), bool: st.booleans()}.get(
            kind, st.none()
        )
    if kind is float:
        return st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers())
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Literal:
        return st.sampled_from(args)
    if origin is list:
        return st.lists(fitting(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(st.text(max_size=3), fitting(args[1]), max_size=3)
    return st.one_of([fitting(a) for a in args])


JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=4),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


def probe_of(kind: Any) -> Any:
    def probe(x):  # type: ignore[no-untyped-def]  # typed just below
        return None

    probe.__annotations__ = {"x": kind}
    return probe


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_value_is_refused_exactly_when_it_does_not_fit_its_annotation(
    data: st.DataObject,
) -> None:
    kind = data.draw(kinds(), label="annotation")
    assume(not float_beside_an_int_literal(kind))
    probe = probe_of(kind)
    try:
        argument_schema(probe, "probe")
    except AdapterError as exc:  # msgspec allows one array-like, one object-like member
        unsupported = str(exc)
    else:
        unsupported = ""
    assume("Type unions may not contain more than one" not in unsupported)
    assert unsupported == ""
    value = data.draw(st.one_of(fitting(kind), JSON), label="value")
    problem = argument_problem(Tool(name="probe", fn=probe), {"x": value})
    assert (problem is None) == fits(value, kind), problem
    if problem is None:  # strict decoding of JSON types: the tool gets the same value
        assert checked_arguments(probe, "probe", {"x": value}) == {"x": value}
    else:
        assert problem.startswith(NOT_FIT % "x")


# --- tools that cannot be described: an error at load time naming the tool -----------------------


@pytest.fixture
def tools_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A tools module file of its own name, importable (one per test: none is cached)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / f"bad_tools_{uuid.uuid4().hex[:8]}.py"
    yield path
    sys.modules.pop(path.stem, None)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "def fetch(item: Missing) -> None: ...",
            "tool 'fetch': its annotations do not resolve"
            " (NameError: name 'Missing' is not defined)",
        ),
        (
            "from pathlib import Path\ndef fetch(path: Path) -> None: ...",
            "tool 'fetch': parameter 'path' is annotated Path, a type its JSON arguments cannot be"
            " checked against (TypeError: type <class 'pathlib.Path'> is not supported)",
        ),
        (
            "def fetch(a: list[int] | list[str]) -> None: ...",
            "tool 'fetch': parameter 'a' is annotated list[int] | list[str]",
        ),
        (
            "import dataclasses\n@dataclasses.dataclass\nclass Item:\n    x: 'Nowhere'\n"
            "def fetch(item: Item) -> None: ...",
            "tool 'fetch': parameter 'item' is annotated Item, a type its JSON arguments cannot"
            " be checked against (NameError: name 'Nowhere' is not defined)",
        ),
        (
            "def fetch(a: int, /) -> None: ...",
            "tool 'fetch': parameter 'a' is positional-only, but a model names every argument",
        ),
    ],
    ids=["unresolved", "unsupported", "ambiguous_union", "nested_unresolved", "positional_only"],
)
def test_a_tool_that_cannot_be_described_is_refused_when_loaded(
    tools_module: Path, source: str, expected: str
) -> None:
    header = (
        "from __future__ import annotations\nfrom fsm_agent.runtime.tools import ToolRegistry\n"
    )
    register = "\nTOOLS = ToolRegistry()\nTOOLS.tool()(fetch)\n"
    tools_module.write_text(header + textwrap.dedent(source) + register)
    with pytest.raises(AdapterError) as raised:
        load_tools(tools_module.stem)
    assert expected in str(raised.value)


def test_a_type_defined_after_its_tool_is_fine(tools_module: Path) -> None:
    tools_module.write_text(
        "from __future__ import annotations\nimport dataclasses\n"
        "from fsm_agent.runtime.tools import ToolRegistry\nTOOLS = ToolRegistry()\n"
        "@TOOLS.tool()\ndef fetch(item: Item) -> None: ...\n"
        "@dataclasses.dataclass\nclass Item:\n    x: int\n"
    )
    [spec] = describe_tools(load_tools(tools_module.stem), ["fetch"])
    assert spec.parameters["properties"]["item"] == {"$ref": "#/$defs/Item"}


def test_a_run_with_such_a_tool_stops_before_anything_runs(tmp_path: Path) -> None:
    def fetch(item: Missing) -> None: ...  # type: ignore[name-defined]  # noqa: F821

    registry = ToolRegistry((Tool(name="fetch", fn=fetch),))
    with pytest.raises(AdapterError, match="tool 'fetch': its annotations do not resolve"):
        run(
            "agent_loop",
            task="t",
            model=lambda prompt: None,
            tools=registry,
            allow=("fetch",),
            store=tmp_path / "j.db",
            record_path=tmp_path / "r.json",
        )
    assert not (tmp_path / "j.db").exists()
    assert not (tmp_path / "r.json").exists()


# --- end to end, through the OpenAI-compatible lane ---------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[ModelServer]:
    with ms.model_server() as s:
        yield s


def test_a_wrongly_typed_call_is_refused_the_model_told_why_and_a_corrected_one_runs(
    server: ModelServer, tmp_path: Path
) -> None:
    server.play(
        tool_call("search", {"query": 5}),
        tool_call("search", {"query": "lab", "limit": 2}),
        answer("the lab note"),
    )
    record = run(
        load_machine("agent_loop"),
        task="Find the lab note",
        model=OpenAIChatModel("test-model", Endpoint(base_url=server.base_url)),
        **granted(load_tools("tests.fixture_typed_tools")),
        store=tmp_path / "j.db",
        record_path=tmp_path / "r.json",
    )
    assert (record.halt_reason.value, record.answer) == ("completed", "the lab note")
    assert [c.args for c in record.tool_calls] == [{"query": "lab", "limit": 2}]  # one made

    advertised = {t["function"]["name"]: t["function"] for t in server.requests[0]["body"]["tools"]}
    assert advertised["search"]["parameters"] == SEARCH_SCHEMA
    assert advertised["search"]["description"] == "Search the notes for a query."
    assert advertised["order"]["parameters"]["$defs"]["Line"]["additionalProperties"] is False

    told = json.dumps(server.requests[1]["body"]["messages"])
    assert "argument 'query' does not fit its type: Expected `str`, got `int`" in told
    assert "search was not called" in told

    store = SqliteStore(tmp_path / "j.db")
    try:
        outcomes = [e.facts.tool for e in store.events(record.run_id) if e.facts and e.facts.tool]
    finally:
        store.close()
    refused, made = outcomes[0], outcomes[-1]
    assert (refused.status, refused.retryable, refused.side_effect) == ("failed", True, False)
    assert refused.args == {"query": 5}  # journaled as the model sent it
    assert refused.error.startswith(
        "arguments refused before the call: argument 'query' does not fit its type"
    )
    assert refused.error.endswith("; search was not called")
    assert made.observation == {"hit": "the lab note", "limit": 2, "mode": "exact", "tags": []}
    assert_replays(tmp_path / "j.db", record.run_id)
