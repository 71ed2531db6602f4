"""Module-level tools and models for the worker tests (`tests.fixture_tools:<name>`).

They live at module level so a child process can import them: a tool declared with
`isolation="process"` is pickled by reference into a spawned child, and `tests/child_run.py`
(a real subprocess) binds `new_tools()` and `napping_model` the way `fsm-agent run` does.
Each one does something a test can observe from outside: it writes a file, or records a pid.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from fsm_agent import ModelReply, Prompt, Receipt, ToolError, ToolRegistry, ToolResult

#: Env var naming the file `nap` writes when it starts (the readiness handshake).
READY_ENV = "FSM_AGENT_TEST_READY"


def pid_sleep_write(pid_path: str, done_path: str, seconds: float) -> ToolResult:
    """Write this process's pid, sleep, then write `done_path` (the side effect to stop)."""
    Path(pid_path).write_text(str(os.getpid()), encoding="utf-8")
    time.sleep(seconds)
    Path(done_path).write_text("side effect happened", encoding="utf-8")
    return ToolResult(observation="woke up")


def raise_tool_error(message: str, retryable: bool) -> ToolResult:
    """Fail the way an adapter reports a failure."""
    raise ToolError(message, retryable=retryable)


def raise_plain(message: str) -> ToolResult:
    """Fail with an exception the adapter did not classify."""
    raise RuntimeError(message)


def receipted(value: str) -> ToolResult:
    """Succeed with a complete receipt carrying `value` as the final answer."""
    return ToolResult(receipts=(Receipt(status=200, id=f"res:{value}"),), final=value)


def child_pid() -> int:
    """The pid of the process running this call."""
    return os.getpid()


async def async_double(x: int) -> int:
    """An async callable: awaited by the deadline wrapper, in a thread or a child."""
    await asyncio.sleep(0)
    return 2 * x


async def async_nap(seconds: float) -> str:
    """An async callable that outlives a short deadline."""
    await asyncio.sleep(seconds)
    return "late"


def nap(seconds: float = 30.0) -> ToolResult:
    """Write the readiness file (its content: this pid), then sleep: a run stuck mid-tool."""
    ready = os.environ.get(READY_ENV)
    if ready:
        tmp = Path(f"{ready}.tmp")
        tmp.write_text(str(os.getpid()), encoding="utf-8")
        tmp.replace(ready)
    time.sleep(seconds)
    return ToolResult(observation="woke up")


def napping_model(prompt: Prompt) -> Any:
    """Always asks for `nap` (a looping agent whose tool sleeps)."""
    return ModelReply(content={"tool_call": {"name": "nap", "args": {"seconds": 30.0}}})


def new_tools() -> ToolRegistry:
    """The child run's registry: `nap`, in a thread, or in a killable child process when
    `FSM_AGENT_TEST_ISOLATION=process`."""
    isolation = os.environ.get("FSM_AGENT_TEST_ISOLATION", "thread")
    registry = ToolRegistry()
    registry.tool("nap", isolation="process" if isolation == "process" else "thread")(nap)
    return registry


def process_alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie awaiting its reaper counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    except OSError:  # no procfs: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
