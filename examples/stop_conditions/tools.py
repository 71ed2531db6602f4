"""The stop conditions' search tool: a hit returns `final` with a receipt; a miss returns nothing.

`goal_satisfied` reads the result: only a hit (complete receipt plus `final`) ends a run as
success. There is deliberately no `click_pay` tool: proposing it is refused before it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.tools import ToolRegistry, ToolResult

TOOLS = ToolRegistry()
#: query -> (document id, text). Anything else is a miss.
INDEX: Final[Mapping[str, tuple[str, str]]] = MappingProxyType(
    {"refund window": ("kb:refunds#window", "30 days from delivery")}
)


@TOOLS.tool(side_effect=False)
def search(q: str = "") -> ToolResult:
    """Search the knowledge base; a hit carries a receipt and the final answer."""
    hit = INDEX.get(q.strip().lower())
    if hit is None:
        return ToolResult(observation={"results": [], "hint": "no results; refine the query"})
    doc_id, text = hit
    return ToolResult(
        receipts=(Receipt(status=200, id=doc_id),),
        observation={"results": [{"id": doc_id, "text": text}]},
        final=text,
    )
