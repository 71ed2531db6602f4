"""fsm-agent: every AI-agent run is an explicit, declared finite-state machine.

The model drafts; code decides when to stop. See README.md for the contract.
"""

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
