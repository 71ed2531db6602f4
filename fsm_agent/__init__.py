"""fsm-agent: every AI-agent run is an explicit, declared finite-state machine.

The model drafts; code decides when to stop. See README.md for the contract.
"""

from __future__ import annotations

#: `typing.TYPE_CHECKING` without importing typing (mypy reads this name the same way): the
#: `fsm-agent` command installs its signal handlers after this module, so it stays small.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from fsm_agent.adapters.loading import load_model
    from fsm_agent.adapters.models import ModelReply, Prompt, ScriptedModel
    from fsm_agent.declaration.load import load_machine
    from fsm_agent.declaration.spec import MachineSpec
    from fsm_agent.errors import (
        AdapterError,
        BudgetError,
        FsmAgentError,
        HaltPathRefused,
        InvalidInputError,
        JournalError,
        MachineSpecError,
        RunPaused,
    )
    from fsm_agent.halt import HaltReason, terminal_state
    from fsm_agent.journal.store import Event, GuardResult, RunRow, Store
    from fsm_agent.run_ids import RunNotFound
    from fsm_agent.runtime.actions import ActionResult
    from fsm_agent.runtime.budgets import Budgets, Meters
    from fsm_agent.runtime.decisions import decide_run
    from fsm_agent.runtime.fork import fork_run
    from fsm_agent.runtime.lanes import LOCAL, ControlPlane, Lane, assert_local_halt
    from fsm_agent.runtime.proposals import parse_reply
    from fsm_agent.runtime.receipts import Receipt, receipts_complete
    from fsm_agent.runtime.record import HaltRecord, read_record
    from fsm_agent.runtime.snapshot import Snapshot
    from fsm_agent.runtime.tools import Tool, ToolError, ToolRegistry, ToolResult, load_tools
    from fsm_agent.runtime.usage import ModelUsage
    from fsm_agent.runtime.worker import arun, resume_run, run

#: Each name of the API and the module it comes from: imported on first use, so that
#: `import fsm_agent.<module>` (the `fsm-agent` command's own start, see `fsm_agent.cli.entry`)
#: does not load the whole library first.
_EXPORTS = {
    "ActionResult": "fsm_agent.runtime.actions",
    "Budgets": "fsm_agent.runtime.budgets",
    "Meters": "fsm_agent.runtime.budgets",
    "AdapterError": "fsm_agent.errors",
    "BudgetError": "fsm_agent.errors",
    "FsmAgentError": "fsm_agent.errors",
    "HaltPathRefused": "fsm_agent.errors",
    "InvalidInputError": "fsm_agent.errors",
    "JournalError": "fsm_agent.errors",
    "MachineSpecError": "fsm_agent.errors",
    "RunNotFound": "fsm_agent.run_ids",
    "RunPaused": "fsm_agent.errors",
    "HaltReason": "fsm_agent.halt",
    "terminal_state": "fsm_agent.halt",
    "Event": "fsm_agent.journal.store",
    "GuardResult": "fsm_agent.journal.store",
    "RunRow": "fsm_agent.journal.store",
    "Store": "fsm_agent.journal.store",
    "LOCAL": "fsm_agent.runtime.lanes",
    "ControlPlane": "fsm_agent.runtime.lanes",
    "Lane": "fsm_agent.runtime.lanes",
    "assert_local_halt": "fsm_agent.runtime.lanes",
    "ModelReply": "fsm_agent.adapters.models",
    "ModelUsage": "fsm_agent.runtime.usage",
    "Prompt": "fsm_agent.adapters.models",
    "ScriptedModel": "fsm_agent.adapters.models",
    "load_model": "fsm_agent.adapters.loading",
    "parse_reply": "fsm_agent.runtime.proposals",
    "Receipt": "fsm_agent.runtime.receipts",
    "receipts_complete": "fsm_agent.runtime.receipts",
    "HaltRecord": "fsm_agent.runtime.record",
    "read_record": "fsm_agent.runtime.record",
    "Snapshot": "fsm_agent.runtime.snapshot",
    "MachineSpec": "fsm_agent.declaration.spec",
    "load_machine": "fsm_agent.declaration.load",
    "Tool": "fsm_agent.runtime.tools",
    "ToolError": "fsm_agent.runtime.tools",
    "ToolRegistry": "fsm_agent.runtime.tools",
    "ToolResult": "fsm_agent.runtime.tools",
    "load_tools": "fsm_agent.runtime.tools",
    "arun": "fsm_agent.runtime.worker",
    "fork_run": "fsm_agent.runtime.fork",
    "decide_run": "fsm_agent.runtime.decisions",
    "resume_run": "fsm_agent.runtime.worker",
    "run": "fsm_agent.runtime.worker",
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
    "ModelUsage",
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
    "decide_run",
    "fork_run",
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
