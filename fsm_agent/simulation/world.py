"""The simulated world of one run: what the model replies and what each tool returns, all
drawn from the run's tape (`fsm_agent.simulation.tape`), and a ledger of every tool call
actually made (the truth a journal is checked against, crashes included).

Replies are drawn from the proposal shapes the parser takes (`fsm_agent.runtime.proposals`)
and from hostile ones: prose, truncated JSON, `{"done": true}`, unknown tools, arguments
the tool's signature refuses, an empty reply, a failed call, handoffs, answers that quote
a receipted value (grounded) or a number nothing returned (not grounded). Tool results are
200 with an id (with or without the goal value), 206 with an empty id, 200 with an empty
id, a non-2xx receipt, no receipt, retryable and fatal errors, an unexpected exception, and
a hang: the virtual clock jumps past the tool's timeout during the call. Each model call
also takes a drawn time (0 to 950 ms) and costs a drawn amount ($0 to $0.20), so the wall
clock and cost budgets trip too. Draw 0 of each
choice is the plain path (a valid call, a 200 with the goal), so a shrunk tape is simple.

A user action (`package.module:function`) is the user's own code and is called for real,
but it waits on the world (a webhook, a queue, a person): entering its state takes a drawn
time on the virtual clock (10 to 100 ms, never 0), as a live run's wait takes real time. So
a loop through user actions that no model call or counted retry ends is ended by the wall
clock, as it would be live, instead of running on forever at no time.

The tools' own functions are never called: a simulated tool has the real one's name,
signature and declarations (side effect, idempotent, privileged, lane), and its result is
drawn. Its isolation is "inline" (a draw cannot block, and no thread or child is spent on
it): a hang moves the virtual clock past the call's timeout, and the runtime itself refuses
the late result (`fsm_agent.runtime.deadline.run_call`, on the run's clock), so the run
goes on exactly as at a deadline: `tool_timed_out`, no receipts, its side effect pending.
(What differs from a "thread" tool abandoned at its deadline is only the journaled
outcome's words and its `outcome_unknown` flag, which no guard or rule reads.)
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import attrs

from fsm_agent.adapters.models import ModelCallFailed, ModelReply, Prompt
from fsm_agent.journal.store import Event
from fsm_agent.runtime.lanes import LOCAL, Lane
from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.tool_schema import argument_schema
from fsm_agent.runtime.tools import Tool, ToolError, ToolRegistry, ToolResult
from fsm_agent.simulation.clock import VirtualClock
from fsm_agent.simulation.tape import Tape
from fsm_agent.simulation.values import draw_arguments

#: Reply kinds and their weights (index 0 is the simplest: a valid tool call).
REPLIES = (
    ("tool_call", 40),
    ("grounded_answer", 14),
    ("ungrounded_answer", 5),
    ("handoff", 3),
    ("prose", 4),
    ("truncated_json", 4),
    ("done_true", 3),
    ("unknown_tool", 4),
    ("refused_arguments", 4),
    ("empty", 2),
    ("call_failed", 2),
)
#: Tool result kinds and their weights (index 0: 200, an id and the goal value).
RESULTS = (
    ("ok_final", 30),
    ("ok", 12),
    ("pending_206", 8),
    ("empty_id", 4),
    ("status_500", 3),
    ("no_receipt", 5),
    ("retryable_error", 8),
    ("fatal_error", 4),
    ("exception", 2),
    ("hang", 4),
)
#: A model call's latency is 50 ms times a draw below this; a tool call's 10 ms times one;
#: a user action's wait 10 ms times one more than a draw below `TOOL_LATENCY_STEPS`.
MODEL_LATENCY_STEPS = 20
TOOL_LATENCY_STEPS = 10
#: A model call's cost is this many dollars times a draw below `COST_STEPS` (the canonical
#: machine's $1.00 cap trips on some runs).
COST_STEP = 0.05
COST_STEPS = 5


@attrs.define
class World:
    """One run's world: its tape, its clock, what receipted calls returned (for grounded
    answers) and every tool call made, in order, as (tool name, arguments as called)."""

    tape: Tape
    clock: VirtualClock
    tool_timeout_ms: int
    #: the states whose action is a user action (their waits take virtual time)
    waits: frozenset[str] = frozenset()
    returned: list[str] = attrs.field(factory=list)
    ledger: list[tuple[str, str]] = attrs.field(factory=list)

    def entered(self, event: Event) -> None:
        """A transition was journaled: entering a user action's state, the wait its action
        will take passes on the clock (at least 10 ms: a wait is never instant)."""
        if event.dest in self.waits:
            self.clock.advance(10 * (1 + self.tape.choose(TOOL_LATENCY_STEPS)))

    def reply(self, prompt: Prompt) -> ModelReply:
        """The model's reply to one prompt and what it cost (see the module docstring)."""
        self.clock.advance(50 * self.tape.choose(MODEL_LATENCY_STEPS))
        cost = COST_STEP * self.tape.choose(COST_STEPS)
        return ModelReply(content=self._content(prompt), cost=cost)

    def _content(self, prompt: Prompt) -> Any:
        kind = REPLIES[self.tape.weighted([w for _, w in REPLIES])][0]
        tools = [t for t in prompt.tool_specs if t.name in prompt.tools]
        if kind == "tool_call" and tools:
            spec = tools[self.tape.choose(len(tools))]
            return {
                "tool_call": {"name": spec.name, "args": draw_arguments(self.tape, spec.parameters)}
            }
        if kind == "grounded_answer" and self.returned:
            return {"answer": self.returned[self.tape.choose(len(self.returned))]}
        if kind == "refused_arguments" and tools:
            name = tools[self.tape.choose(len(tools))].name
            return {"tool_call": {"name": name, "args": {"__no_such_argument__": 1}}}
        return _hostile(kind, self.tape)

    def result(self, name: str, kwargs: dict[str, Any]) -> ToolResult:
        """What the tool `name` returns (or raises) for a call with `kwargs`; the call is
        entered in the ledger first: it was made, whatever comes of it."""
        self.ledger.append((name, canonical(kwargs)))
        self.clock.advance(10 * self.tape.choose(TOOL_LATENCY_STEPS))
        kind = RESULTS[self.tape.weighted([w for _, w in RESULTS])][0]
        value = f"result_{self.tape.choose(100)}"
        rid = f"{name}:{len(self.ledger)}"
        if kind in ("ok_final", "ok"):
            self.returned.append(value)
            final = value if kind == "ok_final" else None
            receipt = Receipt(status=200, id=rid)
            return ToolResult(receipts=(receipt,), observation={"value": value}, final=final)
        if kind in ("pending_206", "empty_id", "status_500"):
            status, shown = {"pending_206": (206, ""), "empty_id": (200, ""),
                             "status_500": (500, rid)}[kind]  # fmt: skip
            receipt = Receipt(status=status, id=shown)
            return ToolResult(receipts=(receipt,), observation={"status": status})
        if kind == "no_receipt":
            return ToolResult(observation={"value": value})
        if kind in ("retryable_error", "fatal_error"):
            raise ToolError(f"simulated {kind}", retryable=kind == "retryable_error")
        if kind == "exception":
            raise RuntimeError("simulated unexpected exception")
        self.clock.advance(self.tool_timeout_ms + 1)  # a hang: past the tool's timeout
        return ToolResult(observation="came back too late")


def _hostile(kind: str, tape: Tape) -> Any:
    """A reply that is not a usable tool call (or one for an unknown tool)."""
    if kind in ("tool_call", "grounded_answer", "ungrounded_answer", "refused_arguments"):
        return {"answer": f"The answer is {1000 + tape.choose(9000)}."}
    if kind == "handoff":
        return {"handoff": {"why": "simulated: a person should look at this"}}
    if kind == "prose":
        return "I have looked into it and I think we are done here."
    if kind == "truncated_json":
        return '{"tool_call": {"name": "lo'
    if kind == "done_true":
        return {"done": True}
    if kind == "unknown_tool":
        return {"tool_call": {"name": "click_pay", "args": {}}}
    if kind == "empty":
        return None
    raise ModelCallFailed("simulated_http_503", "the simulated endpoint failed", raw="busy")


def canonical(args: Any) -> str:
    """Arguments as one comparable text."""
    return json.dumps(args, sort_keys=True, default=repr)


class Stage:
    """Where the simulated model and tools find the world of the run being simulated: one
    model and one registry serve every run of a simulation (a tool's argument schema is
    built once), each run setting `world` before it starts."""

    def __init__(self) -> None:
        self.world: World | None = None

    def current(self) -> World:
        if self.world is None:
            raise RuntimeError("no simulated run is on stage")
        return self.world


class SimModel:
    """A model whose replies are drawn from the world on stage. A draw cannot block."""

    lane: Lane = LOCAL
    isolation = "inline"

    def __init__(self, stage: Stage) -> None:
        self.stage = stage

    def __call__(self, prompt: Prompt) -> ModelReply:
        return self.stage.current().reply(prompt)


def _simulated(stage: Stage, tool: Tool) -> Callable[..., Any]:
    """A function with `tool`'s signature whose result is drawn (the real one is not called)."""

    @functools.wraps(tool.fn)
    def call(**kwargs: Any) -> ToolResult:
        return stage.current().result(tool.name, kwargs)

    return call


def simulated_tools(stage: Stage, real: ToolRegistry) -> ToolRegistry:
    """A registry of the same tools, declared the same way, their results drawn."""
    registry = ToolRegistry()
    for tool in real:
        argument_schema(tool.fn, tool.name)  # an annotation that does not resolve: say so now
        registry.add(attrs.evolve(tool, fn=_simulated(stage, tool), isolation="inline"))
    return registry
