"""A shop whose refunds wait for a person (tests/approval_fixtures/shop.yaml): a customer
read, a refund that needs approval and counts its real calls in the file named by
`FSM_TEST_REFUNDS`, and a model that reads its prompt (what a person decided reaches it as
the next observation)."""

from __future__ import annotations

import os
import re
import time
from typing import Any

from fsm_agent.adapters.models import Prompt
from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.tools import ToolRegistry, ToolResult

TOOLS = ToolRegistry()


@TOOLS.tool(side_effect=False)
def get_customer(customer: str) -> ToolResult:
    """Read a customer."""
    return ToolResult(receipts=(Receipt(200, customer),), observation={"customer": customer})


@TOOLS.tool(approval=True)
def refund(customer: str, cents: int) -> ToolResult:
    """Refund money: every call needs a person's approval."""
    path = os.environ.get("FSM_TEST_REFUNDS")
    done = 0
    if path:
        with open(path, "a+", encoding="utf-8") as f:
            f.write(f"{customer} {cents}\n")
            f.seek(0)
            done = len(f.readlines())
    rid = f"rf_{done or 1}_{cents}"
    return ToolResult(receipts=(Receipt(201, rid),), observation={"refund": rid})


@TOOLS.tool(approval=True)
def slow_refund(customer: str, cents: int) -> ToolResult:
    """A refund that takes effect, then takes its time to say so (a kill lands in between)."""
    result = refund(customer, cents)
    time.sleep(float(os.environ.get("FSM_TEST_SLOW_S", "0")))
    return result


@TOOLS.tool(privileged=True)
def pay(customer: str, cents: int) -> ToolResult:
    """Pay out money: privileged (the policy may make each call wait for a person)."""
    return refund(customer, cents)


def _said(prompt: Prompt) -> list[str]:
    return [str(n.get("content")) for n in prompt.history if n.get("role") == "runtime"]


def _refunded(prompt: Prompt) -> str | None:
    for note in reversed(list(prompt.history)):
        if note.get("role") == "tool" and note.get("name") in ("refund", "pay", "slow_refund"):
            observation = note.get("observation") or {}
            return str(observation.get("refund")) if note.get("receipts_complete") else None
    return None


def shop_model(prompt: Prompt) -> dict[str, Any]:
    """Refund what the task says; after a denial ask a person; after an answer naming a
    sum, refund that; after a refund, answer with its id."""
    said = _said(prompt)
    done = _refunded(prompt)
    answered = [s for s in said if "answered:" in s]
    denied = [s for s in said if " denied " in s]
    if done is not None:
        return {"answer": f"refund {done}"}
    if answered:
        sum_ = re.search(r"refund (\d+)", answered[-1])
        if sum_:
            args = {"customer": "C-17", "cents": int(sum_.group(1))}
            return {"tool_call": {"name": "refund", "args": args}}
    if denied:
        return {"handoff": {"why": "the refund was denied: what should I do?"}}
    cents = int(re.search(r"(\d+) cents", prompt.task).group(1))  # type: ignore[union-attr]
    tool = {"Pay": "pay", "Slowly": "slow_refund"}.get(prompt.task.split()[0], "refund")
    return {"tool_call": {"name": tool, "args": {"customer": "C-17", "cents": cents}}}


def repeat_model(prompt: Prompt) -> dict[str, Any]:
    """The real model's habit: the same refund again after its receipt, until two are made."""
    made = [
        n for n in prompt.history
        if n.get("role") == "tool" and n.get("name") == "refund" and n.get("receipts_complete")
    ]  # fmt: skip
    if len(made) >= 2:
        return {"answer": f"refund {made[-1]['observation']['refund']}"}
    return {"tool_call": {"name": "refund", "args": {"customer": "C-17", "cents": 500}}}
