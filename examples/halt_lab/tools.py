"""The lab's tools. `lookup` always says "try again" unless it knows the fact.

`LOOKUP_SLEEP_MS` makes it slow (the wall-clock checkpoint); `hang` never returns.
"""

from __future__ import annotations

import os
import time

from fsm_agent.receipts import Receipt
from fsm_agent.tools import ToolRegistry, ToolResult

TOOLS = ToolRegistry()
FACTS = {"lab password": "swordfish"}


@TOOLS.tool()
def lookup(q: str = "") -> ToolResult:
    """Look a fact up. A hit carries a receipt; a miss says to refine the query (a trap)."""
    delay_ms = int(os.environ.get("LOOKUP_SLEEP_MS", "0") or 0)
    if delay_ms:
        time.sleep(delay_ms / 1000)
    fact = FACTS.get(q.strip().lower())
    if fact is None:
        return ToolResult(observation="No exact match. Refine your query and look up again.")
    return ToolResult(
        receipts=(Receipt(status=200, id=f"fact:{q.strip().lower()}"),), observation={"fact": fact}
    )


@TOOLS.tool()
def hang(seconds: float = 30.0) -> ToolResult:
    """A tool that does not come back in time."""
    time.sleep(seconds)
    return ToolResult(observation="woke up")
