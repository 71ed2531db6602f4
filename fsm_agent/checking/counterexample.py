"""A counterexample path as a run file: the real runtime driven along the path, exported.

The model is a `ScriptedModel` of the replies the path needs (a tool call that is or is not
allow-listed and privileged, a grounded or an ungrounded answer, a handoff, an empty or a
prose reply; a call that repeats an earlier one where the path's decision is refused for
that); the tools (`fsm_agent.checking.standins`: with `check --tools`, the module's own
tools by name, signature and flags, with arguments that fit them) return what the path
needs (complete or incomplete receipts, a final value or none, a retryable, a fatal or an
unexplained error, a hang past the tool's time cap); the clock is virtual; the journal a
temporary SQLite file. The run is then exported like any run, so `replay --step`,
`diagram --run` and `report` open it, and its replay verifies it.

After the path: a loop (`halts`) goes on repeating, its tools answering as they did in the
loop, until the virtual clock reaches the wall clock; any other path that has not halted
ends with the model handing off at its next call (the clock ends a run that calls none).
The written file is then held to what the counterexample names (`fsm_agent.checking.witness`).

What no script can force is left to the declaration's own code: a user guard or a user
action runs as written, a halt lane off the local tier is refused at the start by the
runtime. Where the real run leaves the path, `Counterexample.diverged` says where and why
(the run file shows the run that really happened).
"""

from __future__ import annotations

import itertools
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from fsm_agent.checking.explore import Halt, Step
from fsm_agent.checking.properties import Verdict
from fsm_agent.checking.standins import Cast, Part, cast, part
from fsm_agent.checking.witness import RUNTIME, witness
from fsm_agent.declaration.spec import BUDGET_TRIGGER, MachineSpec
from fsm_agent.halt import HaltReason
from fsm_agent.journal.store import Event

if TYPE_CHECKING:
    from fsm_agent.runtime.tools import ToolRegistry

#: What a grounded answer says, and the value the generated tools return.
VALUE = "V-4242"
UNGROUNDED = "the answer is 918273645"
#: The tool time cap of a run whose path has a tool hang past it (ms), and the hang (s).
SHORT_TIMEOUT_MS, HANG_S = 100, 0.4
#: Transitions past the path before the virtual clock reaches the wall clock (a loop: at
#: least two more times round it).
TAIL = 4


@attrs.frozen
class Counterexample:
    """A run file written for a refuted property: where the real run left the path (None:
    it did not), what the file shows replayed, and what its reader should know."""

    path: Path
    diverged: str | None
    shows: str = ""
    notes: tuple[str, ...] = ()


class _Clock:
    """A virtual clock moved by the run's transitions, never by how often it is read (the
    runtime's supervisor reads it as often as the machine's load lets it): 1 ms a
    transition along the path, then 1/`tail` of the wall clock a transition (a loop the
    path ends in repeats, then the wall clock stops it); past the wall clock once
    `trip` transitions are made, for a path that ends with the wall clock."""

    def __init__(self, wall_ms: int, path_length: int, tail: int, trip: int | None) -> None:
        self.wall_ms, self.length, self.tail, self.seen = wall_ms, path_length, tail, 0
        self.trip, self.begun = trip, False

    def __call__(self) -> float:
        if self.begun and self.trip is not None and self.seen >= self.trip:
            return (self.wall_ms + self.seen) / 1000
        past = max(0, self.seen - self.length)
        return (self.seen + past * self.wall_ms / self.tail) / 1000

    def saw(self, event: Event) -> None:
        self.begun = True  # the run's start is read: the wall clock counts from it
        if event.kind == "transition":
            self.seen += 1


def _does(spec: MachineSpec, s: Step, action: str) -> bool:
    """Step `s` is an outcome of `action` (not a meter check)."""
    return s.trigger != BUDGET_TRIGGER and spec.state(s.source.state).action == action


def _halts(s: Step, reason: HaltReason) -> bool:
    return isinstance(s.dest, Halt) and s.dest.reason is reason


def _rule(s: Step) -> str | None:
    """The contract rule that refused the step's decision (`repeat`, …), or None."""
    return next((r[len(RUNTIME) :] for _, r, ok in s.log if r.startswith(RUNTIME) and not ok), None)


@attrs.frozen
class _Call:
    """One tool call the path's model proposes: its part, and the earlier call it repeats."""

    allowed: bool
    privileged: bool
    repeats: int | None = None


@attrs.define
class _Script:
    """The calls the model proposes, and what each tool step needs of the call it makes."""

    calls: list[_Call] = attrs.field(factory=list)
    #: call index -> a write is needed (True), a read (False); absent: either (a read is
    #: made: the contract's rules on repeats and pending effects bind writes only)
    write: dict[int, bool] = attrs.field(factory=dict)
    #: calls whose failure must leave their outcome unknown (a later call re-issues them)
    unknown: set[int] = attrs.field(factory=set)
    #: per model step, the call it proposes (or None)
    proposes: list[int | None] = attrs.field(factory=list)
    #: per tool step, the call it runs
    runs: list[int] = attrs.field(factory=list)
    #: the thrash limit the path needs: 2 (a call repeats the one before it), 1 (its first
    #: call thrashes already), or 0 (off)
    thrash_limit: int = 0

    def root(self, k: int) -> int:
        """The first call of which call `k` is a repeat (itself if none)."""
        repeats = self.calls[k].repeats
        return k if repeats is None else repeats

    def part(self, k: int) -> Part:
        c = self.calls[k]
        return part(c.allowed, c.privileged, self.write.get(k, False))


def _script(spec: MachineSpec, path: tuple[Step, ...]) -> _Script:
    """Which call each step makes, and what its outcomes need of the tool that plays it."""
    out = _Script()
    current: int | None = None
    completed: list[int] = []  # calls whose receipts came back complete (repeat candidates)
    unknown: list[int] = []  # calls whose outcome may be unknown (re-issue candidates)
    for s in path:
        if s.trigger == BUDGET_TRIGGER:
            continue
        action = spec.state(s.source.state).action
        c = s.after
        if action == "model":
            if c.kind != "tool_call":
                out.proposes.append(None)
                continue
            rule = _rule(s)
            earlier = {"repeat": completed, "unknown_effect": unknown}.get(rule or "")
            repeats = earlier[-1] if earlier else None
            if repeats is not None:  # the contract refuses a re-issue of a write
                out.write[repeats] = True
                if rule == "unknown_effect":
                    out.unknown.add(repeats)
            if c.thrash:
                out.thrash_limit = out.thrash_limit or (1 if current is None else 2)
                if repeats is None and current is not None:
                    repeats = out.root(current)
            if repeats is not None:
                call = attrs.evolve(out.calls[repeats], repeats=repeats)
            else:
                call = _Call(c.allowed, c.privileged)
            out.calls.append(call)
            current = len(out.calls) - 1
            out.proposes.append(current)
        elif action == "tool":
            k = -1 if current is None else out.root(current)
            out.runs.append(k)
            if k < 0:
                continue
            need = _write_need(s)
            if need is not None:
                out.write[k] = out.write.get(k, need) or need
            if c.tool == "returned" and c.complete:
                completed.append(k)
            elif c.tool in ("timed_out", "failed"):
                unknown.append(k)
    return out


def _write_need(s: Step) -> bool | None:
    """Whether the tool step's outcome needs its call to be a write (True), a read (False),
    or either (None), by what happened to the pending side effects."""
    before, after = s.source.pending, s.after.pending
    if s.after.tool == "returned" and s.after.complete:
        return True if before and not after else None
    if before:
        return None
    return after


def _replies(script: _Script, path: tuple[Step, ...], spec: MachineSpec, who: Cast) -> list[Any]:
    replies: list[Any] = []
    args: dict[int, dict[str, Any]] = {}
    counts: dict[str, int] = {}
    asks = [s for s in path if _does(spec, s, "model")]
    for s, k in zip(asks, script.proposes, strict=True):
        c = s.after
        if k is not None:
            first = script.root(k)
            name = who.name(script.part(first))
            if first not in args:
                n = counts.get(name, 0)
                counts[name] = n + 1
                args[first] = who.arguments(name, n, distinct=True)
            replies.append({"tool_call": {"name": name, "args": args[first]}})
        elif c.kind == "answer":
            replies.append({"answer": VALUE if c.grounded else UNGROUNDED})
        elif c.kind == "handoff":
            replies.append({"handoff": {"why": "the checker's path asks for a person"}})
        else:
            replies.append(None if c.empty else "prose, not a proposal")
    return [*replies, {"handoff": {"why": "the checker's path ends here"}}]


def _outcomes(
    spec: MachineSpec, verdict: Verdict, script: _Script
) -> Iterator[tuple[Step, int] | None]:
    """What each tool call of the run returns: the path's tool steps, then (a loop) its
    loop's over and over, else None (incomplete receipts)."""
    path = verdict.path
    tools = [n for n, s in enumerate(path) if _does(spec, s, "tool")]
    ran = [(n, k) for n, k in zip(tools, script.runs, strict=True) if k >= 0]
    yield from ((path[n], k) for n, k in ran)  # a tool state with no call runs no tool
    if verdict.loop_from is not None:
        again = [(path[n], k) for n, k in ran if n >= verdict.loop_from]
        if again:
            yield from itertools.cycle(again)
    yield from itertools.repeat(None)


def _body(spec: MachineSpec, verdict: Verdict, script: _Script) -> Any:
    """The one body every stand-in tool runs: the next outcome the path needs."""
    from fsm_agent.runtime.receipts import Receipt
    from fsm_agent.runtime.tools import ToolError, ToolResult

    outcomes = _outcomes(spec, verdict, script)

    def body() -> Any:
        planned = next(outcomes)
        if planned is None:
            return ToolResult(receipts=(Receipt(206, ""),))
        s, k = planned
        if s.trigger == "tool_failed":
            if k in script.unknown and not s.after.retryable:
                raise RuntimeError("the checker's path fails this call, saying nothing more")
            raise ToolError("the checker's path fails this call", retryable=s.after.retryable)
        if s.trigger == "tool_timed_out":
            time.sleep(HANG_S)
        receipt = Receipt(200, f"r-{k}") if s.after.complete else Receipt(206, "")
        return ToolResult(
            receipts=(receipt,),
            observation={"value": VALUE},
            final=VALUE if s.after.final else None,
        )

    return body


def _judge(path: tuple[Step, ...]) -> Any:
    """A local judge that vetoes exactly where the path's judge did."""
    from fsm_agent.runtime.lanes import LOCAL

    vetoes = {
        s.after.steps for s in path if any(r == "judge_agrees" and not ok for _, r, ok in s.log)
    }
    if not vetoes:
        return None

    def judge(snapshot: Any) -> bool:
        return snapshot.meters.steps_used not in vetoes

    judge.lane = LOCAL  # type: ignore[attr-defined]
    return judge


def _repair(path: tuple[Step, ...]) -> Any:
    """A repair voter off the local lane when the path's rejections were refused a vote."""
    from fsm_agent.runtime.lanes import Lane

    if not any(s.after.kind == "rejected" and s.after.refused for s in path):
        return None

    def voter(raw: Any) -> Any:
        return raw

    voter.lane = Lane(kind="http", tier="free")  # type: ignore[attr-defined]
    return voter


def write_counterexample(
    spec: MachineSpec,
    verdict: Verdict,
    budgets: dict[str, int],
    directory: Path,
    tools: ToolRegistry | None = None,
) -> Counterexample:
    """Drive the runtime along `verdict.path` and write the run as
    `directory/<machine>-<property>.json`; `tools`: the machine's tools module, whose tools
    (by name, signature and flags) the run's calls then use. Raises `ArgumentsRefused`
    when no arguments that fit a tool's signature can be built."""
    from fsm_agent import ScriptedModel
    from fsm_agent.journal.runfile import export_run, write_run_file
    from fsm_agent.runtime.worker import run
    from fsm_agent.stores.sqlite import SqliteStore

    path = verdict.path
    script = _script(spec, path)
    parts = {script.part(script.root(k)) for k in range(len(script.calls))}
    who = cast(spec, parts, _body(spec, verdict, script), tools)
    replies = _replies(script, path, spec, who)
    caps = dict(budgets)
    if any(s.trigger == "tool_timed_out" for s in path):
        caps["tool_timeout_ms"] = SHORT_TIMEOUT_MS
    loop = 0 if verdict.loop_from is None else len(path) - verdict.loop_from
    trip = next((n for n, s in enumerate(path) if _halts(s, HaltReason.WALL_CLOCK)), None)
    clock = _Clock(int(spec.budgets["wall_clock_ms"]), len(path), max(TAIL, 2 * loop), trip)
    task = f"the checker's counterexample of {spec.name}'s {verdict.name}: {verdict.summary}"
    with tempfile.TemporaryDirectory(prefix="fsm-agent-check-") as tmp:
        store = SqliteStore(Path(tmp) / "check.db")
        try:
            record = run(
                spec,
                task=" ".join((task, *who.notes)),
                model=ScriptedModel(replies),
                tools=who.registry,
                allow=who.allow,
                store=store,
                budgets=caps,
                clock=clock,
                on_transition=clock.saw,
                handle_signals=False,
                judge=_judge(path),
                repair=_repair(path),
                thrash_limit=script.thrash_limit,
            )
            run_file = export_run(store, record.run_id)
        finally:
            store.close()
    directory.mkdir(parents=True, exist_ok=True)
    written = write_run_file(run_file, directory / f"{spec.name}-{verdict.name}.json")
    seen = witness(spec, verdict, run_file)
    return Counterexample(written, seen.diverged, seen.shows, who.notes)
