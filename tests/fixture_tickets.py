"""Tools for the false-success tests (`--tools tests.fixture_tickets`): a ticket desk and a
vault, as the incidents were reported.

- `lookup_ticket` is declared as a read; `close_ticket` declares nothing, so it is
  side-effecting by default. `close_ticket` answers `206` with an empty id until the same
  ticket was asked `CLOSE_SETTLES_AFTER` times (env FSM_AGENT_TEST_CLOSE_AFTER, default:
  never), then `200` with the ticket id.
- `lookup` (a read) returns the vault code `tangerine-42` with receipt `doc:vault-7`.
- `tests.fixture_tickets:ticket_frozen` is a user guard: true when the proposed call names
  the ticket `T-999`.
"""

from __future__ import annotations

import os
from collections import Counter

from fsm_agent import Receipt, Snapshot, ToolRegistry, ToolResult
from fsm_agent.runtime.proposals import ToolCall

CLOSE_AFTER_ENV = "FSM_AGENT_TEST_CLOSE_AFTER"


def new_tools() -> ToolRegistry:
    """A fresh desk per run (close attempts are counted per run)."""
    tools = ToolRegistry()
    attempts: Counter[str] = Counter()

    @tools.tool(side_effect=False)
    def lookup_ticket(ticket: str) -> ToolResult:
        return ToolResult(
            receipts=(Receipt(status=200, id=ticket),),
            observation={"id": ticket, "status": "open", "title": "Printer on fire"},
        )

    @tools.tool()
    def close_ticket(ticket: str) -> ToolResult:
        attempts[ticket] += 1
        after = int(os.environ.get(CLOSE_AFTER_ENV, "0") or 0)
        if after and attempts[ticket] >= after:
            return ToolResult(
                receipts=(Receipt(status=200, id=ticket),),
                observation={"id": ticket, "status": "closed"},
            )
        return ToolResult(receipts=(Receipt(status=206, id=""),), observation={"status": 206})

    @tools.tool(side_effect=False)
    def lookup(q: str) -> ToolResult:
        return ToolResult(
            receipts=(Receipt(status=200, id="doc:vault-7"),),
            observation={"text": "The vault code is tangerine-42."},
        )

    return tools


def ticket_frozen(s: Snapshot) -> bool:
    """The proposed call touches the frozen ticket T-999."""
    return isinstance(s.proposal, ToolCall) and s.proposal.args.get("ticket") == "T-999"
