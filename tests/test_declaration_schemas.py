"""The declaration schemas: the shipped files are the generated ones, every shipped machine and
policy validates against them (by `jsonschema`, a real validator), and the loaders agree with
them: whatever the schema refuses the loader refuses, and whatever the loader refuses beyond
the schema is one of its documented semantic checks (`spec_check.LOADER_ONLY`)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import jsonschema
import msgspec
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec import Meta

from fsm_agent.cli.main import cli
from fsm_agent.declaration import check as spec_check
from fsm_agent.declaration.check import LOADER_ONLY, Validator
from fsm_agent.declaration.documents import (
    KINDS,
    BudgetsDocument,
    MachineDocument,
    StateDocument,
    TransitionDocument,
    declaration_schema,
    field_names,
    schema_text,
)
from fsm_agent.declaration.policy import PolicyError, parse_policy
from fsm_agent.declaration.yamlsource import LineIndex
from fsm_agent.errors import MachineSpecError
from fsm_agent.halt import HaltReason
from fsm_agent.runtime.budgets import BUDGET_NAMES, MAX_BUDGET
from fsm_agent.runtime.guards import BUILTIN_GUARDS
from tests.conftest import MINIMAL_MACHINE
from tests.test_spec import ERROR_CASES

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "machines"
DECLARATIONS = sorted(
    p for folder in ("machines", "examples") for p in (ROOT / folder).rglob("*.y*ml")
)
LINT_FIXTURES = sorted((ROOT / "tests" / "lint_fixtures").glob("*.y*ml"))


def kind_of(path: Path) -> str:
    return "policy" if "policy" in path.name else "machine"


def validator(kind: str) -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMAS / KINDS[kind][1]).read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


MACHINE_SCHEMA = validator("machine")
POLICY_SCHEMA = validator("policy")


def schema_errors(kind: str, data: Any) -> list[str]:
    found = (MACHINE_SCHEMA if kind == "machine" else POLICY_SCHEMA).iter_errors(data)
    return [f"{e.json_path}: {e.message}" for e in found]


def loader_error(data: Any) -> MachineSpecError | None:
    """The machine loader's verdict on loaded YAML (its checks and its structural check)."""
    try:
        Validator(data, LineIndex("", "mutated.yaml")).build("")
    except MachineSpecError as exc:
        return exc
    return None


def policy_error(text: str) -> PolicyError | None:
    """The policy loader's verdict on a policy file's text."""
    try:
        parse_policy(text, "mutated.policy.yml")
    except PolicyError as exc:
        return exc
    return None


def loader_only(detail: str) -> bool:
    return any(fragment in detail for fragment, _ in LOADER_ONLY)


def assert_agree(data: Any) -> None:
    """Schema refuses => loader refuses; loader refuses alone => a documented semantic check."""
    refused = schema_errors("machine", data)
    err = loader_error(data)
    if refused:
        assert err is not None, f"the schema refuses {refused} but the loader accepts"
    elif err is not None:
        assert loader_only(err.detail), f"only the loader refuses, undocumented: {err}"


# --- the shipped files ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_shipped_schema_is_the_generated_one(kind: str) -> None:
    filename = KINDS[kind][1]
    shipped = (SCHEMAS / filename).read_text(encoding="utf-8")
    assert shipped == schema_text(kind), (
        f"machines/{filename} is stale; regenerate it with:"
        f" fsm-agent schema {kind} -o machines/{filename}"
    )
    schema = json.loads(shipped)
    assert schema["$id"] == f"urn:fsm-agent:schema:{filename}"
    assert schema["title"]
    assert schema["description"]
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_schema_uses_nothing_newer_than_draft_07(kind: str) -> None:
    """Editors support draft-07 fully: a `$ref` there ignores its siblings, and the newer
    keywords do not exist."""
    newer = {"$dynamicRef", "$anchor", "unevaluatedProperties", "dependentSchemas", "prefixItems"}

    def walk(node: Any) -> list[str]:
        if isinstance(node, list):
            return [problem for sub in node for problem in walk(sub)]
        if not isinstance(node, dict):
            return []
        problems = sorted(newer & set(node))
        if "$ref" in node and len(node) > 1:
            problems.append(f"$ref beside {sorted(node)}")
        return problems + [problem for sub in node.values() for problem in walk(sub)]

    schema = declaration_schema(kind)
    assert walk(schema) == []
    jsonschema.Draft7Validator.check_schema(schema)


def test_every_property_is_described() -> None:
    def walk(node: Any, path: str) -> list[str]:
        missing = []
        if isinstance(node, dict):
            for name, sub in node.get("properties", {}).items():
                if "description" not in sub and "$ref" not in sub:
                    missing.append(f"{path}.{name}")
            for key, sub in node.items():
                missing += walk(sub, f"{path}/{key}")
        return missing

    for kind in KINDS:
        assert walk(declaration_schema(kind), kind) == []


@pytest.mark.parametrize("path", DECLARATIONS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_declaration_validates_and_names_its_schema(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert schema_errors(kind_of(path), yaml.safe_load(text)) == []
    first = text.splitlines()[0]
    match = re.fullmatch(r"# yaml-language-server: \$schema=(\S+)", first)
    assert match, f"{path.name} does not start with its yaml-language-server schema comment"
    assert (path.parent / match.group(1)).resolve() == SCHEMAS / KINDS[kind_of(path)][1]
    # and the same comment points at the schema where the package installs both (under
    # fsm_agent/: fsm_agent/machines/, fsm_agent/examples/)
    installed = ROOT / "fsm_agent" / path.relative_to(ROOT)
    assert (installed.parent / match.group(1)).is_file()


def test_shipped_declarations_are_found() -> None:
    names = {p.name for p in DECLARATIONS}
    assert {"agent_loop.yaml", "halt-policy.yml", "payments.yaml"} <= names


def test_the_budget_type_declares_exactly_the_budget_names() -> None:
    assert [f.name for f in msgspec.structs.fields(BudgetsDocument)] == list(BUDGET_NAMES)


def test_halt_reasons_in_the_schema_are_the_enum() -> None:
    defs = declaration_schema("machine")["$defs"]
    assert set(defs["HaltReason"]["enum"]) == {r.value for r in HaltReason}


# --- the loader's own refusals ------------------------------------------------------------------

#: The loader refusals in tests/test_spec.py that the schema also refuses (the others are
#: semantic: in `LOADER_ONLY`).
STRUCTURAL = {
    "guards-not-a-list-of-names",
    "budget-negative",
    "budget-zero",
    "budget-non-numeric",
    "budget-quoted-number",
    "budget-boolean",
    "budget-nan",  # max_steps is an integer; a NaN max_cost is loader-only
    "budget-fractional-steps",
    "budget-infinite-cost",
    "budget-unknown-name",
    "budget-missing",
    "budgets-block-missing",
    "unknown-top-level-key",
    "unknown-transition-key",
    "halt-reason-outside-the-enum",
    "name-missing",
    "thrash-limit-negative",
    "tools-not-a-list",
}


@pytest.mark.parametrize("case", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_each_loader_refusal_is_structural_or_documented_semantic(case: Any) -> None:
    name, mutate, *_ = case
    data = yaml.safe_load(mutate(MINIMAL_MACHINE))
    err = loader_error(data)
    assert err is not None
    if name in STRUCTURAL:
        assert schema_errors("machine", data), f"{name}: the schema accepts it"
    else:
        assert schema_errors("machine", data) == [], f"{name}: the schema refuses it too"
        assert loader_only(err.detail), f"{name}: not in LOADER_ONLY: {err.detail}"


class StricterMachine(MachineDocument, kw_only=True):
    """The machine type with one more constraint, as a future change might add."""

    name: Annotated[str, Meta(max_length=3)]


def test_a_constraint_added_to_the_type_is_enforced_by_the_loader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = yaml.safe_load(MINIMAL_MACHINE)  # name: minimal
    assert loader_error(data) is None
    monkeypatch.setattr(spec_check, "MachineDocument", StricterMachine)
    err = loader_error(data)
    assert err is not None
    assert err.key == "$.name"
    assert err.detail == ("Expected `str` of length <= 3 (the shape: `fsm-agent schema machine`)")


@pytest.mark.parametrize(
    ("edit", "key", "message"),
    [
        (("description", ["a", "list"]), "$.description", "description must be text"),
        (("states", "drafting", "terminal", "yes"), "$.states.drafting.terminal", "terminal must"),
        (("states", "drafting", "action", []), "$.states.drafting.action", "needs an action"),
        (("transitions", 0, "dest", ["done"]), "$.transitions[0].dest", "unknown state"),
        (("thrash_limit", 2.5), "$.thrash_limit", "thrash_limit must be a whole number"),
        (("budgets", "max_cost", 10**400), "$.budgets.max_cost", "must be at most"),
    ],
)
def test_values_of_the_wrong_shape_are_refused_with_the_key(
    edit: tuple[Any, ...], key: str, message: str
) -> None:
    data = yaml.safe_load(MINIMAL_MACHINE)
    *path, last, value = edit
    at(data, tuple(path))[last] = value
    err = loader_error(data)
    assert err is not None
    assert (err.key, message in err.detail) == (key, True)
    assert schema_errors("machine", data)


def test_a_whole_float_is_an_integer_for_the_loader_as_for_the_schema() -> None:
    data = yaml.safe_load(MINIMAL_MACHINE)
    data["thrash_limit"] = 2.0
    data["budgets"]["max_steps"] = 3.0
    assert loader_error(data) is None
    assert schema_errors("machine", data) == []


@pytest.mark.parametrize("path", LINT_FIXTURES, ids=lambda p: p.name)
def test_lint_fixtures_agree_with_the_schema(path: Path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if kind_of(path) == "machine":
        assert_agree(data)
        return
    err = policy_error(path.read_text(encoding="utf-8"))
    assert bool(schema_errors("policy", data)) == (err is not None), f"loader: {err}"


# --- mutated declarations (hypothesis) ----------------------------------------------------------

BASES = [
    yaml.safe_load(MINIMAL_MACHINE),
    yaml.safe_load((ROOT / "machines" / "agent_loop.yaml").read_text(encoding="utf-8")),
    yaml.safe_load(
        (ROOT / "examples" / "payments_retry" / "payments.yaml").read_text(encoding="utf-8")
    ),
]
#: Text without ':' (a reference would import whatever module it names) plus the names the
#: declarations use, so that mutations often land on something meaningful.
WORDS = sorted(
    {r.value for r in HaltReason}
    | set(BUILTIN_GUARDS)
    | {f"not {g}" for g in BUILTIN_GUARDS}
    | field_names(MachineDocument)
    | field_names(StateDocument)
    | field_names(TransitionDocument)
    | set(BUDGET_NAMES)
    | {"model", "tool", "receipts", "drafting", "done", "handoff", "budget_exhausted"}
    | {"budget", "answer", "tool_call", "", " ", "a" * 201, "tests.fixture_guards:always_true"}
    | {"no_such_pkg_for_fsm_tests.m:f", ":f", "x\u200ey"}
)
KNOWN_KEYS = (
    field_names(MachineDocument)
    | field_names(StateDocument)
    | field_names(TransitionDocument)
    | set(BUDGET_NAMES)
)
TEXT = st.one_of(st.sampled_from(WORDS), st.text(st.characters(exclude_characters=":")))
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=10),
    st.sampled_from([MAX_BUDGET, MAX_BUDGET + 1, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 2.0, 0.5, -1.0]),
    TEXT,
)


def containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3))


VALUES = st.recursive(SCALARS, containers, max_leaves=6)


def places(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path in a loaded document (the root excluded)."""
    out = []
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, sub in items:
        out.append((*path, key))
        out += places(sub, (*path, key))
    return out


def at(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, Any]:
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    path = draw(st.sampled_from(places(doc)))
    parent, key = at(doc, path[:-1]), path[-1]
    op = draw(st.sampled_from(["replace", "delete", "add_key", "bad_enum"]))
    if op == "replace":
        parent[key] = draw(VALUES)
    elif op == "delete":
        del parent[key]
    elif op == "add_key" and isinstance(parent, dict):
        new = draw(TEXT.filter(lambda k: k not in parent))
        parent[new] = draw(VALUES)
        known = new in KNOWN_KEYS or path[:-1] == ("states",)  # a new state, or a known key
        return ("add_key" if known else "unknown_key", doc)
    elif op == "bad_enum":
        halts = [p for p in places(doc) if p[-1] == "halt"]
        if halts:
            at(doc, draw(st.sampled_from(halts))[:-1])["halt"] = draw(
                TEXT.filter(lambda t: t not in {r.value for r in HaltReason})
            )
            return ("bad_enum", doc)
    return (op, doc)


def agree_on_mutation(case: tuple[str, Any]) -> None:
    op, doc = case
    assert_agree(doc)
    if op in {"unknown_key", "bad_enum"}:  # structural for certain: both refuse
        assert schema_errors("machine", doc)
        assert loader_error(doc) is not None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_machines_loader_and_schema_agree(case: tuple[str, Any]) -> None:
    agree_on_mutation(case)


@pytest.mark.slow
@settings(max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_machines_loader_and_schema_agree_deeply(case: tuple[str, Any]) -> None:
    agree_on_mutation(case)


POLICY = yaml.safe_load((ROOT / "machines" / "halt-policy.yml").read_text(encoding="utf-8"))


@st.composite
def mutated_policy(draw: st.DrawFn) -> Any:
    doc = copy.deepcopy(POLICY)
    path = draw(st.sampled_from(places(doc)))
    parent, key = at(doc, path[:-1]), path[-1]
    op = draw(st.sampled_from(["replace", "delete", "add_key", "swap"]))
    if op == "replace":
        parent[key] = draw(VALUES)
    elif op == "delete":
        del parent[key]
    elif op == "add_key":
        parent[draw(TEXT.filter(lambda k: k not in parent))] = draw(VALUES)
    else:  # a value that is valid somewhere else in the policy
        parent[key] = draw(st.sampled_from(["local_only", "allow_free_lane", "fail_closed"]))
    return doc


@settings(max_examples=150, deadline=None)
@given(mutated_policy())
def test_mutated_policies_loader_and_schema_agree_exactly(doc: Any) -> None:
    text = yaml.safe_dump(doc, allow_unicode=False)
    err = policy_error(text)
    assert bool(schema_errors("policy", doc)) == (err is not None), f"loader: {err}"


@given(
    st.sampled_from(BUDGET_NAMES),
    st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), TEXT),
)
def test_every_budget_value_loader_and_schema_agree(name: str, value: Any) -> None:
    doc = copy.deepcopy(BASES[0])
    doc["budgets"][name] = value
    assert (loader_error(doc) is None) == (schema_errors("machine", doc) == [])


# --- the command --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_schema_command_prints_the_shipped_file(kind: str) -> None:
    result = CliRunner().invoke(cli, ["schema", kind], catch_exceptions=False)
    assert result.exit_code == 0
    assert result.output == (SCHEMAS / KINDS[kind][1]).read_text(encoding="utf-8")


def test_schema_command_writes_a_file(tmp_path: Path) -> None:
    out = tmp_path / "machine.schema.json"
    result = CliRunner().invoke(cli, ["schema", "machine", "-o", str(out)])
    assert result.exit_code == 0
    assert result.output == f"wrote the fsm-agent machine declaration schema to {out}\n"
    assert out.read_text(encoding="utf-8") == schema_text("machine")


def test_schema_command_refuses_an_unknown_kind() -> None:
    result = CliRunner().invoke(cli, ["schema", "workflow"])
    assert result.exit_code == 2
    assert "'workflow' is not one of 'machine', 'policy'" in result.output


def test_a_schema_command_output_validates_a_declaration_outside_the_repo(tmp_path: Path) -> None:
    """What an installed user does: write the schema next to the declarations."""
    out = tmp_path / "machine.schema.json"
    subprocess.run(
        [sys.executable, "-m", "fsm_agent", "schema", "machine", "-o", str(out)], check=True
    )
    schema = json.loads(out.read_text(encoding="utf-8"))
    jsonschema.validate(yaml.safe_load(MINIMAL_MACHINE), schema)
    with pytest.raises(jsonschema.ValidationError, match="'colour' was unexpected"):
        jsonschema.validate({**yaml.safe_load(MINIMAL_MACHINE), "colour": "blue"}, schema)
