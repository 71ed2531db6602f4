"""Tools and a model for the run-queue tests (`tests.test_queue`), run in worker processes.

The task says how a run goes, so its halt is known in advance whoever runs it:

- `steps N`: N calls of the idempotent `step` tool, each receipted, the last with the goal
  → `completed` after N model calls (a call cut off by a kill is re-issued on resume);
- `charge N`: the same with the non-idempotent `charge` → `completed`, or
  `side_effect_unknown` when a worker died inside a call;
- `handoff`: one `step`, then a handoff → `handoff_requested`;
- `loop`: `step` calls that never reach the goal → `max_steps`;
- `gated steps N`: `steps N`, each model reply waiting for the file named by
  FSM_AGENT_QUEUE_GATE (a test acts meanwhile).

Every model reply carries the pid of the process that made it (`by`), and every tool result
the pid of the process that ran it, so a test can tell from the journal alone which worker
process wrote which part of a run. FSM_AGENT_QUEUE_STEP_MS makes each tool call sleep.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from fsm_agent import Prompt, Receipt, Tool, ToolRegistry, ToolResult

STEP_MS_ENV = "FSM_AGENT_QUEUE_STEP_MS"
GATE_ENV = "FSM_AGENT_QUEUE_GATE"
FINAL = "all steps done"


def _step(n: int, of: int, by: int) -> ToolResult:
    delay_ms = int(os.environ.get(STEP_MS_ENV, "0") or 0)
    if delay_ms:
        time.sleep(delay_ms / 1000)
    last = n >= of
    return ToolResult(
        receipts=(Receipt(status=200, id=f"step-{n}"),),
        observation={"n": n, "pid": os.getpid()},
        final=FINAL if last else None,
    )


def step(n: int, of: int, by: int) -> ToolResult:
    """Step n of `of` (idempotent), receipted; the last one carries the goal."""
    return _step(n, of, by)


def charge(n: int, of: int, by: int) -> ToolResult:
    """`step`, but not idempotent: a call cut off is a side effect of unknown outcome."""
    return _step(n, of, by)


def new_tools() -> ToolRegistry:
    return ToolRegistry(
        (
            Tool(name="step", fn=step, idempotent=True, isolation="inline"),
            Tool(name="charge", fn=charge, isolation="inline"),
        )
    )


def expected(task: str) -> set[str]:
    """The halt reasons a run of `task` may end with."""
    kind = task.split()[0]
    if kind == "charge":
        return {"completed", "side_effect_unknown"}
    return {"steps": {"completed"}, "gated": {"completed"}, "handoff": {"handoff_requested"},
            "loop": {"max_steps"}}[kind]  # fmt: skip


def oracle(prompt: Prompt) -> Any:
    """The reply the task calls for, given the tool results so far."""
    words = prompt.task.split()
    if words[0] == "gated":
        gate = Path(os.environ[GATE_ENV])
        deadline = time.monotonic() + 60
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        words = words[1:]
    done = sum(1 for note in prompt.history if note.get("role") == "tool")
    pid = os.getpid()
    if words[0] == "handoff" and done >= 1:
        return {"handoff": {"why": "the task asks for a person"}}
    tool = "charge" if words[0] == "charge" else "step"
    of = int(words[1]) if len(words) > 1 else 10_000
    return {"tool_call": {"name": tool, "args": {"n": done + 1, "of": of, "by": pid}}}


oracle.isolation = "inline"  # type: ignore[attr-defined]
