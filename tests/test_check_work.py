"""What `fsm-agent check` spends: free guards searched, not enumerated (k user-guarded edges
cost linear work, not 2^k), with the same decisions and verdicts as the exhaustive
enumeration of every valuation; the work limit shared by every exploration of one check;
and a machine too large for it refused with exit 2. Nothing here times anything: the
figures are units of work (`fsm_agent.checking.explore.Work`)."""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterator, Mapping

import pytest
from click.testing import CliRunner

from fsm_agent.checking import explore as explore_module
from fsm_agent.checking.checker import check_machine
from fsm_agent.checking.explore import Exploration, TooLarge, Work, _Decider
from fsm_agent.checking.limits import DEFAULT_LIMIT
from fsm_agent.checking.model import Bounds, Config, base, guard_value, is_free
from fsm_agent.cli.main import cli
from fsm_agent.declaration.load import load_machine, parse_machine
from fsm_agent.declaration.spec import BUDGET_TRIGGER, MachineSpec, TransitionSpec
from tests.bench.check import CANONICAL, user_guarded

USER = "tests.bench.free_guards:g"
Logged = tuple[int, str, bool]
Outcome = tuple[TransitionSpec | None, tuple[Logged, ...], tuple[int, ...]]


# --- the enumeration `check` made before it searched: every valuation, one by one --------


def exhaustive(c: Config, bounds: Bounds, edges: tuple[TransitionSpec, ...]) -> list[Outcome]:
    return list(_try(c, bounds, edges, 0, {}, ()))


def _try(
    c: Config,
    bounds: Bounds,
    edges: tuple[TransitionSpec, ...],
    at: int,
    free: dict[str, bool],
    log: tuple[Logged, ...],
) -> Iterator[Outcome]:
    if at == len(edges):
        yield None, log, ()
        return
    t = edges[at]
    for passed, more_free, more_log in _guards(c, bounds, t, 0, free, ()):
        if passed:
            later = tuple(e.index for e in edges[at + 1 :] if _may_pass(c, bounds, e, more_free))
            yield t, log + more_log, later
        else:
            yield from _try(c, bounds, edges, at + 1, more_free, log + more_log)


def _guards(
    c: Config,
    bounds: Bounds,
    t: TransitionSpec,
    i: int,
    free: dict[str, bool],
    log: tuple[Logged, ...],
) -> Iterator[tuple[bool, dict[str, bool], tuple[Logged, ...]]]:
    if i == len(t.guards):
        yield True, free, log
        return
    ref = t.guards[i]
    positive, name = base(ref)
    if is_free(name) and name not in free:
        values: tuple[bool, ...] = (True, False)
    else:
        values = (free[name] if is_free(name) else guard_value(name, c, bounds),)
    for value in values:
        chosen = {**free, name: value} if is_free(name) else free
        result = value if positive else not value
        entry = (*log, (t.index, ref, result))
        if result:
            yield from _guards(c, bounds, t, i + 1, chosen, entry)
        else:
            yield False, chosen, entry


def _may_pass(c: Config, bounds: Bounds, t: TransitionSpec, free: Mapping[str, bool]) -> bool:
    for ref in t.guards:
        positive, name = base(ref)
        if is_free(name) and name not in free:
            continue
        value = free[name] if is_free(name) else guard_value(name, c, bounds)
        if value != positive:
            return False
    return True


def first_passing(c: Config, bounds: Bounds, edges: tuple[TransitionSpec, ...]) -> set[int | None]:
    """The edge the decide rule chooses under each full valuation of the free guards."""
    names = sorted({n for t in edges for _, n in map(base, t.guards) if is_free(n)})
    chosen: set[int | None] = set()
    for values in itertools.product((True, False), repeat=len(names)):
        free = dict(zip(names, values, strict=True))
        passing = (
            t
            for t in edges
            if all(
                (free[n] if is_free(n) else guard_value(n, c, bounds)) == positive
                for positive, n in map(base, t.guards)
            )
        )
        chosen.add(next((t.index for t in passing), None))
    return chosen


# --- generated machines: a few user guards on overlapping answer edges --------------------

_ANSWERS = re.compile(r"(  - \{trigger: answer, [^\n]*\n)+")
_NAMES = (
    f"{USER}0",
    f"{USER}1",
    f"{USER}2",
    f"{USER}0",
    f"{USER}1",
    "answer_grounded",
    "side_effects_receipted",
    "judge_agrees",
)
_DESTS = (
    "dest: done, halt: completed",
    "dest: drafting, retry: true",
    "dest: handoff, halt: schema_fail",
)


def generated(seed: int) -> MachineSpec:
    """The agent loop with its first answer edges replaced by 3 to 6 random ones (the last
    two, `side_effect_unknown` and the catch-all, stay), each guarded by one or two of three
    user guards, the judge and two built-ins (a retry edge also by the retry meter), either
    way round."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible machine, not a secret
    edges = []
    for _ in range(rng.randint(3, 6)):
        names = dict.fromkeys(rng.choices(_NAMES, k=rng.randint(1, 2)))
        guards = [n if rng.random() < 0.7 else f"not {n}" for n in names]
        dest = rng.choice(_DESTS)
        if "retry" in dest:
            guards.insert(rng.randint(0, len(guards)), "retries_left")
        edges.append(
            f"  - {{trigger: answer, source: drafting, guards: [{', '.join(guards)}], {dest}}}\n"
        )
    text = CANONICAL.read_text(encoding="utf-8").replace("name: agent_loop", f"name: gen_{seed}")
    text = _ANSWERS.sub(lambda _: "".join(edges), text, count=1)
    return parse_machine(text, source=f"<generated {seed}>")


def _effect(log: tuple[Logged, ...]) -> frozenset[tuple[str, bool]]:
    return frozenset((ref, ok) for _, ref, ok in log if USER not in ref)


def _decisions(e: Exploration) -> set[tuple[Config, str]]:
    return {(s.after, s.trigger) for s in e.all_steps() if s.trigger != BUDGET_TRIGGER}


def _verdicts(report: object) -> list[tuple[object, ...]]:
    """The verdicts, with the counts in the overlap notes left out (the enumeration counted
    a step once per valuation that led to it)."""
    return [
        (
            v.name,
            v.proven,
            v.summary,
            [re.sub(r"\d+ configurations", "n configurations", d) for d in v.details],
            [(s.source, s.trigger, s.after, s.transition, s.dest, s.refused) for s in v.path],
            v.longest,
        )
        for v in report.verdicts  # type: ignore[attr-defined]
    ]


SEEDS = range(16)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_decision_s_outcomes_are_those_of_every_valuation(seed: int) -> None:
    spec = generated(seed)
    budgets = {"max_steps": 3, "max_retries": 2}
    report = check_machine(spec, budgets=budgets, growth=False)
    bounds = report.bounds
    decider = _Decider(spec, bounds, Work(DEFAULT_LIMIT, spec.source))
    for after, trigger in _decisions(report.exploration):
        edges = decider.table.get((after.state, trigger), ())
        searched = decider.decide(after, trigger)
        every = exhaustive(after, bounds, edges)
        key = lambda o: (o[0] and o[0].index, _effect(o[1]), o[2])  # noqa: E731
        # the same outcomes, each once: (chosen edge, what the log says, the overlaps)
        assert sorted(map(key, searched), key=repr) == sorted(set(map(key, every)), key=repr)
        assert {o[1] for o in searched} <= {o[1] for o in every}  # each log a real one
        assert {o[0] and o[0].index for o in searched} == first_passing(after, bounds, edges)
        for _, log, _ in searched:  # one value per free guard per decision
            values: dict[str, set[bool]] = {}
            for _, ref, ok in log:
                positive, name = base(ref)
                if is_free(name):
                    values.setdefault(name, set()).add(ok == positive)
            assert all(len(v) == 1 for v in values.values()), log
    # and the verdicts are those of an exploration over every valuation
    with pytest.MonkeyPatch.context() as m:
        m.setattr(
            explore_module._Search,
            "outcomes",
            lambda self: tuple(exhaustive(self.c, self.d.bounds, self.edges)),
        )
        before = check_machine(spec, budgets=budgets, growth=False, limit=10**8)
    assert _verdicts(report) == _verdicts(before)
    assert report.configurations == before.configurations
    assert report.transitions <= before.transitions


def test_the_generated_machines_mix_verdicts_and_user_guards() -> None:
    """The generated machines are not all alike, and in some of them valuations differ
    only in their user guards (the test above means something)."""
    specs = [generated(seed) for seed in SEEDS]
    reports = [check_machine(s, budgets={"max_steps": 3, "max_retries": 2}) for s in specs]
    assert {r.proven for r in reports} == {True, False}
    shared = [s for s in specs if sum(f"{USER}0" in g for t in s.transitions for g in t.guards) > 1]
    assert shared, "no generated machine reads one user guard on two edges"
    merged = 0
    for r in reports:
        decider = _Decider(r.spec, r.bounds, Work(DEFAULT_LIMIT, r.spec.source))
        for after, trigger in _decisions(r.exploration):
            edges = decider.table.get((after.state, trigger), ())
            merged += len(exhaustive(after, r.bounds, edges)) > len(decider.decide(after, trigger))
    assert merged > 0


def test_k_user_guarded_edges_cost_linear_work() -> None:
    """Each ungrounded answer fails all k edges whatever their user guards say (2^k
    valuations): the work grows by the same amount for each edge added."""
    work = {}
    for k in (0, 16, 32, 64):
        report = check_machine(user_guarded(k), growth=False)
        assert report.proven
        assert report.configurations == 1746  # the user guards add no configuration
        work[k] = report.work
        answers = [s for s in report.exploration.all_steps() if s.trigger == "answer"]
        per_decision: dict[tuple[Config, Config], int] = {}
        for s in answers:
            per_decision[(s.source, s.after)] = per_decision.get((s.source, s.after), 0) + 1
        assert max(per_decision.values()) <= k + 4  # k + 1 choices, and refusals
    assert work[64] - work[32] == 2 * (work[32] - work[16])
    assert work[64] < 2 * work[0]  # 64 more edges than the canonical machine, not 2^64 work


def test_free_guards_every_edge_reads_are_bounded_by_the_limit() -> None:
    """When the search cannot forget a free guard (the last edge reads them all) it does
    branch per guard, and the limit stops it inside the one decision."""
    k = 40
    text = CANONICAL.read_text(encoding="utf-8")
    every = ", ".join(f"{USER}{i}" for i in range(k))
    edges = "".join(
        f"  - {{trigger: answer, source: drafting, dest: done,"
        f" guards: [{USER}{i}, answer_grounded], halt: completed}}\n"
        for i in range(k)
    )
    last = (
        f"  - {{trigger: answer, source: drafting, dest: handoff, guards: [{every}],"
        " halt: schema_fail}\n"
    )
    spec = parse_machine(_ANSWERS.sub(lambda _: edges + last, text, count=1), source="<all read>")
    with pytest.raises(TooLarge, match=f"more than {DEFAULT_LIMIT:,} units of work"):
        check_machine(spec)


def test_every_exploration_of_a_check_spends_from_one_limit() -> None:
    spec = load_machine("agent_loop")
    report = check_machine(spec)
    main = report.exploration.work
    # a unit per configuration and per transition, and the guards the decisions evaluated
    assert report.configurations + report.transitions < main < 2 * report.transitions
    assert report.work > main  # the growth formula's explorations are counted too
    assert report.limit == DEFAULT_LIMIT
    assert check_machine(spec, limit=report.work).work == report.work
    with pytest.raises(TooLarge):
        check_machine(spec, limit=main)  # enough for the declared budgets, not the growth
    assert check_machine(spec, limit=main, growth=False).work == main


def test_max_steps_1000_is_refused_with_exit_2() -> None:
    result = CliRunner().invoke(cli, ["check", "agent_loop", "--max-steps", "1000"])
    assert result.exit_code == 2
    assert f"more than {DEFAULT_LIMIT:,} units of work" in result.output
    assert "check with a smaller --max-steps" in result.output
    assert "allow more with --max-work" in result.output
