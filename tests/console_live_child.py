"""A run that another process watches in the console (`tests/test_console_browser.py`).

    python tests/console_live_child.py --db DB --gates DIR --run-id ID --steps N

Makes N tool calls, then answers. Call k (1…N) of the `gated` tool waits until the file
DIR/go-k exists, so a test moves the run one transition at a time while the console shows
it. A pause queued meanwhile is applied before the next model call: the process ends with
exit code 75 (paused), as `fsm-agent run` does.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from fsm_agent import Receipt, ScriptedModel, ToolRegistry, ToolResult, run
from fsm_agent.errors import RunPaused

GATE_WAIT_S = 240.0  # within the tool time budget below
#: What the tool returns besides its step: markup the console must show as text.
HOSTILE_OUTPUT = "<b>bold</b><img src=x onerror=alert(1)>"
TOOLS = ToolRegistry()
_calls = {"n": 0}
_gates = {"dir": Path(".")}


@TOOLS.tool(side_effect=False)
def gated(step: int) -> ToolResult:
    """Wait for the test to open gate `step`, then return a receipt for it."""
    _calls["n"] += 1
    gate = _gates["dir"] / f"go-{_calls['n']}"
    deadline = time.monotonic() + GATE_WAIT_S
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return ToolResult(
        receipts=(Receipt(status=200, id=f"step:{step}"),),
        observation={"step": step, "html": HOSTILE_OUTPUT},
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--gates", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--steps", type=int, required=True)
    opts = parser.parse_args()
    _gates["dir"] = Path(opts.gates)
    replies: list[object] = [
        {"tool_call": {"name": "gated", "args": {"step": k}}} for k in range(1, opts.steps + 1)
    ]
    replies.append({"answer": f"done after {opts.steps} steps"})
    try:
        record = run(
            "agent_loop", task=f"Walk {opts.steps} gated steps", model=ScriptedModel(replies),
            tools=TOOLS, allow=TOOLS.names(), store=opts.db, run_id=opts.run_id,
            budgets={"max_steps": opts.steps + 3, "wall_clock_ms": 600_000,
                     "tool_timeout_ms": 300_000},
            record_path=Path(opts.gates) / "record.json",
        )  # fmt: skip
    except RunPaused:
        sys.exit(75)
    print(record.halt_reason.value, flush=True)


if __name__ == "__main__":
    main()
