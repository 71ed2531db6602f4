"""The linter: one failing and one passing fixture per rule (exact code and line), the seed
000 decision-table rows a linter can decide, the canonical machines linting clean, and the
coverage table naming every red flag and exit criterion exactly once.

A fixture marks the line a finding must point at with a trailing `# <- CODE` comment.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from fsm_agent.declaration.lint import (
    CHECKLIST,
    COVERAGE,
    RULES,
    Finding,
    format_findings,
    lint,
    lint_paths,
    policy_finding,
)
from fsm_agent.declaration.load import load_machine, machine_path
from fsm_agent.declaration.policy import PolicyError, default_policy_path, load_policy, parse_policy
from fsm_agent.errors import InvalidInputError, MachineSpecError
from fsm_agent.runtime.lanes import Lane
from fsm_agent.runtime.tools import Tool, ToolRegistry, ToolResult, load_tools

FIXTURES = Path(__file__).parent / "lint_fixtures"
SHIPPED = str(default_policy_path())
PAYMENTS = str(Path(__file__).parent.parent / "examples" / "payments_retry" / "payments.yaml")
SHIPPED_TEXT = Path(SHIPPED).read_text(encoding="utf-8")
MARKER = re.compile(r"#\s*<-\s*(H[PX]\d{3})\s*$")


def _noop() -> ToolResult:
    return ToolResult()


def privileged_tools() -> ToolRegistry:
    """`capture` is privileged on a local lane; `free_capture` is privileged on a free server."""
    return ToolRegistry(
        (
            Tool(name="capture", fn=_noop, privileged=True),
            Tool(
                name="free_capture",
                fn=_noop,
                privileged=True,
                lane=Lane(kind="free_server", tier="free"),
            ),
            Tool(name="lookup", fn=_noop),
        )
    )


def local_privileged_tools() -> ToolRegistry:
    """`capture` is privileged on a local lane; nothing runs on a free lane."""
    return ToolRegistry(
        (Tool(name="capture", fn=_noop, privileged=True), Tool(name="lookup", fn=_noop))
    )


def plain_tools() -> ToolRegistry:
    """No privileged tool at all."""
    return ToolRegistry((Tool(name="lookup", fn=_noop),))


Tools = Callable[[], ToolRegistry] | None
#: rule code -> (machine, policy, tools) of its failing and passing fixtures ("{}" is fail or
#: pass). `agent_loop` is the canonical machine; SHIPPED is machines/halt-policy.yml.
PAIRS: dict[str, tuple[str, str | None, Tools]] = {
    "HP001": ("HP001-{}.yaml", SHIPPED, None),
    "HP002": ("agent_loop", "HP002-{}.policy.yml", None),
    "HP003": ("HP003-{}.yaml", SHIPPED, None),
    "HP004": ("HP004-{}.yaml", SHIPPED, None),
    "HP005": ("agent_loop", "HP005-{}.policy.yml", None),
    "HP006": ("HP006-{}.yaml", SHIPPED, None),
    "HP009": ("HP009-{}.yaml", SHIPPED, privileged_tools),
    "HP010": ("HP010-{}.yaml", SHIPPED, local_privileged_tools),
    "HX005": ("agent_loop", "HX005-{}.policy.yml", None),
    "HX006": ("HX006-{}.yaml", SHIPPED, None),
}
#: Further failing fixtures, for rules that check more than one thing.
MORE_FAILS: list[tuple[str, str, str | None, Tools]] = [
    ("HP002", "agent_loop", "HP002-fail-missing.policy.yml", None),
    ("HP002", "agent_loop", "HP002-fail-unknown-key.policy.yml", None),
    ("HP002", "agent_loop", "HP002-fail-draft.policy.yml", None),
    ("HP003", "agent_loop", "HP003-fail.policy.yml", None),
    ("HP004", "agent_loop", "HP004-fail.policy.yml", None),
    ("HP006", "HP006-fail-negated.yaml", SHIPPED, None),
    ("HX005", "HX005-fail-nopolicy.yaml", None, privileged_tools),
]


def fixture(name: str | None) -> str | None:
    """A fixture's path; the canonical machine, the shipped policy and None pass through."""
    if name is None or name == "agent_loop" or name == SHIPPED:
        return name
    return str(FIXTURES / name)


def pair(code: str, side: str) -> tuple[str, str | None, Tools]:
    """(machine, policy, tools) of a rule's failing or passing fixture."""
    machine, policy, tools = PAIRS[code]
    m, p = fixture(machine.format(side)), fixture(policy and policy.format(side))
    assert m is not None
    return m, p, tools


def marked(*paths: str | None) -> tuple[str, int]:
    """The one (file, line) across `paths` that carries a `# <- CODE` marker."""
    found = []
    for ref in paths:
        if ref is None:
            continue
        path = str(machine_path(ref))
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        found += [(path, n) for n, text in enumerate(lines, start=1) if MARKER.search(text)]
    assert len(found) == 1, f"expected exactly one marker, found {found}"
    return found[0]


def run_lint(machine: str, policy: str | None, tools: Tools) -> list[Finding]:
    return lint_paths(machine, policy, tools=tools() if tools else None)


@pytest.mark.parametrize("code", sorted(PAIRS))
def test_failing_fixture_gives_exactly_its_rule_at_the_marked_line(code: str) -> None:
    machine, policy, tools = pair(code, "fail")
    findings = run_lint(machine, policy, tools)
    source, line = marked(machine, policy)
    assert [(f.code, f.source, f.line) for f in findings] == [(code, source, line)]
    assert findings[0].title == RULES[code]


@pytest.mark.parametrize("code", sorted(PAIRS))
def test_passing_fixture_is_clean(code: str) -> None:
    assert run_lint(*pair(code, "pass")) == []


@pytest.mark.parametrize(
    ("code", "machine", "policy", "tools"),
    MORE_FAILS,
    ids=[c[2] if c[2] and c[2] != SHIPPED else c[1] for c in MORE_FAILS],
)
def test_more_failing_fixtures(code: str, machine: str, policy: str | None, tools: Tools) -> None:
    m, p = fixture(machine), fixture(policy)
    assert m is not None
    findings = run_lint(m, p, tools)
    source, line = marked(m, p)
    assert [(f.code, f.source, f.line) for f in findings] == [(code, source, line)]


def test_there_is_a_fixture_pair_for_every_rule_and_every_fixture_is_used() -> None:
    assert set(PAIRS) == set(RULES)
    used = {
        n.format(k) for m, p, _ in PAIRS.values() for n in (m, p) if n for k in ("fail", "pass")
    }
    used |= {n for _, m, p, _ in MORE_FAILS for n in (m, p) if n}
    on_disk = {p.name for p in FIXTURES.iterdir()} - {"all-local.policy.yml"}
    assert on_disk <= {Path(n).name for n in used}


# --- the canonical declarations ----------------------------------------------------------


@pytest.mark.parametrize(
    ("machine", "tools"),
    [
        ("agent_loop", None),
        ("agent_loop", "fsm_agent.examples.halt_lab.tools"),
        ("agent_loop", "fsm_agent.examples.stop_conditions.tools"),
        (PAYMENTS, None),
        (PAYMENTS, "fsm_agent.examples.payments_retry.tools"),
    ],
    ids=[
        "agent_loop",
        "agent_loop+halt_lab",
        "agent_loop+stop_conditions",
        "payments",
        "payments+tools",
    ],
)
@pytest.mark.parametrize(
    "policy", [SHIPPED, str(FIXTURES / "all-local.policy.yml")], ids=["shipped", "all-local"]
)
def test_canonical_machines_lint_clean_with_a_policy(
    machine: str, tools: str | None, policy: str
) -> None:
    registry = load_tools(tools) if tools else None
    assert lint_paths(machine, policy, tools=registry) == []


def test_without_a_policy_a_privileged_tool_is_a_finding() -> None:
    payments = load_tools("fsm_agent.examples.payments_retry.tools")
    findings = lint_paths(PAYMENTS, None, tools=payments)
    lines = Path(PAYMENTS).read_text(encoding="utf-8").splitlines()
    tools_line = lines.index("tools: [capture_payment]") + 1
    assert [(f.code, f.line) for f in findings] == [("HX005", tools_line)]
    assert "capture_payment" in findings[0].message
    # no privileged tool in the registry: nothing to hold to a policy
    assert (
        lint_paths("agent_loop", None, tools=load_tools("fsm_agent.examples.halt_lab.tools")) == []
    )


# --- what the rules assume when they cannot see the tools ---------------------------------


def test_without_a_registry_every_tool_counts_as_privileged() -> None:
    findings = lint_paths(str(FIXTURES / "HP010-fail.yaml"), SHIPPED)
    assert [f.code for f in findings] == ["HP010"]
    assert "no tool registry given" in findings[0].message


def test_a_registry_without_privileged_tools_needs_no_halt_check_edge() -> None:
    assert lint_paths(str(FIXTURES / "HP010-fail.yaml"), SHIPPED, tools=plain_tools()) == []


def test_a_privileged_tool_left_off_the_allow_list_is_not_linted() -> None:
    # HP009-pass allow-lists only `capture`: `free_capture` on its free server cannot be called
    assert lint_paths(str(FIXTURES / "HP009-pass.yaml"), SHIPPED, tools=privileged_tools()) == []


def test_free_lane_of_a_privileged_tool_needs_the_registry() -> None:
    assert lint_paths(str(FIXTURES / "HP009-fail.yaml"), SHIPPED) == []


# --- seed 000's decision table, the rows a linter decides -----------------------------------


def test_row_model_emits_done_true_ignore_and_read_receipts_only() -> None:
    # a machine whose drafting reply reaches done without receipts is refused before deploy
    assert [f.code for f in lint_paths(str(FIXTURES / "HP001-fail.yaml"), SHIPPED)] == ["HP001"]


def test_row_206_with_an_empty_id_does_not_halt_done_needs_a_receipt_guard() -> None:
    findings = lint_paths(str(FIXTURES / "HP006-fail.yaml"), SHIPPED)
    assert [f.code for f in findings] == ["HP006"]
    assert "goal_satisfied" in findings[0].message


def test_row_retries_left_hits_zero_halts_as_failure() -> None:
    # a retry edge must stop at the budget; the fallback edge then halts as a failure
    assert [f.code for f in lint_paths(str(FIXTURES / "HP004-fail.yaml"), SHIPPED)] == ["HP004"]
    spec = load_machine(str(FIXTURES / "HP004-pass.yaml"))
    fallback = spec.candidates("drafting", "rejected")[-1]
    assert (fallback.dest, fallback.guards) == ("handoff", ())


def test_row_router_key_missing_fails_closed() -> None:
    findings = lint_paths("agent_loop", str(FIXTURES / "HP002-fail-missing.policy.yml"))
    assert [(f.code, f.key) for f in findings] == [("HP002", "$.routing.missing_target")]


def test_row_schema_invalid_no_free_voter() -> None:
    findings = lint_paths("agent_loop", str(FIXTURES / "HP005-fail.policy.yml"))
    assert [(f.code, f.key) for f in findings] == [("HP005", "$.control_plane.schema_repair_vote")]


# --- policies built in code, and policy errors as findings -----------------------------------


@pytest.mark.parametrize(
    ("section", "key", "value", "code"),
    [
        ("control_plane", "halt", "allow_free_lane", "HP003"),
        ("control_plane", "retry_budget", "allow_free_lane", "HP004"),
        ("control_plane", "schema_repair_vote", "allow_free_lane", "HP005"),
        ("routing", "missing_target", "default_free_lane", "HP002"),
        ("routing", "privileged_tools_require", "none", "HX005"),
        ("data_plane", "draft", "allow_free_server", "HP002"),
    ],
)
def test_a_policy_built_in_code_is_checked_too(
    section: str, key: str, value: str, code: str
) -> None:
    shipped = load_policy(SHIPPED)
    bad = attrs.evolve(
        shipped, **{section: attrs.evolve(getattr(shipped, section), **{key: value})}
    )
    findings = lint(load_machine("agent_loop"), bad)
    assert [(f.code, f.key) for f in findings] == [(code, f"$.{section}.{key}")]
    assert (findings[0].source, findings[0].line) == (SHIPPED, bad.line_of(f"$.{section}.{key}"))


def test_a_policy_built_in_code_has_no_line() -> None:
    shipped = load_policy(SHIPPED)
    bad = attrs.evolve(shipped, control_plane=attrs.evolve(shipped.control_plane, halt="x"))
    code_only = type(shipped)(bad.control_plane, bad.data_plane, bad.routing)
    (finding,) = lint(load_machine("agent_loop"), code_only)
    assert (finding.source, finding.line) == ("<policy>", None)
    assert str(finding).startswith("<policy>: HP003 unknown value 'x'")
    assert str(finding).endswith(f" @ $.control_plane.halt ({RULES['HP003']})")


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("control_plane: [", "HP002"),  # not YAML
        ("- a list", "HP002"),  # not a mapping
        (SHIPPED_TEXT.replace("halt: local_only", "halt: on_a_prompt"), "HP003"),
    ],
    ids=["not-yaml", "not-a-mapping", "bad-halt-value"],
)
def test_policy_errors_become_findings(text: str, code: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "p.yml")
    assert policy_finding(info.value).code == code


def test_an_invalid_machine_is_an_error_not_a_finding(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n", encoding="utf-8")
    with pytest.raises(MachineSpecError):
        lint_paths(str(bad), SHIPPED)


# --- output ----------------------------------------------------------------------------------


def test_text_output_reads_like_a_linter() -> None:
    path, line = marked(str(FIXTURES / "HP001-fail.yaml"))
    out = format_findings(lint_paths(path, SHIPPED))
    assert re.fullmatch(
        re.escape(path) + f":{line}" + r": HP001 success decided by the model's reply: .+"
        r" @ \$\.transitions\[0\] \(red flag 1: The drafting model also returns a done flag\)\n",
        out,
    )
    assert format_findings([]) == ""


def test_json_output_carries_every_field() -> None:
    findings = lint_paths(str(FIXTURES / "HP004-fail.yaml"), SHIPPED)
    (item,) = json.loads(format_findings(findings, "json"))
    assert item == {
        "code": "HP004",
        "message": findings[0].message,
        "source": str(FIXTURES / "HP004-fail.yaml"),
        "line": 13,
        "key": "$.transitions[2].retry",
        "title": RULES["HP004"],
    }
    assert json.loads(format_findings([], "json")) == []


def test_unknown_format_is_invalid_input() -> None:
    with pytest.raises(InvalidInputError, match="unknown format"):
        format_findings([], "xml")  # type: ignore[arg-type]


def test_findings_are_sorted_by_file_and_line() -> None:
    machine, policy = FIXTURES / "HP010-fail.yaml", FIXTURES / "HP005-fail.policy.yml"
    findings = lint_paths(str(machine), str(policy))
    assert [(f.code, f.source) for f in findings] == [
        ("HP005", str(policy)),
        ("HP010", str(machine)),
    ]


# --- the coverage table ------------------------------------------------------------------------

ALL_CODES = [f"HP{n:03d}" for n in range(1, 11)] + [f"HX{n:03d}" for n in range(1, 9)]


def test_coverage_lists_every_red_flag_and_exit_criterion_exactly_once() -> None:
    assert list(COVERAGE) == ALL_CODES
    for code in ALL_CODES:
        kind = "red flag" if code.startswith("HP") else "exit criterion"
        assert CHECKLIST[code].startswith(f"{kind} {int(code[2:])}: ")
        assert COVERAGE[code].startswith(f"{CHECKLIST[code]} → ")
    labels = [CHECKLIST[c].split(":")[0] for c in ALL_CODES]
    assert len(set(labels)) == 18


def test_every_code_is_a_rule_or_says_what_makes_it_impossible() -> None:
    for code in ALL_CODES:
        how = COVERAGE[code].split(" → ", 1)[1]
        if code in RULES:
            assert how.startswith(f"lint {code}")
        else:
            assert how.startswith(("impossible at runtime", "test:")), code
    assert set(RULES) < set(COVERAGE)


def test_the_canonical_machine_is_the_local_halt_shape() -> None:
    # what HP010 looks for, on the canonical declaration: the refusal comes first
    candidates = load_machine("agent_loop").candidates("drafting", "tool_call")
    assert ("not privileged_cleared",) in [c.guards for c in candidates[:-1]]
    assert candidates[-1].dest == "tool_pending"
