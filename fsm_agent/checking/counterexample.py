"""A counterexample path as a run file: the real runtime driven along the path, exported.

The model is a `ScriptedModel` of the replies the path needs (a tool call that is or is not
allow-listed and privileged, a grounded or an ungrounded answer, a handoff, an empty or a
prose reply); the tools are generated and return what the path needs (complete or
incomplete receipts, a final value or none, a retryable or a fatal error, a hang past the
tool's time cap); the clock is virtual; the journal a temporary SQLite file. The run is then
exported like any run, so `replay --step`, `diagram --run` and `report` open it, and its
replay verifies it.

What no script can force is left to the declaration's own code: a user guard or a user
action runs as written, a halt lane off the local tier is refused at the start by the
runtime. Where the real run leaves the path, `Counterexample.diverged` says where and why
(the run file shows the run that really happened).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from fsm_agent.checking.explore import Halt, Step
from fsm_agent.checking.properties import Verdict
from fsm_agent.declaration.spec import BUDGET_TRIGGER, MachineSpec
from fsm_agent.journal.store import Event

#: What a grounded answer says, and the value the generated tools return.
VALUE = "V-4242"
UNGROUNDED = "the answer is 918273645"
TOOL, PRIVILEGED, UNLISTED = "checker_tool", "checker_privileged", "checker_unlisted"
#: The tool time cap of a run whose path has a tool hang past it (ms), and the hang (s).
SHORT_TIMEOUT_MS, HANG_S = 100, 0.4


@attrs.frozen
class Counterexample:
    """A run file written for a refuted property, and where the real run left the path."""

    path: Path
    diverged: str | None


class _Clock:
    """A virtual clock moved by the run's transitions, never by how often it is read (the
    runtime's supervisor reads it as often as the machine's load lets it): 1 ms a
    transition along the path, then a quarter of the wall clock a transition (a loop the
    path ends in repeats a few times, then the wall clock stops it)."""

    def __init__(self, wall_ms: int, path_length: int) -> None:
        self.wall_ms, self.length, self.seen = wall_ms, path_length, 0

    def __call__(self) -> float:
        past = max(0, self.seen - self.length)
        return (self.seen + past * self.wall_ms / 4) / 1000

    def saw(self, event: Event) -> None:
        if event.kind == "transition":
            self.seen += 1


def _action_steps(spec: MachineSpec, path: tuple[Step, ...], action: str) -> Iterator[Step]:
    for s in path:
        if s.trigger != BUDGET_TRIGGER and spec.state(s.source.state).action == action:
            yield s


def _tool_name(s: Step, allowed: str) -> str:
    c = s.after
    if not c.allowed:
        return UNLISTED
    return PRIVILEGED if c.privileged and allowed == TOOL else allowed


def _replies(spec: MachineSpec, path: tuple[Step, ...], allowed: str) -> list[Any]:
    replies: list[Any] = []
    last: dict[str, Any] | None = None
    for n, s in enumerate(_action_steps(spec, path, "model")):
        c = s.after
        if c.kind == "tool_call":
            call = {"name": _tool_name(s, allowed), "args": {"call": n}}
            if c.thrash and last is not None:
                call = last
            last = call
            replies.append({"tool_call": call})
        elif c.kind == "answer":
            replies.append({"answer": VALUE if c.grounded else UNGROUNDED})
        elif c.kind == "handoff":
            replies.append({"handoff": {"why": "the checker's path asks for a person"}})
        else:
            replies.append(None if c.empty else "prose, not a proposal")
    return [*replies, {"handoff": {"why": "the checker's path ends here"}}]


def _results(spec: MachineSpec, path: tuple[Step, ...]) -> list[tuple[str, Step]]:
    return [(s.trigger, s) for s in _action_steps(spec, path, "tool")]


def _registry(spec: MachineSpec, path: tuple[Step, ...]) -> tuple[Any, str]:
    """The generated tools and the allow-listed name tool calls use."""
    from fsm_agent.runtime.receipts import Receipt
    from fsm_agent.runtime.tools import Tool, ToolError, ToolRegistry, ToolResult

    script = _results(spec, path)

    def scripted(call: int = 0) -> Any:
        """Return what the checker's path needs from this call."""
        if not script:
            return ToolResult(receipts=(Receipt(206, ""),))
        trigger, s = script.pop(0)
        if trigger == "tool_failed":
            raise ToolError("the checker's path fails this call", retryable=s.after.retryable)
        if trigger == "tool_timed_out":
            time.sleep(HANG_S)
        receipt = Receipt(200, f"r-{call}") if s.after.complete else Receipt(206, "")
        return ToolResult(
            receipts=(receipt,),
            observation={"value": VALUE},
            final=VALUE if s.after.final else None,
        )

    wants_privileged = any(
        s.after.kind == "tool_call" and s.after.privileged
        for s in _action_steps(spec, path, "model")
    )
    if spec.tools:
        name = spec.tools[0]
        return ToolRegistry((Tool(name, scripted, privileged=wants_privileged),)), name
    return ToolRegistry((Tool(TOOL, scripted), Tool(PRIVILEGED, scripted, privileged=True))), TOOL


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


def _diverged(path: tuple[Step, ...], events: tuple[Event, ...]) -> str | None:
    moves = [e for e in events if e.kind == "transition"]
    if not path[0].source.lane_local:
        return "the path needs a halt lane off the local tier, which the runtime refuses at start"
    for n, s in enumerate(path):
        if n >= len(moves):
            return f"the run halted before step {n + 1} of the path"
        e = moves[n]
        if (e.source, e.trigger, e.dest) != (s.source.state, s.trigger, s.dest.state):
            return (
                f"step {n + 1}: the path goes {s.source.state} --{s.trigger}--> {s.dest.state},"
                f" the run went {e.source} --{e.trigger}--> {e.dest} (a user guard or"
                " action decides here, as written)"
            )
    return None


def write_counterexample(
    spec: MachineSpec, verdict: Verdict, budgets: dict[str, int], directory: Path
) -> Counterexample:
    """Drive the runtime along `verdict.path` and write the run as
    `directory/<machine>-<property>.json`."""
    from fsm_agent import ScriptedModel
    from fsm_agent.journal.runfile import export_run, write_run_file
    from fsm_agent.runtime.worker import run
    from fsm_agent.stores.sqlite import SqliteStore

    path = verdict.path
    tools, allowed = _registry(spec, path)
    caps = dict(budgets)
    if any(s.trigger == "tool_timed_out" for s in path):
        caps["tool_timeout_ms"] = SHORT_TIMEOUT_MS
    wall = int(spec.budgets["wall_clock_ms"])
    clock = _Clock(wall, len(path))
    with tempfile.TemporaryDirectory(prefix="fsm-agent-check-") as tmp:
        store = SqliteStore(Path(tmp) / "check.db")
        try:
            record = run(
                spec,
                task=f"the checker's counterexample: {verdict.name}",
                model=ScriptedModel(_replies(spec, path, allowed)),
                tools=tools,
                store=store,
                budgets=caps,
                clock=clock,
                on_transition=clock.saw,
                handle_signals=False,
                judge=_judge(path),
                repair=_repair(path),
                thrash_limit=_thrash(path),
            )
            run_file = export_run(store, record.run_id)
        finally:
            store.close()
    directory.mkdir(parents=True, exist_ok=True)
    written = write_run_file(run_file, directory / f"{spec.name}-{verdict.name}.json")
    return Counterexample(written, _diverged(path, run_file.events))


def _thrash(path: tuple[Step, ...]) -> int:
    """2 when the path repeats a tool call to thrash (the second identical call trips)."""
    return 2 if any(s.after.kind == "tool_call" and s.after.thrash for s in path) else 0


def final_halt(path: tuple[Step, ...]) -> Halt | None:
    last = path[-1].dest if path else None
    return last if isinstance(last, Halt) else None
