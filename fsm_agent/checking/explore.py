"""Exhaustive exploration of a declaration's abstract runs (`fsm_agent.checking.model`):
every configuration reachable from the start, every decision the compiled machine's rule
(candidates in declared order, the first whose guards all pass) can make there, breadth
first, so the path kept to each configuration is a shortest one. Free guards (user guards,
the judge) are searched, not enumerated (`_Search`), and all the work is counted against
one limit (`Work`).
"""

from __future__ import annotations

import contextlib
import gc
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import attrs

from fsm_agent.checking.limits import DEFAULT_LIMIT
from fsm_agent.checking.model import (
    FREE_BUILTINS,
    Bounds,
    Config,
    Liveness,
    base,
    contract_refusal,
    guard_value,
    is_free,
    outcomes,
    repeat_refusals,
)
from fsm_agent.declaration.spec import (
    BUDGET_TRIGGER,
    DECISIONS_FOR,
    MachineSpec,
    TransitionSpec,
)
from fsm_agent.errors import InvalidInputError
from fsm_agent.halt import AWAITS, BUDGET_EXHAUSTED, HANDOFF, HaltReason, terminal_state


class TooLarge(InvalidInputError):
    """Checking the declaration under these budgets takes more work than the limit allows;
    check it under smaller budgets (the longest-run formula says how the runs grow)."""

    def __init__(self, source: str, limit: int) -> None:
        self.source, self.limit = source, limit
        super().__init__(
            f"{source}: more than {limit:,} units of work (configurations, transitions and"
            " guard evaluations) under these budgets; check with a smaller --max-steps or"
            " --max-retries (the longest-run formula tells how runs grow), or allow more"
            " with --max-work"
        )


class Work:
    """The work a check spends against its limit, shared by every exploration it makes:
    one unit per configuration visited, per transition out of it, and per guard evaluated
    while a decision searches the free guards' values (a free guard read unassigned is
    two). `spend` raises `TooLarge` as soon as the total passes the limit."""

    def __init__(self, limit: int, source: str) -> None:
        self.limit, self.source, self.spent = limit, source, 0

    def spend(self, units: int) -> None:
        self.spent += units
        if self.spent > self.limit:
            raise TooLarge(self.source, self.limit)


#: One guard evaluated in a decision: (transition index, reference, its result).
Logged = tuple[int, str, bool]


class Halt(NamedTuple):
    """A run's end: its terminal state, its halt reason (`no_transition` when no edge's
    guards passed) and the model calls it made."""

    state: str
    reason: HaltReason
    steps: int


Node = Config | Halt
#: One way a decision can go: (the edge chosen or None, the guard log, later edges that
#: could also have passed).
Decided = tuple[TransitionSpec | None, tuple[Logged, ...], tuple[int, ...]]


class Step(NamedTuple):
    """One transition of an abstract run: from `source`, the action led to `after` and
    fired `trigger`; `transition` passed (None: none did, or the meter check fired)."""

    source: Config
    trigger: str
    after: Config
    transition: TransitionSpec | None
    log: tuple[Logged, ...]
    dest: Node
    #: later candidates whose guards could also have passed (declaration order chose)
    overlaps: tuple[int, ...] = ()
    #: the runtime's contract refused `transition` (`dest` is that halt), or None
    refused: HaltReason | None = None


@attrs.frozen
class Exploration:
    """Every reachable configuration, each one's outgoing steps, and a shortest path's last
    step into each (None for the start)."""

    spec: MachineSpec
    bounds: Bounds
    starts: tuple[Config, ...]
    steps: Mapping[Config, tuple[Step, ...]]
    parent: Mapping[Node, Step | None]
    #: the length of a shortest path to each configuration
    depth: Mapping[Node, int]
    #: the units of work this exploration spent (`Work`)
    work: int = 0

    def path_to(self, node: Node) -> list[Step]:
        """The shortest path from a start to `node`, as steps."""
        out = []
        step = self.parent.get(node)
        while step is not None:
            out.append(step)
            step = self.parent.get(step.source)
        return out[::-1]

    def all_steps(self) -> Iterator[Step]:
        for steps in self.steps.values():
            yield from steps


class _Decider:
    """The decide rule of `fsm_agent.declaration.machine.CompiledMachine`, over abstract
    configurations, branching on free guards (`_Search`)."""

    def __init__(self, spec: MachineSpec, bounds: Bounds, work: Work) -> None:
        self.spec, self.bounds, self.work = spec, bounds, work
        self.table: dict[tuple[str, str], tuple[TransitionSpec, ...]] = {}
        for t in spec.transitions:
            if not t.implicit:
                self.table.setdefault((t.source, t.trigger), ())
                self.table[(t.source, t.trigger)] += (t,)
        self.budget_edge = {t.source: t for t in spec.transitions if t.implicit}
        self.action = {s.name: s.action or "" for s in spec.states}
        #: what a waiting run's declaration continues it on: an approval, an answer
        self.continues = {kind: spec.continues(kind) for kind in DECISIONS_FOR}
        #: transition index -> its destination's spec (looked up once, not per step)
        self.dest = {t.index: spec.state(t.dest) for t in spec.transitions}
        #: (state, trigger) -> the built-in guards its candidates read: a decision depends
        #: only on their values (the free guards branch the same way for the same values)
        self.reads = {
            key: tuple(sorted({n for t in edges for _, n in map(base, t.guards) if not is_free(n)}))
            for key, edges in self.table.items()
        }
        #: (state, trigger) -> per candidate i, the free guards candidates i, i+1, … read
        self.ahead = {key: _ahead(edges) for key, edges in self.table.items()}
        self._decided: dict[tuple[Any, ...], tuple[Decided, ...]] = {}

    def decide(self, c: Config, trigger: str) -> tuple[Decided, ...]:
        """Every (chosen edge or None, guard log, overlapping later edges) over the free
        guards' values, one per distinct effect (`_Search`); cached by the values of the
        guards the candidates read."""
        key = (c.state, trigger, *(guard_value(n, c, self.bounds) for n in
                                   self.reads.get((c.state, trigger), ())))  # fmt: skip
        found = self._decided.get(key)
        if found is None:
            edges = self.table.get((c.state, trigger), ())
            search = _Search(self, c, edges, self.ahead.get((c.state, trigger), (frozenset(),)))
            found = self._decided[key] = search.outcomes()
        return found


def _ahead(edges: tuple[TransitionSpec, ...]) -> tuple[frozenset[str], ...]:
    """Per candidate i (and one past the last), the free guards candidates i… read."""
    out = [frozenset[str]()]
    for t in reversed(edges):
        out.append(out[-1] | {n for _, n in map(base, t.guards) if is_free(n)})
    return tuple(reversed(out))


def _effect(log: tuple[Logged, ...]) -> frozenset[tuple[str, bool]]:
    """What a guard log says beyond its user guards: each other guard evaluated (by its
    reference) and its result. The properties read only these."""
    return frozenset((ref, ok) for _, ref, ok in log if not _user(ref))


def _user(ref: str) -> bool:
    name = base(ref)[1]
    return is_free(name) and name not in FREE_BUILTINS


class _Search:
    """One decision's outcomes: the candidates in declared order, the first whose guards
    all pass, over every value of the free guards, without enumerating their valuations.
    A free guard takes a value only when a guard reads it (one value per decision, the
    same for every candidate), and is forgotten once no later candidate reads it; a search
    state (the candidate reached, the values later candidates read, the effect of the log
    so far) is explored once, and outcomes that differ only in their user guards' log
    entries are one (the first found is kept). So k candidates each with its own user
    guard cost O(k) guard evaluations, not 2^k; guards shared by many candidates still
    branch, and every evaluation is work spent against the limit."""

    def __init__(
        self,
        decider: _Decider,
        c: Config,
        edges: tuple[TransitionSpec, ...],
        ahead: tuple[frozenset[str], ...],
    ) -> None:
        self.d, self.c, self.edges, self.ahead = decider, c, edges, ahead
        self.seen: set[tuple[int, frozenset[tuple[str, bool]], frozenset[tuple[str, bool]]]]
        self.seen = set()

    def outcomes(self) -> tuple[Decided, ...]:
        found: dict[tuple[Any, ...], Decided] = {}
        for chosen, log, later in self._try(0, {}, (), frozenset()):
            key = (None if chosen is None else chosen.index, _effect(log), later)
            found.setdefault(key, (chosen, log, later))
        return tuple(found.values())

    def _try(
        self,
        at: int,
        free: dict[str, bool],
        log: tuple[Logged, ...],
        effect: frozenset[tuple[str, bool]],
    ) -> Iterator[Decided]:
        read = self.ahead[at]
        state = (at, frozenset((n, v) for n, v in free.items() if n in read), effect)
        if state in self.seen:  # explored: its outcomes were found with another log
            return
        self.seen.add(state)
        if at == len(self.edges):
            yield None, log, ()
            return
        t = self.edges[at]
        for passed, more_free, more_log in self._guards(t, 0, free, ()):
            if passed:
                later = tuple(e.index for e in self.edges[at + 1 :] if self._may_pass(e, more_free))
                yield t, log + more_log, later
            else:
                yield from self._try(at + 1, more_free, log + more_log, effect | _effect(more_log))

    def _guards(
        self, t: TransitionSpec, i: int, free: dict[str, bool], log: tuple[Logged, ...]
    ) -> Iterator[tuple[bool, dict[str, bool], tuple[Logged, ...]]]:
        """Evaluate `t`'s guards from the i-th, stopping at the first False."""
        if i == len(t.guards):
            yield True, free, log
            return
        ref = t.guards[i]
        positive, name = base(ref)
        if is_free(name) and name not in free:
            values: tuple[bool, ...] = (True, False)
        else:
            values = (free[name] if is_free(name) else guard_value(name, self.c, self.d.bounds),)
        self.d.work.spend(len(values))
        for value in values:
            chosen = {**free, name: value} if is_free(name) else free
            result = value if positive else not value
            entry = (*log, (t.index, ref, result))
            if result:
                yield from self._guards(t, i + 1, chosen, entry)
            else:
                yield False, chosen, entry

    def _may_pass(self, t: TransitionSpec, free: Mapping[str, bool]) -> bool:
        for ref in t.guards:
            positive, name = base(ref)
            if is_free(name) and name not in free:
                continue
            value = free[name] if is_free(name) else guard_value(name, self.c, self.d.bounds)
            if value != positive:
                return False
        return True


#: What a run waits for at each halt a person's decision may continue, and the decisions
#: that take it on (the rest of a wait's story: nobody decides, or the wait expires).
_WAITED = {kind: reason for reason, kind in AWAITS.items()}


def _waiting(after: Config, halt: Halt, d: _Decider) -> Node:
    """`halt`, or — where the declaration continues it on a person's decision — the run
    waiting in handoff for that decision (`fsm_agent.runtime.decisions`)."""
    kind = AWAITS.get(halt.reason)
    if kind is None or not d.continues.get(kind):
        return halt
    return after._replace(state=HANDOFF, awaits=kind)


def _decided(c: Config, spec: MachineSpec, live: Liveness, d: _Decider) -> Iterator[Step]:
    """A run waiting for a person: nobody decides (it stays stopped), the wait expires, or
    each decision a declared edge takes — inputs the machine does not control."""
    assert c.awaits is not None  # noqa: S101 - only waiting runs are in handoff
    yield Step(c, "wait", c, None, (), Halt(HANDOFF, _WAITED[c.awaits], c.steps))
    yield Step(c, "wait", c, None, (), Halt(BUDGET_EXHAUSTED, HaltReason.WAIT_EXPIRED, c.steps))
    for trigger in DECISIONS_FOR[c.awaits]:
        after = c._replace(awaits=None, approved=trigger == "approved")
        for chosen, log, later in d.decide(after, trigger):
            if chosen is None:  # no edge takes it: the decision is refused, the run waits
                continue
            refused = contract_refusal(after, chosen, spec)
            if refused is not None:
                halt = Halt(terminal_state(refused[1]), refused[1], after.steps)
                entry = (chosen.index, refused[0], False)
                yield Step(c, trigger, after, chosen, (*log, entry), halt, later, refused[1])
                continue
            yield Step(c, trigger, after, chosen, log, _dest(after, chosen, spec, live, d), later)


def _successors(c: Config, spec: MachineSpec, live: Liveness, d: _Decider) -> Iterator[Step]:
    if c.state == HANDOFF:
        yield from _decided(c, spec, live, d)
        return
    action = d.action[c.state]
    budget = d.budget_edge[c.state]
    tripped = (budget.index, "budget_tripped", True)
    if action == "model" and c.steps >= d.bounds.max_steps:
        yield Step(
            c,
            BUDGET_TRIGGER,
            c,
            budget,
            (tripped,),
            Halt(BUDGET_EXHAUSTED, HaltReason.MAX_STEPS, c.steps),
        )
        return
    # after any action the wall clock or the money meter may trip
    yield Step(
        c,
        BUDGET_TRIGGER,
        c,
        budget,
        (tripped,),
        Halt(BUDGET_EXHAUSTED, HaltReason.WALL_CLOCK, c.steps),
    )
    for trigger, after in outcomes(c, action, live, d.bounds):
        for chosen, log, later in d.decide(after, trigger):
            certain = None if chosen is None else contract_refusal(after, chosen, spec)
            possible = (
                ()
                if chosen is None or certain
                else repeat_refusals(after, chosen, spec, asks=d.continues["approval"])
            )
            for rule, reason in (certain,) if certain else possible:
                assert chosen is not None  # noqa: S101 - refusals are of a chosen edge
                halt = _waiting(after, Halt(terminal_state(reason), reason, after.steps), d)
                entry = (chosen.index, rule, False)
                yield Step(c, trigger, after, chosen, (*log, entry), halt, later, reason)
            if certain is None:
                dest = _dest(after, chosen, spec, live, d)
                yield Step(c, trigger, after, chosen, log, dest, later)


def _dest(
    after: Config, t: TransitionSpec | None, spec: MachineSpec, live: Liveness, d: _Decider
) -> Node:
    if t is None:
        return Halt(HANDOFF, HaltReason.NO_TRANSITION, after.steps)
    retries = min(after.retries + 1, d.bounds.max_retries + 1) if t.retry else after.retries
    dest = d.dest[t.index]
    if dest.terminal:  # the loader gives every edge into a terminal state its halt reason
        return _waiting(after, Halt(dest.name, t.halt or HaltReason.NO_TRANSITION, after.steps), d)
    return live.entering(after._replace(retries=retries), dest.name)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off meanwhile: an exploration is millions of small
    tuples, none of them cyclic, and every collection would walk them all again."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def explore(spec: MachineSpec, bounds: Bounds, limit: int | Work = DEFAULT_LIMIT) -> Exploration:
    """Every configuration reachable from `spec`'s start under `bounds`; raises `TooLarge`
    once the work spent (`Work`: a limit of its own, or one shared with other explorations)
    passes its limit."""
    work = limit if isinstance(limit, Work) else Work(limit, spec.source)
    began = work.spent
    live = Liveness(spec)
    decider = _Decider(spec, bounds, work)
    lanes = (True, False) if live.reads_any("privileged_cleared", "halt_lane_local") else (True,)
    starts = tuple(live.entering(Config(spec.initial, 0, 0, lane), spec.initial) for lane in lanes)
    parent: dict[Node, Step | None] = dict.fromkeys(starts)
    depth: dict[Node, int] = dict.fromkeys(starts, 0)
    steps: dict[Config, tuple[Step, ...]] = {}
    queue = deque(starts)
    with collector_paused():
        _walk(queue, steps, parent, depth, spec, live, decider)
    return Exploration(spec, bounds, starts, steps, parent, depth, work.spent - began)


def _walk(
    queue: deque[Config],
    steps: dict[Config, tuple[Step, ...]],
    parent: dict[Node, Step | None],
    depth: dict[Node, int],
    spec: MachineSpec,
    live: Liveness,
    decider: _Decider,
) -> None:
    spend = decider.work.spend
    while queue:
        c = queue.popleft()
        spend(1)
        out = tuple(_successors(c, spec, live, decider))
        spend(len(out))
        steps[c] = out
        for step in out:
            if step.dest not in parent:
                parent[step.dest] = step
                depth[step.dest] = depth[c] + 1
                if isinstance(step.dest, Config):
                    queue.append(step.dest)
