"""The worker-scaling case's model and tools, loaded by each worker process by name.

`python:tests.bench.queue_stub:model` proposes `lookup(step, of)` on every step, `of` being
the run's step budget; `TOOLS` answers at once, receipted with the goal on the last step, so
every run halts `completed` after exactly `max_steps` model calls (three transitions each).
"""

from __future__ import annotations

from typing import Any

from fsm_agent import Prompt, Receipt, ToolRegistry, ToolResult

TOOLS = ToolRegistry()


@TOOLS.tool(idempotent=True, side_effect=False)
def lookup(step: int, of: int) -> ToolResult:
    """Row `step` of `of`; the last one is receipted and carries the goal."""
    last = step >= of
    return ToolResult(
        receipts=(Receipt(status=200, id=f"rcpt-{step}"),) if last else (),
        observation={"row": step},
        final="found" if last else None,
    )


def model(prompt: Prompt) -> dict[str, Any]:
    """The next lookup, at once."""
    return {"tool_call": {"name": "lookup", "args": {"step": prompt.step, "of": prompt.max_steps}}}
