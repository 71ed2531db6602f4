"""A model and tools that hand a live run hostile values (`tests/test_hostile_journal.py`).

`--model python:tests.fixture_hostile:model --tools tests.fixture_hostile` in process (the
CLI through click's CliRunner): the model plays `PLAN`, one reply a call (an exception is
raised); `probe` (a read)
and `write` (a side effect) play `RESULTS`, one a call, each a `ToolResult`, a raw value
(returned as is: a malformed result) or an exception (raised).
"""

from __future__ import annotations

from typing import Any

from fsm_agent import Prompt, Receipt, ToolRegistry, ToolResult

#: The model's replies, in order; past the end it replies with nothing.
PLAN: list[Any] = []
#: What the tools return (or raise), call by call; past the end a receipted echo of `q`.
RESULTS: list[Any] = []

TOOLS = ToolRegistry()


class Unprintable(Exception):
    """An exception an adapter might raise, whose message cannot even be made."""

    def __str__(self) -> str:
        raise RuntimeError("no printing me")


def play(replies: list[Any], results: list[Any]) -> None:
    """Set what the next run is handed."""
    PLAN[:] = replies
    RESULTS[:] = results


def model(prompt: Prompt) -> Any:
    reply = PLAN.pop(0) if PLAN else None
    if isinstance(reply, BaseException):
        raise reply
    return reply


def _next(q: Any) -> Any:
    if not RESULTS:
        return ToolResult(receipts=(Receipt(status=200, id="probe:1"),), observation=q)
    result = RESULTS.pop(0)
    if isinstance(result, BaseException):
        raise result
    return result


@TOOLS.tool(side_effect=False)
def probe(q: Any = None) -> Any:
    """A read that returns whatever the test planned."""
    return _next(q)


@TOOLS.tool()
def write(q: Any = None) -> Any:
    """A side effect that returns whatever the test planned."""
    return _next(q)
