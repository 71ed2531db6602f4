"""A sandbox payment gateway whose captures settle only after a set number of attempts.

Every run gets its own `Gateway` through `new_tools()`, so attempt counts never leak from one
run into the next (two runs of one scenario in one process behave the same). `TOOLS` is one
such registry for `fsm-agent run --tools fsm_agent.examples.payments_retry.tools` (one run per
process).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

import attrs

from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.tools import Tool, ToolError, ToolRegistry, ToolResult

#: order id -> attempts answered `206` with an empty id before it settles (None: never).
ORDERS: Final[Mapping[str, int | None]] = MappingProxyType({"ord_1001": 2, "ord_2002": None})


@attrs.define
class Gateway:
    """One run's view of the sandbox gateway: attempts per idempotency key, captures made."""

    attempts: dict[str, int] = attrs.field(factory=dict)
    captures: dict[str, str] = attrs.field(factory=dict)

    def capture(self, order_id: str, amount_cents: int, idempotency_key: str) -> ToolResult:
        """Capture a payment: 206 with an empty id while pending, then 200 with `cap_N`."""
        if order_id not in ORDERS:
            raise ToolError(f"unknown order {order_id!r}", retryable=False)
        key = idempotency_key
        if key not in self.captures:
            self.attempts[key] = self.attempts.get(key, 0) + 1
            pending = ORDERS[order_id]
            if pending is None or self.attempts[key] <= pending:
                observation: dict[str, Any] = {
                    "status": 206,
                    "detail": "capture pending; retry with the same idempotency key",
                }
                return ToolResult(
                    receipts=(Receipt(status=206, id="", idempotency_key=key),),
                    observation=observation,
                )
            self.captures[key] = f"cap_{len(self.captures) + 1}"
        capture_id = self.captures[key]
        return ToolResult(
            receipts=(Receipt(status=200, id=capture_id, idempotency_key=key),),
            observation={"status": 200, "capture_id": capture_id, "amount_cents": amount_cents},
        )


def new_tools() -> ToolRegistry:
    """A fresh registry over a fresh gateway: one per run."""
    gateway = Gateway()
    return ToolRegistry(
        (Tool(name="capture_payment", fn=gateway.capture, privileged=True, idempotent=True),)
    )


TOOLS = new_tools()
