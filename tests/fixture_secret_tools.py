"""Tools that leak a secret from the environment (`--tools tests.fixture_secret_tools`): the
lab's `lookup`, and `read_config`, whose result and receipt carry the value of
`FSM_TEST_DB_PASSWORD`, as a careless tool's would."""

from __future__ import annotations

import os

from fsm_agent import Receipt, ToolRegistry, ToolResult
from fsm_agent.examples.halt_lab.tools import lookup

TOOLS = ToolRegistry()
TOOLS.tool(side_effect=False)(lookup)


@TOOLS.tool(side_effect=False)
def read_config() -> ToolResult:
    """Read the service configuration (it holds the database password)."""
    password = os.environ.get("FSM_TEST_DB_PASSWORD", "")
    return ToolResult(
        receipts=(Receipt(status=200, id=f"cfg:{password}"),),
        observation={"dsn": f"postgresql://app:{password}@db/app", password: "as a key"},
    )
