"""The lab's tools. `lookup` always says "try again" unless it knows the fact.

`slow_lookup` sleeps for the time its `sleep_ms` argument names (the wall-clock checkpoint,
no environment needed); `lookup` still honours `LOOKUP_SLEEP_MS` (the lab's original knob); `hang`
never returns in time.
"""

from __future__ import annotations

import os
import time

from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.tools import ToolRegistry, ToolResult

TOOLS = ToolRegistry()
FACTS = {"lab password": "swordfish"}


def _answer(q: str) -> ToolResult:
    key = q.strip().lower()
    fact = FACTS.get(key)
    if fact is None:
        return ToolResult(observation="No exact match. Refine your query and look up again.")
    return ToolResult(receipts=(Receipt(status=200, id=f"fact:{key}"),), observation={"fact": fact})


@TOOLS.tool(side_effect=False)
def lookup(q: str = "") -> ToolResult:
    """Look a fact up. A hit carries a receipt; a miss says to refine the query (a trap)."""
    delay_ms = int(os.environ.get("LOOKUP_SLEEP_MS", "0") or 0)
    if delay_ms:
        time.sleep(delay_ms / 1000)
    return _answer(q)


@TOOLS.tool(side_effect=False)
def slow_lookup(q: str = "", sleep_ms: int = 3000) -> ToolResult:
    """`lookup` after sleeping `sleep_ms` milliseconds: it would succeed, but too late."""
    time.sleep(max(0, sleep_ms) / 1000)
    return _answer(q)


@TOOLS.tool(side_effect=False)
def hang(seconds: float = 30.0) -> ToolResult:
    """A tool that does not come back in time."""
    time.sleep(seconds)
    return ToolResult(observation="woke up")
