"""User code that raises what is not an `Exception` (`tests.fixture_exits:<name>`), for
`tests/test_user_exits.py`: `sys.exit(0)`, `KeyboardInterrupt` and a bare `BaseException`
subclass, from a guard, a user action, a tool (in a thread, inline, in a child process), a
model adapter, and a tools module's `new_tools()` (a module that raises as it is imported
is `tests.fixture_exit_on_import`).

Which one a run uses is chosen by FSM_AGENT_TEST_RAISE: `exit` (the default), `kbint` or
`base`; a spawned tool process inherits it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from fsm_agent import ModelReply, Prompt, Snapshot, Tool, ToolRegistry, ToolResult
from fsm_agent.runtime.actions import ActionResult

RAISE_ENV = "FSM_AGENT_TEST_RAISE"


class Odd(BaseException):
    """Neither an Exception nor one of Python's own BaseExceptions."""


def _raise() -> Any:
    kind = os.environ.get(RAISE_ENV, "exit")
    if kind == "kbint":
        raise KeyboardInterrupt
    if kind == "base":
        raise Odd("odd")
    sys.exit(0)


def guard(s: Snapshot) -> bool:
    return bool(_raise())


def action(s: Snapshot) -> ActionResult:
    return _raise()  # type: ignore[no-any-return]


def tool(q: str) -> ToolResult:
    return _raise()  # type: ignore[no-any-return]


def model(prompt: Prompt) -> Any:
    return _raise()


def inline_model(prompt: Prompt) -> Any:
    return _raise()


inline_model.isolation = "inline"  # type: ignore[attr-defined]


def asks_for_the_tool(prompt: Prompt) -> Any:
    return ModelReply(content={"tool_call": {"name": "lookup", "args": {"q": "x"}}})


def new_tools() -> ToolRegistry:
    """`lookup`, run as FSM_AGENT_TEST_ISOLATION says (thread, inline or process); or,
    with FSM_AGENT_TEST_RAISE_IN=new_tools, no registry at all: the factory raises."""
    if os.environ.get("FSM_AGENT_TEST_RAISE_IN") == "new_tools":
        _raise()
    isolation = os.environ.get("FSM_AGENT_TEST_ISOLATION", "thread")
    return ToolRegistry((Tool(name="lookup", fn=tool, isolation=isolation),))  # type: ignore[arg-type]
