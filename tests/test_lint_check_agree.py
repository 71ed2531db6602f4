"""`lint` and `check` never disagree: one finding, one source (issue 26.2).

Over a generated family of mutants of the shipped machines (guards dropped or swapped on the
edges into done, a new answer edge into done, retry marks and retry meters dropped, failure
edges back to drafting without `retry: true`, the local halt check dropped or changed), each
linted and checked through their own entry points, with and without the machine's tools:

- a receipt finding (HP001, HP003, HP006) exists for an edge iff `check` refutes `receipts`
  naming that edge under that rule, and `receipts` is refuted only with such a cause;
- HP004, HP010 and HX006 likewise for `privileged`;
- one cause is one finding: no CK003 or CK004 beside the rule that names the cause, and an
  edge a rule reports is not also listed dead;
- lint reports the same rule findings with and without `check` (CK findings aside).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm_agent.checking.checker import check_machine, privileged_possible
from fsm_agent.declaration.lint import Finding, lint
from fsm_agent.declaration.load import parse_machine
from fsm_agent.declaration.policy import default_policy_path, load_policy
from fsm_agent.declaration.spec import FAILURE_TRIGGERS
from fsm_agent.errors import MachineSpecError
from fsm_agent.runtime.tools import ToolRegistry, load_tools

ROOT = Path(__file__).resolve().parent.parent
#: base -> (the shipped declaration, the tools modules it is linted and checked with)
BASES = {
    "agent_loop": (
        ROOT / "machines" / "agent_loop.yaml",
        (None, "fsm_agent.examples.halt_lab.tools"),
    ),
    "payments": (
        ROOT / "examples" / "payments_retry" / "payments.yaml",
        (None, "fsm_agent.examples.payments_retry.tools"),
    ),
    # a machine a person's decisions continue (edges out of handoff, approvals)
    "approvals": (
        ROOT / "tests" / "approval_fixtures" / "shop.yaml",
        (None, "tests.fixture_approvals"),
    ),
}
USER = "tests.fixture_guards:always_true"
#: guards an edge into done is given instead of its own
DONE_GUARDS = (
    [], ["answer_grounded"], ["goal_satisfied"], ["receipts_complete"], ["evidence_complete"],
    ["judge_agrees"], [USER], [USER, "answer_grounded"], ["not receipts_complete"],
    ["goal_satisfied", USER], ["evidence_complete", "judge_agrees"],
)  # fmt: skip
RECEIPT_RULES = frozenset({"HP001", "HP003", "HP006"})
PRIVILEGED_RULES = frozenset({"HP004", "HP010", "HX006"})

Edges = list[dict[str, Any]]
#: a mutation's name, and what it does to a declaration's transitions
Mutation = tuple[str, Callable[[Edges], None]]


def _replace(i: int, **changes: Any) -> Callable[[Edges], None]:
    def apply(edges: Edges) -> None:
        edge = {k: v for k, v in edges[i].items() if k not in changes}
        edge.update({k: v for k, v in changes.items() if v is not None})
        edges[i] = edge

    return apply


def _insert(i: int, edge: dict[str, Any]) -> Callable[[Edges], None]:
    return lambda edges: edges.insert(i, edge)


def _drop(i: int) -> Callable[[Edges], None]:
    def apply(edges: Edges) -> None:
        del edges[i]

    return apply


def mutations(edges: Edges) -> Iterator[Mutation]:
    """Every single mutation of the family, named, for a declaration's transitions."""
    for i, e in enumerate(edges):
        guards = list(e.get("guards", []))
        if e["dest"] == "done":
            for k, g in enumerate(guards):
                yield f"{i}: drop {g}", _replace(i, guards=guards[:k] + guards[k + 1 :] or None)
            for gs in DONE_GUARDS:
                yield f"{i}: guards {gs}", _replace(i, guards=gs or None)
        if e.get("retry"):
            yield f"{i}: no retry mark", _replace(i, retry=None)
            metered = [g for g in guards if g != "retries_left"]
            yield f"{i}: no retries_left", _replace(i, guards=metered or None)
        if guards == ["not privileged_cleared"]:
            yield f"{i}: no local halt check", _drop(i)
            yield f"{i}: halt_lane_local check", _replace(i, guards=["not halt_lane_local"])
        if e["trigger"] in FAILURE_TRIGGERS:
            back = {"trigger": e["trigger"], "source": e["source"], "dest": "drafting"}
            yield f"{i}: uncounted {e['trigger']}", _insert(i, back)
            yield (
                f"{i}: uncounted {e['trigger']} guarded",
                _insert(i, {**back, "guards": ["retries_left"]}),
            )
    first = next(i for i, e in enumerate(edges) if e["trigger"] == "answer")
    for gs in DONE_GUARDS:
        edge = {"trigger": "answer", "source": "drafting", "dest": "done", "halt": "completed"}
        yield f"new answer edge {gs}", _insert(first, {**edge, **({"guards": gs} if gs else {})})


def document(base: str) -> dict[str, Any]:
    """The base declaration under small budgets (agreement does not depend on their size)."""
    doc = yaml.safe_load(BASES[base][0].read_text(encoding="utf-8"))
    doc["budgets"].update(max_steps=2, max_retries=1)
    return doc


def mutant(base: str, apply: Callable[[Edges], None]) -> str:
    doc = copy.deepcopy(document(base))
    apply(doc["transitions"])
    return yaml.safe_dump(doc, sort_keys=False)


_TOOLS: dict[str, ToolRegistry] = {}


def tools_of(module: str | None) -> ToolRegistry | None:
    if module is None:
        return None
    if module not in _TOOLS:
        _TOOLS[module] = load_tools(module)
    return _TOOLS[module]


def _blamed(findings: list[Finding], rules: frozenset[str]) -> set[tuple[str, int]]:
    return {(f.code, int(f.key.split("[")[1].split("]")[0])) for f in findings if f.code in rules}


def assert_agree(base: str, text: str, module: str | None) -> dict[str, int]:
    """Lint and check `text` (a declaration next to `base`'s) through their own entry
    points and hold them to the module's claims; returns the rule findings by code."""
    source = str(BASES[base][0].parent / "mutant.yaml")
    try:
        spec = parse_machine(text, source=source)
    except MachineSpecError:  # a mutant the loader refuses (a state left without a way out)
        return {}
    policy = load_policy(spec.policy_path() or default_policy_path())
    tools = tools_of(module)
    findings = lint(spec, policy, tools=tools, check=True)
    report = check_machine(spec, privileged_possible=privileged_possible(spec, tools), growth=False)
    verdicts = {v.name: v for v in report.verdicts}
    for name, rules in (("receipts", RECEIPT_RULES), ("privileged", PRIVILEGED_RULES)):
        v = verdicts[name]
        named = {(c.code, c.transition) for c in v.causes}
        assert _blamed(findings, rules) == named, (name, text)
        assert v.proven == (not named), (name, v.summary, text)  # refuted only with a cause
    codes = [f.code for f in findings]
    assert not {"CK003", "CK004"} & set(codes), text
    dead = verdicts["dead"]
    for code, i in _blamed(findings, RECEIPT_RULES | PRIVILEGED_RULES):
        assert dead.proven or f"transition {i} " not in dead.summary, (code, i, dead.summary)
    rules = [f for f in findings if not f.code.startswith("CK")]
    assert lint(spec, policy, tools=tools) == rules  # the same without check
    out: dict[str, int] = {}
    for code in codes:
        out[code] = out.get(code, 0) + 1
    return out


FAMILY = [
    (base, module, name, apply)
    for base, (_, modules) in BASES.items()
    for name, apply in mutations(document(base)["transitions"])
    for module in modules
]
#: every third member of the family by default, every one with `-m slow`
SAMPLES = [3, pytest.param(1, marks=pytest.mark.slow)]


@pytest.mark.parametrize("every", SAMPLES, ids=["sample", "all"])
def test_lint_and_check_agree_on_every_mutant(every: int) -> None:
    seen: dict[str, int] = {}
    for base, module, _, apply in FAMILY[::every]:
        for code, n in assert_agree(base, mutant(base, apply), module).items():
            seen[code] = seen.get(code, 0) + n
    # the family exercises every rule check decides and lint reports
    assert set(seen) >= RECEIPT_RULES | PRIVILEGED_RULES, seen


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), base=st.sampled_from(sorted(BASES)))
def test_lint_and_check_agree_on_combined_mutants(data: st.DataObject, base: str) -> None:
    """Two or three mutations at once, each drawn from the family of the edges the ones
    before left."""
    doc = copy.deepcopy(document(base))
    for _ in range(data.draw(st.integers(2, 3), label="how many")):
        _, apply = data.draw(st.sampled_from(list(mutations(doc["transitions"]))))
        apply(doc["transitions"])
    module = data.draw(st.sampled_from(BASES[base][1]), label="tools")
    assert_agree(base, yaml.safe_dump(doc, sort_keys=False), module)


@pytest.mark.parametrize(("base", "module"), [(b, m) for b, (_, ms) in BASES.items() for m in ms])
def test_the_shipped_machines_pass_both(base: str, module: str | None) -> None:
    """As shipped (their own budgets): no finding, every property proven."""
    path, _ = BASES[base]
    spec = parse_machine(path.read_text(encoding="utf-8"), source=str(path))
    policy = load_policy(spec.policy_path() or default_policy_path())
    tools = tools_of(module)
    assert lint(spec, policy, tools=tools, check=True) == []
    assert check_machine(spec, privileged_possible=privileged_possible(spec, tools)).proven
