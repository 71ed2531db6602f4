"""fsm-agent: every AI-agent run is an explicit, declared finite-state machine.

The model drafts; code decides when to stop. See README.md for the contract.
"""

from __future__ import annotations

#: `typing.TYPE_CHECKING` without importing typing (mypy reads this name the same way): the
#: `fsm-agent` command installs its signal handlers after this module, so it stays small.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from fsm_agent.actions import ActionResult
    from fsm_agent.budgets import Budgets, Meters
    from fsm_agent.errors import (
        AdapterError,
        BudgetError,
        FsmAgentError,
        HaltPathRefused,
        InvalidInputError,
        JournalError,
        MachineSpecError,
        RunNotFound,
        RunPaused,
    )
    from fsm_agent.halt import HaltReason, terminal_state
    from fsm_agent.journal import Event, GuardResult, RunRow, Store
    from fsm_agent.lanes import LOCAL, ControlPlane, Lane, assert_local_halt
    from fsm_agent.models import ModelReply, Prompt, ScriptedModel, load_model
    from fsm_agent.proposals import parse_reply
    from fsm_agent.receipts import Receipt, receipts_complete
    from fsm_agent.record import HaltRecord, read_record
    from fsm_agent.snapshot import Snapshot
    from fsm_agent.spec import MachineSpec, load_machine
    from fsm_agent.tools import Tool, ToolError, ToolRegistry, ToolResult, load_tools
    from fsm_agent.worker import arun, resume_run, run

#: Each name of the API and the module it comes from: imported on first use, so that
#: `import fsm_agent.<module>` (the `fsm-agent` command's own start, see `fsm_agent.entry`)
#: does not load the whole library first.
_EXPORTS = {
    "ActionResult": "fsm_agent.actions",
    "Budgets": "fsm_agent.budgets",
    "Meters": "fsm_agent.budgets",
    "AdapterError": "fsm_agent.errors",
    "BudgetError": "fsm_agent.errors",
    "FsmAgentError": "fsm_agent.errors",
    "HaltPathRefused": "fsm_agent.errors",
    "InvalidInputError": "fsm_agent.errors",
    "JournalError": "fsm_agent.errors",
    "MachineSpecError": "fsm_agent.errors",
    "RunNotFound": "fsm_agent.errors",
    "RunPaused": "fsm_agent.errors",
    "HaltReason": "fsm_agent.halt",
    "terminal_state": "fsm_agent.halt",
    "Event": "fsm_agent.journal",
    "GuardResult": "fsm_agent.journal",
    "RunRow": "fsm_agent.journal",
    "Store": "fsm_agent.journal",
    "LOCAL": "fsm_agent.lanes",
    "ControlPlane": "fsm_agent.lanes",
    "Lane": "fsm_agent.lanes",
    "assert_local_halt": "fsm_agent.lanes",
    "ModelReply": "fsm_agent.models",
    "Prompt": "fsm_agent.models",
    "ScriptedModel": "fsm_agent.models",
    "load_model": "fsm_agent.models",
    "parse_reply": "fsm_agent.proposals",
    "Receipt": "fsm_agent.receipts",
    "receipts_complete": "fsm_agent.receipts",
    "HaltRecord": "fsm_agent.record",
    "read_record": "fsm_agent.record",
    "Snapshot": "fsm_agent.snapshot",
    "MachineSpec": "fsm_agent.spec",
    "load_machine": "fsm_agent.spec",
    "Tool": "fsm_agent.tools",
    "ToolError": "fsm_agent.tools",
    "ToolRegistry": "fsm_agent.tools",
    "ToolResult": "fsm_agent.tools",
    "load_tools": "fsm_agent.tools",
    "arun": "fsm_agent.worker",
    "resume_run": "fsm_agent.worker",
    "run": "fsm_agent.worker",
}


if not TYPE_CHECKING:  # (for mypy the names above are imported: a typo stays an error)

    def __getattr__(name: str) -> object:
        from importlib import import_module

        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'fsm_agent' has no attribute {name!r}")
        value = getattr(import_module(module), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*globals(), *_EXPORTS])


__all__ = [
    "LOCAL",
    "ActionResult",
    "AdapterError",
    "BudgetError",
    "Budgets",
    "ControlPlane",
    "Event",
    "FsmAgentError",
    "GuardResult",
    "HaltPathRefused",
    "HaltReason",
    "HaltRecord",
    "InvalidInputError",
    "JournalError",
    "Lane",
    "MachineSpec",
    "MachineSpecError",
    "Meters",
    "ModelReply",
    "Prompt",
    "Receipt",
    "RunNotFound",
    "RunPaused",
    "RunRow",
    "ScriptedModel",
    "Snapshot",
    "Store",
    "Tool",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "arun",
    "assert_local_halt",
    "load_machine",
    "load_model",
    "load_tools",
    "parse_reply",
    "read_record",
    "receipts_complete",
    "resume_run",
    "run",
    "terminal_state",
]

__version__ = "0.1.0"
