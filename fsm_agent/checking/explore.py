"""Exhaustive exploration of a declaration's abstract runs (`fsm_agent.checking.model`):
every configuration reachable from the start, every decision the compiled machine's rule
(candidates in declared order, the first whose guards all pass) can make there, breadth
first, so the path kept to each configuration is a shortest one.
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import attrs

from fsm_agent.checking.limits import DEFAULT_LIMIT
from fsm_agent.checking.model import (
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
from fsm_agent.declaration.spec import BUDGET_TRIGGER, MachineSpec, TransitionSpec
from fsm_agent.errors import InvalidInputError
from fsm_agent.halt import BUDGET_EXHAUSTED, HANDOFF, HaltReason, terminal_state


class TooLarge(InvalidInputError):
    """The declaration has more reachable configurations under these budgets than the
    exploration may visit; check it under smaller budgets (the longest-run formula says how
    the runs grow)."""

    def __init__(self, source: str, limit: int) -> None:
        self.source, self.limit = source, limit
        super().__init__(
            f"{source}: more than {limit:,} configurations under these budgets; check with a"
            " smaller --max-steps or --max-retries (the longest-run formula tells how runs"
            " grow), or allow more with --max-configurations"
        )


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
    configurations, branching on free guards."""

    def __init__(self, spec: MachineSpec, bounds: Bounds) -> None:
        self.spec, self.bounds = spec, bounds
        self.table: dict[tuple[str, str], tuple[TransitionSpec, ...]] = {}
        for t in spec.transitions:
            if not t.implicit:
                self.table.setdefault((t.source, t.trigger), ())
                self.table[(t.source, t.trigger)] += (t,)
        self.budget_edge = {t.source: t for t in spec.transitions if t.implicit}
        #: (state, trigger) -> the built-in guards its candidates read: a decision depends
        #: only on their values (the free guards branch the same way for the same values)
        self.reads = {
            key: tuple(sorted({n for t in edges for _, n in map(base, t.guards) if not is_free(n)}))
            for key, edges in self.table.items()
        }
        self._decided: dict[tuple[Any, ...], tuple[Decided, ...]] = {}

    def decide(self, c: Config, trigger: str) -> tuple[Decided, ...]:
        """Every (chosen edge or None, guard log, overlapping later edges) over the free
        guards' values (cached by the values of the guards the candidates read)."""
        key = (c.state, trigger, *(guard_value(n, c, self.bounds) for n in
                                   self.reads.get((c.state, trigger), ())))  # fmt: skip
        found = self._decided.get(key)
        if found is None:
            edges = self.table.get((c.state, trigger), ())
            found = self._decided[key] = tuple(self._try(c, edges, 0, {}, ()))
        return found

    def _try(
        self,
        c: Config,
        edges: tuple[TransitionSpec, ...],
        at: int,
        free: dict[str, bool],
        log: tuple[Logged, ...],
    ) -> Iterator[Decided]:
        if at == len(edges):
            yield None, log, ()
            return
        t = edges[at]
        for passed, more_free, more_log in self._guards(c, t, 0, free, ()):
            if passed:
                later = tuple(e.index for e in edges[at + 1 :] if self._may_pass(c, e, more_free))
                yield t, log + more_log, later
            else:
                yield from self._try(c, edges, at + 1, more_free, log + more_log)

    def _guards(
        self, c: Config, t: TransitionSpec, i: int, free: dict[str, bool], log: tuple[Logged, ...]
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
            values = (free[name] if is_free(name) else guard_value(name, c, self.bounds),)
        for value in values:
            chosen = {**free, name: value} if is_free(name) else free
            result = value if positive else not value
            entry = (*log, (t.index, ref, result))
            if result:
                yield from self._guards(c, t, i + 1, chosen, entry)
            else:
                yield False, chosen, entry

    def _may_pass(self, c: Config, t: TransitionSpec, free: Mapping[str, bool]) -> bool:
        for ref in t.guards:
            positive, name = base(ref)
            if is_free(name) and name not in free:
                continue
            value = free[name] if is_free(name) else guard_value(name, c, self.bounds)
            if value != positive:
                return False
        return True


def _successors(c: Config, spec: MachineSpec, live: Liveness, d: _Decider) -> Iterator[Step]:
    state = spec.state(c.state)
    action = state.action or ""
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
            possible = () if chosen is None or certain else repeat_refusals(after, chosen, spec)
            for rule, reason in (certain,) if certain else possible:
                assert chosen is not None  # noqa: S101 - refusals are of a chosen edge
                halt = Halt(terminal_state(reason), reason, after.steps)
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
    dest = spec.state(t.dest)
    if dest.terminal:  # the loader gives every edge into a terminal state its halt reason
        return Halt(dest.name, t.halt or HaltReason.NO_TRANSITION, after.steps)
    return live.entering(after._replace(retries=retries), dest.name)


def explore(spec: MachineSpec, bounds: Bounds, limit: int = DEFAULT_LIMIT) -> Exploration:
    """Every configuration reachable from `spec`'s start under `bounds`; raises `TooLarge`
    past `limit` configurations."""
    live = Liveness(spec)
    decider = _Decider(spec, bounds)
    lanes = (True, False) if live.reads_any("privileged_cleared", "halt_lane_local") else (True,)
    starts = tuple(live.entering(Config(spec.initial, 0, 0, lane), spec.initial) for lane in lanes)
    parent: dict[Node, Step | None] = dict.fromkeys(starts)
    depth: dict[Node, int] = dict.fromkeys(starts, 0)
    steps: dict[Config, tuple[Step, ...]] = {}
    queue = deque(starts)
    collecting = gc.isenabled()
    gc.disable()  # millions of small tuples, none of them cyclic: the collector only slows it
    try:
        _walk(queue, steps, parent, depth, spec, live, decider, limit)
    finally:
        if collecting:
            gc.enable()
    return Exploration(spec, bounds, starts, steps, parent, depth)


def _walk(
    queue: deque[Config],
    steps: dict[Config, tuple[Step, ...]],
    parent: dict[Node, Step | None],
    depth: dict[Node, int],
    spec: MachineSpec,
    live: Liveness,
    decider: _Decider,
    limit: int,
) -> None:
    while queue:
        if len(steps) >= limit:
            raise TooLarge(spec.source, limit)
        c = queue.popleft()
        out = tuple(_successors(c, spec, live, decider))
        steps[c] = out
        for step in out:
            if step.dest not in parent:
                parent[step.dest] = step
                depth[step.dest] = depth[c] + 1
                if isinstance(step.dest, Config):
                    queue.append(step.dest)
