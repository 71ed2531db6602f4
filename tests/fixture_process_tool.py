"""A process-isolated tool with a late side effect, for the kill tests
(`tests/test_orphans.py`): `fsm-agent run … --tools tests.fixture_process_tool --model
python:tests.fixture_process_tool:model`.

The model always asks for `pid_sleep_write`, which runs in a spawned child process: it
writes the child's pid into FSM_AGENT_TEST_DIR/pid, sleeps SLEEP_S, then writes
FSM_AGENT_TEST_DIR/done — the side effect that must never happen once the run's process is
gone.
"""

from __future__ import annotations

import os
from typing import Any

from fsm_agent import ModelReply, Prompt, ToolRegistry
from tests.fixture_tools import pid_sleep_write

DIR_ENV = "FSM_AGENT_TEST_DIR"
SLEEP_S = 0.5

TOOLS = ToolRegistry()
TOOLS.tool("pid_sleep_write", isolation="process")(pid_sleep_write)


def model(prompt: Prompt) -> Any:
    folder = os.environ[DIR_ENV]
    args = {"pid_path": f"{folder}/pid", "done_path": f"{folder}/done", "seconds": SLEEP_S}
    return ModelReply(content={"tool_call": {"name": "pid_sleep_write", "args": args}})
