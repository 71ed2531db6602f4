"""A live run for the raise-budget test (`tests/test_operator.py`), in its own process.

    python tests/child_raise.py DB RECORD READY GO

The agent loops on `wait_for_go`, whose first call writes READY and then waits for GO to
appear, so the parent can raise the run's cap while it is provably live.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from fsm_agent import ScriptedModel, ToolRegistry, ToolResult, run
from fsm_agent.halt import exit_code
from tests.lab import granted

RUN_ID = "raise-run"


def main() -> None:
    db, record, ready, go = sys.argv[1:5]
    tools = ToolRegistry()

    @tools.tool()
    def wait_for_go() -> ToolResult:
        Path(ready).touch()
        deadline = time.monotonic() + 60
        while not Path(go).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return ToolResult(observation="not yet")

    reply = {"tool_call": {"name": "wait_for_go", "args": {}}}
    result = run(
        "agent_loop",
        task="wait for the operator",
        model=ScriptedModel([reply] * 20),
        **granted(tools),
        store=db,
        budgets={"max_steps": 3, "wall_clock_ms": 120_000, "tool_timeout_ms": 90_000},
        record_path=record,
        run_id=RUN_ID,
    )
    sys.exit(exit_code(result.halt_reason, result.signal))


if __name__ == "__main__":
    main()
