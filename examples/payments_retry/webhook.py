"""The user action of state `awaiting_webhook`: wait for the gateway's capture webhook.

In this sandbox the gateway fires `capture.succeeded` for every settled capture, so the
webhook is derived from the capture receipt in the snapshot; a real listener would wait on
its queue under the state's time cap (a timeout fires `timed_out`, an error `failed`).
"""

from __future__ import annotations

from fsm_agent import ActionResult, Receipt, Snapshot, ToolResult
from fsm_agent.runtime.receipts import receipt_ok


def await_capture_webhook(snapshot: Snapshot) -> ActionResult:
    """`webhook_received` with the webhook's receipt and the capture id, or `no_webhook`."""
    tool = snapshot.tool
    settled = [r for r in tool.receipts if receipt_ok(r)] if tool is not None else []
    if tool is None or tool.status != "returned" or not settled:
        return ActionResult(outcome="no_webhook")
    capture = settled[0]
    event = Receipt(status=200, id=f"evt_{capture.id}", idempotency_key=capture.idempotency_key)
    return ActionResult(
        outcome="webhook_received",
        result=ToolResult(
            receipts=(event,),
            observation={"type": "capture.succeeded", "capture_id": capture.id},
            final=capture.id,
        ),
    )
