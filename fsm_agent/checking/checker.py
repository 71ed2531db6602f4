"""`check_machine`: explore a declaration under its budgets, decide the five properties, and
say how the longest run grows with the budgets."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from fsm_agent.checking.explore import Exploration, Work, collector_paused, explore
from fsm_agent.checking.limits import DEFAULT_LIMIT
from fsm_agent.checking.model import Bounds
from fsm_agent.checking.properties import Verdict, check_all, dead, halts
from fsm_agent.declaration.spec import MachineSpec

if TYPE_CHECKING:
    from fsm_agent.runtime.tools import ToolRegistry

#: The (max_steps, max_retries) points a linear formula of the longest run is fitted on,
#: and the one it is then checked against (besides the declared budgets).
_FIT = ((2, 0), (3, 0), (2, 1))
_PROBE = (4, 2)


@attrs.frozen
class Growth:
    """The longest run as a function of max_steps (s) and max_retries (r): transitions
    `a*s + b*r + c`, model calls `d*s + e*r + f`, when such a formula holds on every probe."""

    transitions: tuple[int, int, int] | None
    calls: tuple[int, int, int] | None

    @staticmethod
    def formula(coef: tuple[int, int, int] | None) -> str:
        if coef is None:
            return "no linear formula"
        a, b, c = coef
        terms = [
            f"{a}*max_steps" if a else "",
            f"{b}*max_retries" if b else "",
            f"{c}" if c else "",
        ]
        text = " + ".join(t for t in terms if t) or "0"
        return text.replace("+ -", "- ").replace("1*", "")


@attrs.frozen
class CheckReport:
    """What `check_machine` found: the verdicts, what was explored, and how long it took."""

    spec: MachineSpec
    bounds: Bounds
    verdicts: tuple[Verdict, ...]
    configurations: int
    transitions: int
    seconds: float
    longest: tuple[int, int] | None
    growth: Growth | None
    exploration: Exploration = attrs.field(repr=False, eq=False)
    #: the units of work the whole check spent (`Work`), and the limit they were held to
    work: int = 0
    limit: int = DEFAULT_LIMIT

    @property
    def proven(self) -> bool:
        return all(v.proven for v in self.verdicts)


def bounds_of(
    spec: MachineSpec,
    budgets: Mapping[str, int | float | None] | None = None,
    *,
    privileged_possible: bool = True,
) -> Bounds:
    """The bounds of `spec`'s declared budgets, with `budgets` overrides applied."""
    merged = dict(spec.budgets)
    merged.update({k: v for k, v in (budgets or {}).items() if v is not None})
    from fsm_agent.runtime.budgets import make_budgets  # validates every override

    b = make_budgets(merged)
    return Bounds(b.max_steps, b.max_retries, privileged_possible, spec.continues("approval"))


def check_machine(
    spec: MachineSpec,
    *,
    budgets: Mapping[str, int | float | None] | None = None,
    privileged_possible: bool = True,
    policy_problems: tuple[str, ...] = (),
    growth: bool = True,
    limit: int = DEFAULT_LIMIT,
) -> CheckReport:
    """Prove or refute the five properties (`fsm_agent.checking.properties`) of `spec` under
    its budgets (with `budgets` overrides). `privileged_possible=False`: no allow-listed tool
    is privileged (known from a tool registry). `growth`: also fit the longest run's formula
    over small budgets. Raises `TooLarge` once the work of every exploration it makes
    (`Work`: configurations, transitions and guard evaluations) passes `limit`."""
    began = time.perf_counter()
    bounds = bounds_of(spec, budgets, privileged_possible=privileged_possible)
    work = Work(limit, spec.source)
    with collector_paused():  # the properties walk the exploration's tuples too
        e = explore(spec, bounds, work)
        verdicts = check_all(e, policy_problems)
        if not verdicts[4].proven and not privileged_possible:
            verdicts = (*verdicts[:4], _defensive(spec, verdicts[4], bounds, work))
        halting = verdicts[0].proven
        longest = verdicts[0].longest
        fitted = _growth(spec, bounds, longest, work) if halting and growth else None
    return CheckReport(
        spec=spec,
        bounds=bounds,
        verdicts=verdicts,
        configurations=len(e.steps),
        transitions=sum(len(s) for s in e.steps.values()),
        seconds=time.perf_counter() - began,
        longest=longest,
        growth=fitted,
        exploration=e,
        work=work.spent,
        limit=limit,
    )


def _defensive(spec: MachineSpec, found: Verdict, bounds: Bounds, work: Work) -> Verdict:
    """`dead` when no allow-listed tool is privileged: what would be reachable were one
    privileged (a defensive edge for a privileged tool) is information, not a failure."""
    were = dead(explore(spec, attrs.evolve(bounds, privileged_possible=True), work))
    if not were.proven:
        return found
    note = (f"defensive, reachable only if an allow-listed tool were privileged: {found.summary}",)
    return Verdict("dead", True, were.summary, details=note + found.details)


def longest_at(
    spec: MachineSpec, bounds: Bounds, limit: int | Work = DEFAULT_LIMIT
) -> tuple[int, int] | None:
    """The longest run under `bounds`, or None when some run does not halt."""
    return halts(explore(spec, bounds, limit)).longest


def _fit(points: Mapping[tuple[int, int], int]) -> tuple[int, int, int]:
    (s0, r0), (s1, _), (_, r1) = _FIT
    c0 = points[_FIT[0]]
    a = (points[_FIT[1]] - c0) // (s1 - s0)
    b = (points[_FIT[2]] - c0) // (r1 - r0)
    return a, b, c0 - a * s0 - b * r0


def _growth(spec: MachineSpec, bounds: Bounds, at: tuple[int, int] | None, work: Work) -> Growth:
    """The longest run's formula, from explorations at the small budgets of `_FIT` and
    `_PROBE` (their work spent from the check's own)."""
    probes = [*_FIT, _PROBE]
    found = {
        p: longest_at(spec, attrs.evolve(bounds, max_steps=p[0], max_retries=p[1]), work)
        for p in probes
    }
    if at is not None:
        found[(bounds.max_steps, bounds.max_retries)] = at
    if any(v is None for v in found.values()):
        return Growth(None, None)
    out: list[tuple[int, int, int] | None] = []
    for which in (0, 1):
        points = {p: v[which] for p, v in found.items() if v is not None}
        a, b, c = _fit(points)
        holds = all(a * s + b * r + c == v for (s, r), v in points.items())
        out.append((a, b, c) if holds else None)
    return Growth(out[0], out[1])


def privileged_possible(spec: MachineSpec, tools: ToolRegistry | None) -> bool:
    """Whether a run may call a privileged tool: always without a registry to tell, else
    when one of the tools the run may call is privileged."""
    if tools is None:
        return True
    allowed = set(tools.names() if spec.tools is None else spec.tools)
    return any(t.privileged and t.name in allowed for t in tools)


def check_paths(
    machine: str,
    policy: str | None = None,
    *,
    tools: ToolRegistry | None = None,
    budgets: Mapping[str, int | float | None] | None = None,
    growth: bool = True,
    limit: int = DEFAULT_LIMIT,
) -> CheckReport:
    """`check_machine` for a machine name or path, under a policy file (default: the one
    the machine declares, else the shipped one) and optionally the tool registry (which
    tools are privileged). Raises `MachineSpecError` or `PolicyError` (invalid input)."""
    from fsm_agent.declaration.load import load_machine
    from fsm_agent.declaration.policy import default_policy_path, load_policy, policy_problems

    spec = load_machine(machine)
    loaded = load_policy(policy or spec.policy_path() or default_policy_path())
    problems = tuple(f"{key}: {message}" for key, message in policy_problems(loaded))
    return check_machine(
        spec,
        budgets=budgets,
        privileged_possible=privileged_possible(spec, tools),
        policy_problems=problems,
        growth=growth,
        limit=limit,
    )
