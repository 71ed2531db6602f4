"""The shop's tools (tests/check_fixtures/shop.yaml): a lookup by order id, a privileged
refund, and an audit log the shop's machine does not list (a call of it is refused)."""

from __future__ import annotations

import datetime
from typing import Annotated, Literal

import msgspec

from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.tools import ToolRegistry, ToolResult

TOOLS = ToolRegistry()


@TOOLS.tool(side_effect=False)
def lookup_order(order_id: str) -> ToolResult:
    """Look an order up by its id."""
    return ToolResult(receipts=(Receipt(200, f"order:{order_id}"),), observation={"id": order_id})


@TOOLS.tool(privileged=True)
def refund(
    order_id: str,
    amount_cents: Annotated[int, msgspec.Meta(ge=1, le=50_000)],
    reason: Literal["damaged", "late", "other"],
    requested_at: datetime.datetime,
    note: str = "",
) -> ToolResult:
    """Refund part of an order."""
    return ToolResult(receipts=(Receipt(200, f"refund:{order_id}"),))


@TOOLS.tool(side_effect=False)
def audit_log(since: datetime.date) -> ToolResult:
    """Read the audit log (not on the shop's allow-list)."""
    return ToolResult(observation={"since": since.isoformat()})
