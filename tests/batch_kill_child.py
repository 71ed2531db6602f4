"""A run SIGKILLed at a chosen point, for the commit-batching tests (`tests/test_batching.py`).

    python -m tests.batch_kill_child DB RECORD POINT EFFECT

runs `agent_loop` (look up the lab password, then answer) with `lookup` declared as a read
(EFFECT `read`) or as a call with a side effect (`write`), and kills itself with SIGKILL
at POINT: `receipts` (the receipts check after the lookup returned: no commit since the
lookup's result), `model` (the second model call: everything before it is flushed).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from fsm_agent import Prompt, Receipt, Tool, ToolRegistry, ToolResult, run
from fsm_agent.runtime import actions
from tests.lab import granted

LOOKUP = {"tool_call": {"name": "lookup", "args": {"q": "lab password"}}}
ANSWER = {"answer": "swordfish"}


def tools(effect: str, calls: list[str]) -> ToolRegistry:
    """`lookup`, a read or a call with a side effect; each call is appended to `calls`."""

    def lookup(q: str) -> ToolResult:
        calls.append(q)
        return ToolResult(receipts=(Receipt(status=200, id="fact:1"),), observation="swordfish")

    return ToolRegistry((Tool(name="lookup", fn=lookup, side_effect=effect == "write"),))


def _die(*_: Any) -> Any:
    os.kill(os.getpid(), signal.SIGKILL)


def main(db: str, record: str, point: str, effect: str) -> None:
    asked: list[int] = []

    def model(prompt: Prompt) -> dict[str, Any]:
        asked.append(prompt.step)
        if point == "model" and len(asked) == 2:
            _die()
        return LOOKUP if len(asked) == 1 else ANSWER

    if point == "receipts":
        actions._collect_receipts = _die  # type: ignore[assignment]
    run("agent_loop", task="find the lab password", model=model, **granted(tools(effect, [])),
        store=db, record_path=record, run_id="killed")  # fmt: skip


if __name__ == "__main__":
    main(*sys.argv[1:5])
