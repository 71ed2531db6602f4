"""Tools for simulation tests (`fsm-agent simulate --tools tests.fixture_sim_tools`): a
payment with a side effect that is not idempotent, an idempotent capture and a read. Their
bodies are never run by a simulation (results are drawn); they say what a real one does."""

from __future__ import annotations

from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.tools import ToolRegistry, ToolResult

TOOLS = ToolRegistry()


@TOOLS.tool()
def pay(order: str, amount_cents: int) -> ToolResult:
    """Charge an order: a side effect, not idempotent (a second call charges twice)."""
    raise AssertionError("a simulation never calls a tool's own function")


@TOOLS.tool(idempotent=True)
def capture(order: str) -> ToolResult:
    """Capture an order's payment, idempotently (the order id is the key)."""
    return ToolResult(receipts=(Receipt(status=200, id=f"cap:{order}"),), final=order)


@TOOLS.tool(side_effect=False)
def look(q: str = "") -> ToolResult:
    """Look something up."""
    return ToolResult(observation={"q": q})
