"""A payment-like side effect for the resume tests (`tests.fixture_resume`).

`charge` appends one line per call to the ledger file named by FSM_AGENT_TEST_LEDGER (the
side effect a test counts). When FSM_AGENT_TEST_HANG names a file that does not exist yet,
the call writes that file after the ledger line and then hangs, so a test can SIGKILL the
process in the middle of a side effect whose receipt was never journaled.

`new_tools()` declares `charge` idempotent only when FSM_AGENT_TEST_IDEMPOTENT is set (its
arguments carry the idempotency key, so a re-issue repeats the same key). `oracle` is a
model that charges once, then answers with the receipt id; `gated_oracle` does the same
once a test has opened its gate (time for an operator to act).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from fsm_agent import Prompt, Receipt, Tool, ToolRegistry, ToolResult

LEDGER_ENV = "FSM_AGENT_TEST_LEDGER"
HANG_ENV = "FSM_AGENT_TEST_HANG"
CHARGE = {"tool_call": {"name": "charge", "args": {"order": "ord_1", "idempotency_key": "k-1"}}}


def charge(order: str, idempotency_key: str) -> ToolResult:
    ledger = os.environ.get(LEDGER_ENV)
    if ledger:
        with open(ledger, "a", encoding="utf-8") as f:
            f.write(f"{order} {idempotency_key}\n")
    hang = os.environ.get(HANG_ENV)
    if hang and not Path(hang).exists():
        Path(hang).write_text(str(os.getpid()), encoding="utf-8")
        time.sleep(60)
    return ToolResult(
        receipts=(Receipt(status=200, id=f"ch_{order}", idempotency_key=idempotency_key),),
        observation={"charged": order, "charge_id": f"ch_{order}"},
    )


IDEMPOTENT_ENV = "FSM_AGENT_TEST_IDEMPOTENT"


def new_tools() -> ToolRegistry:
    """`charge`, declared idempotent only when FSM_AGENT_TEST_IDEMPOTENT is set."""
    idempotent = bool(os.environ.get(IDEMPOTENT_ENV))
    return ToolRegistry((Tool(name="charge", fn=charge, idempotent=idempotent),))


def oracle(prompt: Prompt) -> Any:
    """Charge until a complete receipt is in the history, then answer with its id."""
    for note in prompt.history:
        if note.get("receipts_complete"):
            return {"answer": note["receipts"][0]["id"]}
    return CHARGE


GATE_ENV = "FSM_AGENT_TEST_GATE"


def gated_oracle(prompt: Prompt) -> Any:
    """`oracle`, but each reply waits until the file named by FSM_AGENT_TEST_GATE exists
    (a test opens the gate after it has acted, e.g. queued a pause)."""
    gate = Path(os.environ[GATE_ENV])
    deadline = time.monotonic() + 60
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return oracle(prompt)
