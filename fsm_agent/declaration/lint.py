"""Lint a machine declaration and its halt policy for the halt-path review's red flags and
exit criteria.

One stable code per checklist item: `HP001`-`HP010` for the ten red flags, `HX001`-`HX008`
for the eight exit criteria (`CHECKLIST`). `RULES` holds the codes that can be decided
before a run, from the declaration, the policy and (optionally) the tool registry's lanes and
privileged flags.
`COVERAGE` says, for every one of the eighteen items, which rule catches it or which runtime
refusal or test makes it impossible. Findings carry the file, the line and the key path.

Where lint and `fsm-agent check` judge the same thing, check decides and lint reports: the
receipt rules (HP001, HP003, HP006) are the edges check's `receipts` refutes, and HP004, HP010
and HX006 those its `privileged` refutes (`fsm_agent.checking.causes`), so lint explores the
machine for these even without `check`, and a refuted property that names these causes is
not reported a second time as CK003 or CK004.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, Literal

import attrs

from fsm_agent.declaration.load import load_machine
from fsm_agent.declaration.policy import Policy, PolicyError, load_policy, policy_problems
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.errors import InvalidInputError

if TYPE_CHECKING:
    from fsm_agent.checking.causes import Cause
    from fsm_agent.checking.checker import CheckReport
    from fsm_agent.declaration.yamlsource import LineIndex
    from fsm_agent.runtime.tools import ToolRegistry

#: code -> the halt-path review's checklist item, in its own words.
CHECKLIST: Final[Mapping[str, str]] = MappingProxyType(
    {
        "HP001": "red flag 1: The drafting model also returns a done flag",
        "HP002": "red flag 2: A missing router config defaults onto a free lane",
        "HP003": "red flag 3: Halt logic lives inside a prompt, not code",
        "HP004": "red flag 4: Retry budget is a suggestion inside generated JSON",
        "HP005": "red flag 5: Schema repair runs on the same free tool host",
        "HP006": "red flag 6: Success is inferred from tone, not from receipts",
        "HP007": "red flag 7: The free server stores the only trace copy",
        "HP008": "red flag 8: Operators cannot freeze routing without a full deploy",
        "HP009": "red flag 9: Loop continuation depends on a best-effort endpoint",
        "HP010": "red flag 10: Privileged tools execute before a local halt check",
        "HX001": "exit criterion 1: Halt JSON is parsed from a model response",
        "HX002": "exit criterion 2: A missing env var routes control onto free compute",
        "HX003": "exit criterion 3: Production traces exist only on a free server",
        "HX004": "exit criterion 4: Operators cannot explain halt without reading model prose",
        "HX005": "exit criterion 5: A privileged tool can run before localHalt returns",
        "HX006": "exit criterion 6: Retry budget decrements inside generated text only",
        "HX007": "exit criterion 7: CI lacks a test that refuses free-tier halt lanes",
        "HX008": "exit criterion 8: Incident review cannot replay halt from stored receipts",
    }
)

_TRACES = (
    "impossible at runtime: the journal is a SQLite file on the worker's host or a PostgreSQL"
    " server the team runs (--db), never a free server; `fsm-agent export` ships a"
    " self-contained copy off the box and --trace-copy ships one before the loop may exit. No"
    " declaration or policy names a trace store, and a policy key that tried to (`traces:`)"
    " is an unknown key and fails closed (tests/test_policy.py)"
)
_HOW: Final[Mapping[str, str]] = {
    "HP001": "lint HP001: an edge from a model state into done that a run can choose where the"
    " runtime's success rule refuses it (check's receipts, refuted for that edge). Runtime:"
    " parse_reply records `done` as ignored and no guard reads it (test_proposals,"
    " test_worker::test_done_flag_alone_never_ends_a_run_as_success)",
    "HP002": "lint HP002: routing.missing_target not fail_closed, or a policy file with a"
    " missing key, an unknown key or an unknown value. Runtime: load_policy has no defaults and"
    " raises PolicyError naming the key path; policy_refusal fails closed on a key with no target",
    "HP003": "lint HP003: an edge into done with a user guard that a run can choose where the"
    " runtime's success rule refuses it (check's receipts), or control_plane.halt not"
    " local_only. Runtime: guards are Python predicates resolved at load time (no eval, no"
    " prompt); the worker refuses a halt lane that is not a local function before the first"
    " step (HALT_PATH_REFUSED)",
    "HP004": "lint HP004: a retry edge a run can take with no retries_left passing (check's"
    " privileged), or control_plane.retry_budget not local_only. Runtime: max_retries is"
    " frozen at start, the worker counts each retry edge taken, and the parser refuses unknown"
    " reply keys (a model cannot send a budget)",
    "HP005": "lint HP005: control_plane.schema_repair_vote not local_only. Runtime: the worker"
    " refuses a non-local lane for every control key, schema_repair_vote included, before the"
    " first step; a rejected reply is retried only on a declared, guarded edge, else schema_fail",
    "HP006": "lint HP006: an edge into done from a tool, receipts or user-action state that a run"
    " can choose where the runtime's success rule refuses it (check's receipts). Runtime: every"
    " edge that halts completed carries side_effects_receipted (the loader adds it to every"
    " declaration), so no side-effecting call without complete"
    " receipts — a 2xx integer status and a non-empty id; a 206 with an empty id is not one —"
    " lets a run end done; answer_grounded needs the values an answer states to have been"
    " returned by receipted calls (a cited receipt id grounds nothing)",
    "HP007": _TRACES,
    "HP008": "impossible at runtime, not decidable statically (it is an operator's act):"
    " `fsm-agent freeze-routing` writes a flag to the store; every run reads it before each"
    " model call, journals it, and while frozen refuses a model that is not on a local lane"
    " (routing_frozen). No deploy (tests/test_operator.py)",
    "HP009": "lint HP009 (needs the tool registry): a privileged tool on a free lane or a free"
    " server. Runtime: continuation is decided by local guards only, a free halt lane is"
    " refused, and every call runs under its time cap and the wall clock",
    "HP010": "lint HP010: an edge into a tool state a run can take with a privileged tool before"
    " the local halt check passed (check's privileged; without a registry, any tool may be"
    " privileged). Runtime: the tool action runs assert_local_halt before a privileged tool"
    " (test_guards::test_privileged_tool_refused_on_free_lane_ends_as_halt_path_refused)",
    "HX001": "impossible at runtime: parse_reply turns a reply into exactly one tool call, answer,"
    " handoff request or rejection; `done` is recorded as ignored, any other key is schema_fail;"
    " only guards choose a halt (static companion: HP001)",
    "HX002": "impossible at runtime: no environment variable is read for lanes or routing"
    " (FSM_AGENT_DB names the journal, FSM_AGENT_DEBUG prints tracebacks); the control plane"
    " comes from the policy file, which has no defaults, and the worker's own defaults are"
    " local (static companion: HP002)",
    "HX003": _TRACES,
    "HX004": "impossible at runtime: the loader requires every edge into a terminal state to"
    " name a reason from the frozen HaltReason enum; each transition is journaled with its guard"
    " results and snapshot; `fsm-agent show` and `replay` explain a halt without model prose",
    "HX005": "lint HX005: routing.privileged_tools_require not local_halt, or no policy at all"
    " while a privileged tool may be called. Runtime: as red flag 10",
    "HX006": "lint HX006: a reachable edge that goes on after a failure (rejected, tool_failed,"
    " tool_timed_out, failed, timed_out) into a non-terminal state without `retry: true`, so the"
    " retry meter never decrements in code (check's privileged). Runtime: only the worker counts"
    " retries",
    "HX007": "test: tests/test_lanes_receipts.py (test_refuses_halt_when_the_lane_is_free,"
    " test_refuses_halt_when_the_host_is_a_free_server, every control key off a local lane) and"
    " tests/test_policy.py; CI (.ci/run) runs them on every change",
    "HX008": "impossible at runtime: every transition is journaled with the snapshot it was"
    " decided on, receipts included; `fsm-agent replay` re-evaluates every guard from the"
    " journal alone and proves the halt reason (tests/test_replay.py)",
}
#: Every red flag and exit criterion of the halt-path review -> the rule that catches it, or
#: what makes it impossible at runtime, or the test that keeps it out.
COVERAGE: Final[dict[str, str]] = {code: f"{CHECKLIST[code]} → {_HOW[code]}" for code in _HOW}
#: Codes with a lint rule; every other code in `COVERAGE` is a runtime refusal or a test.
_STATIC: Final = (
    "HP001", "HP002", "HP003", "HP004", "HP005", "HP006", "HP009", "HP010", "HX005", "HX006",
)  # fmt: skip
RULES: Final[Mapping[str, str]] = MappingProxyType({code: CHECKLIST[code] for code in _STATIC})
#: The codes of `fsm-agent check`'s five properties, reported by lint with `check=True`
#: (CK003 and CK004 only for a refutation that names no edge a lint rule reports: the
#: causes `receipts` and `privileged` name are HP001/HP003/HP006 and HP004/HP010/HX006).
CHECK_RULES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "CK001": "check: every run halts within its budgets",
        "CK002": "check: no configuration without a passing transition",
        "CK003": "check: done only where the runtime's success rule allows it",
        "CK004": "check: privileged tools only after the local halt check; local retries",
        "CK005": "check: nothing declared is dead",
        "CK000": "check: the machine could not be explored in full under its budgets",
    }
)
#: The most work lint's check spends (`fsm_agent.checking.explore.Work`; about a second)
#: before it reports CK000 (with or without `check`: the rules check decides are undecided).
LINT_CHECK_LIMIT: Final = 100_000
#: Which rule owns a policy value that is not allowed (any other policy problem is HP002).
_POLICY_CODES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "$.control_plane.halt": "HP003",
        "$.control_plane.retry_budget": "HP004",
        "$.control_plane.schema_repair_vote": "HP005",
        "$.routing.privileged_tools_require": "HX005",
    }
)


@attrs.frozen
class Finding:
    """One lint finding: a rule code, what is wrong, and where (file, line, key path)."""

    code: str
    message: str
    source: str
    line: int | None
    key: str
    title: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{where}: {self.code} {self.message} @ {self.key} ({self.title})"


def _finding(code: str, message: str, source: str, line: int | None, key: str) -> Finding:
    return Finding(code, message, source, line, key, RULES.get(code) or CHECK_RULES[code])


def _explore(
    spec: MachineSpec, tools: ToolRegistry | None, lines: LineIndex
) -> CheckReport | Finding:
    """`fsm-agent check`'s report of `spec` (a privileged tool possible unless the registry
    says none may be called), or CK000 when it is too large to explore in lint's limit."""
    from fsm_agent.checking.checker import check_machine, privileged_possible
    from fsm_agent.checking.explore import TooLarge

    try:
        return check_machine(spec, privileged_possible=privileged_possible(spec, tools),
                             growth=False, limit=LINT_CHECK_LIMIT)  # fmt: skip
    except TooLarge as exc:
        return _finding("CK000", str(exc), spec.source, lines.lines.get("$.budgets"), "$.budgets")


def _checked(ctx: _Context) -> Iterator[Finding]:
    """`fsm-agent check`'s refuted properties that name no cause, as CK findings."""
    from fsm_agent.checking.report import refutations

    if ctx.report is None:
        return
    for code, message, key, line in refutations(ctx.report):
        yield _finding(code, message, ctx.spec.source, line, key)


@attrs.frozen
class _Context:
    spec: MachineSpec
    policy: Policy | None
    tools: ToolRegistry | None
    lines: LineIndex
    policy_reported: bool
    #: check's report of the machine (None: too large to explore, reported as CK000)
    report: CheckReport | None = None

    def at(self, code: str, message: str, key: str) -> Finding:
        probe = key
        while probe not in self.lines.lines and ("." in probe or "[" in probe):
            probe = probe[: max(probe.rfind("."), probe.rfind("["))]
        return _finding(code, message, self.spec.source, self.lines.lines.get(probe), key)

    def tool_states(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.spec.states if s.action == "tool")

    def privileged(self) -> tuple[str, ...] | None:
        """Allow-listed privileged tools, or None when there is no registry to tell."""
        if self.tools is None:
            return None
        allowed = set(self.tools.names() if self.spec.tools is None else self.spec.tools)
        return tuple(t.name for t in self.tools if t.privileged and t.name in allowed)

    def who(self) -> str:
        found = self.privileged()
        if found is None:
            return "any tool (no tool registry given, so every tool counts as privileged)"
        return f"privileged tool {', '.join(map(repr, found))}"

    def privileged_possible(self) -> bool:
        """A tool state exists and a privileged tool may be called there (check's rule)."""
        from fsm_agent.checking.checker import privileged_possible

        return bool(self.tool_states()) and privileged_possible(self.spec, self.tools)


#: What to do about each cause check names, by its lint rule.
_FIXES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "HP001": "guard it with answer_grounded",
        "HP003": "add a receipt guard beside it (answer_grounded, or goal_satisfied after a"
        " tool); a user guard may read model prose",
        "HP006": "guard it with goal_satisfied (receipts_complete alone is no goal)",
        "HP004": "guard it with retries_left, so max_retries stops it",
        "HX006": "mark it `retry: true` and guard it with retries_left",
    }
)


def _caused(ctx: _Context) -> Iterator[Finding]:
    """HP001, HP003, HP006 (check's `receipts`) and HP004, HP010, HX006 (its `privileged`):
    each edge check blames, under the rule that names it (`fsm_agent.checking.causes`)."""
    if ctx.report is None:
        return
    for v in ctx.report.verdicts:
        for cause in v.causes:
            yield ctx.at(cause.code, _cause_message(ctx, v.name, cause), _cause_key(cause))


def _cause_message(ctx: _Context, prop: str, cause: Cause) -> str:
    if cause.code == "HP010":
        fix = (
            f"{ctx.who()} may be called there; put a `not privileged_cleared` edge that"
            " leaves the tool path before it"
        )
    else:
        fix = _FIXES[cause.code]
    return f"{cause.summary}; {fix} (fsm-agent check: {prop})"


def _cause_key(cause: Cause) -> str:
    key = f"$.transitions[{cause.transition}]"
    return {"HP003": f"{key}.guards", "HP004": f"{key}.retry"}.get(cause.code, key)


def _tool_key(ctx: _Context, name: str) -> str:
    if ctx.spec.tools is not None and name in ctx.spec.tools:
        return f"$.tools[{ctx.spec.tools.index(name)}]"
    states = ctx.tool_states()
    return f"$.states.{states[0]}" if states else "$"


def _hp009(ctx: _Context) -> Iterator[Finding]:
    """A privileged (commit-path) tool runs on a free lane or a free server."""
    if ctx.tools is None or not ctx.tool_states():
        return
    for name in ctx.privileged() or ():
        tool = ctx.tools.get(name)
        if tool is not None and (tool.lane.tier == "free" or tool.lane.kind == "free_server"):
            yield ctx.at(
                "HP009",
                f"privileged tool {name!r} runs on lane {tool.lane}: a commit would depend on a"
                " best-effort endpoint (scratch servers stay off the commit path)",
                _tool_key(ctx, name),
            )


def _hx005(ctx: _Context) -> Iterator[Finding]:
    """No policy at all, while a privileged tool may be called."""
    if ctx.policy is not None or ctx.policy_reported or not ctx.privileged_possible():
        return
    who = ctx.privileged()
    yield ctx.at(
        "HX005",
        f"no halt policy while {ctx.who()} may be called: nothing declares"
        " routing.privileged_tools_require: local_halt (pass one, e.g. machines/halt-policy.yml)",
        _tool_key(ctx, who[0] if who else ""),
    )


def _policy_values(ctx: _Context) -> Iterator[Finding]:
    """Every policy value outside the schema, under the rule that owns its key."""
    if ctx.policy is None:
        return
    for key, message in policy_problems(ctx.policy):
        code = _POLICY_CODES.get(key, "HP002")
        yield _finding(code, message, ctx.policy.source, ctx.policy.line_of(key), key)


_CHECKS: Final[tuple[Callable[[_Context], Iterable[Finding]], ...]] = (
    _caused, _hp009, _hx005, _policy_values,
)  # fmt: skip


def _sorted(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (f.source, f.line or 0, f.code, f.key))


def _lint(
    spec: MachineSpec,
    policy: Policy | None,
    tools: ToolRegistry | None,
    *,
    policy_reported: bool,
    check: bool = False,
) -> list[Finding]:
    from fsm_agent.declaration.yamlsource import LineIndex  # YAML only when linting

    lines = LineIndex(spec.text, spec.source)
    explored = _explore(spec, tools, lines)
    report = None if isinstance(explored, Finding) else explored
    ctx = _Context(spec, policy, tools, lines, policy_reported, report)
    checks = (*_CHECKS, _checked) if check else _CHECKS
    found = [f for c in checks for f in c(ctx)]
    return _sorted([*found, explored] if isinstance(explored, Finding) else found)


def lint(
    spec: MachineSpec,
    policy: Policy | None,
    *,
    tools: ToolRegistry | None = None,
    check: bool = False,
) -> list[Finding]:
    """Every finding for a loaded declaration, a policy (None: none given) and optionally the
    tool registry (its lanes and privileged flags). Empty means clean. Pure. The rules check
    decides come from its exploration whatever `check` says; with `check`, also its other
    refuted properties (CK001-CK005)."""
    return _lint(spec, policy, tools, policy_reported=False, check=check)


def policy_finding(exc: PolicyError) -> Finding:
    """A policy file that failed to load, as a finding under the rule that owns the key."""
    code = _POLICY_CODES.get(exc.key, "HP002") if exc.kind == "bad_value" else "HP002"
    return _finding(code, exc.detail, exc.source, exc.line, exc.key)


def lint_paths(
    machine: str,
    policy: str | os.PathLike[str] | None = None,
    *,
    tools: ToolRegistry | None = None,
    check: bool = False,
) -> list[Finding]:
    """Lint a machine (name or path) and a policy file. A policy file that fails to load is a
    finding (it fails closed at run time); an invalid machine raises `MachineSpecError`.
    `check` as for `lint`."""
    spec = load_machine(machine)
    if policy is None:
        return lint(spec, None, tools=tools, check=check)
    try:
        loaded = load_policy(policy)
    except PolicyError as exc:
        rest = _lint(spec, None, tools, policy_reported=True, check=check)
        return _sorted([policy_finding(exc), *rest])
    return lint(spec, loaded, tools=tools, check=check)


def format_findings(findings: Iterable[Finding], fmt: Literal["text", "json"] = "text") -> str:
    """Findings as linter lines (`file:line: CODE message @ key (title)`) or a JSON array."""
    items = list(findings)
    if fmt == "text":
        return "".join(f"{f}\n" for f in items)
    if fmt == "json":
        from fsm_agent.journal import serde  # cattrs only when JSON is asked for

        return json.dumps(serde.unstructure(items), indent=2, ensure_ascii=False) + "\n"
    raise InvalidInputError(f"unknown format {fmt!r} (use text or json)")
