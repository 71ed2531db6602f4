"""The error hierarchy: one root, one subclass per kind a user can act on.

Library code raises these; only the CLI turns them into messages and exit codes.
Each carries the context (file, key path, run id, …) needed to act on it.
"""

from __future__ import annotations

from typing import Any


class FsmAgentError(Exception):
    """Root of every error fsm-agent raises on purpose."""


class InvalidInputError(FsmAgentError):
    """Something the user supplied is wrong: fix the input and run again."""


class MachineSpecError(InvalidInputError):
    """A machine declaration is invalid; names the file and the key path."""

    def __init__(self, message: str, *, source: str, key: str = "$") -> None:
        self.source = source
        self.key = key
        self.detail = message
        super().__init__(f"{source}: {message} @ {key}")


class BudgetError(InvalidInputError):
    """A budget value is missing, negative, zero where it must be positive, or not a number."""

    def __init__(self, message: str, *, name: str) -> None:
        self.name = name
        super().__init__(f"budget {name}: {message}")


class AdapterError(InvalidInputError):
    """A model spec or a tools module cannot be loaded or is malformed."""

    def __init__(self, message: str, *, spec: str) -> None:
        self.spec = spec
        super().__init__(f"{spec}: {message}")


class HaltPathRefused(FsmAgentError):
    """A control decision (halt, retry budget, schema repair vote) was routed off a local lane."""

    code = "HALT_PATH_REFUSED"

    def __init__(self, message: str, *, decision_key: str, lane: Any) -> None:
        self.decision_key = decision_key
        self.lane = lane
        super().__init__(f"{self.code}: {message} (decision {decision_key!r}, lane {lane})")


class ContractRefused(FsmAgentError):
    """The runtime's contract refused a step the declaration allowed; `reason` is the halt
    reason's value (`fsm_agent.runtime.contract`)."""

    def __init__(self, message: str, *, reason: str) -> None:
        self.reason = reason
        super().__init__(message)


class JournalError(FsmAgentError):
    """The journal could not be read or written; the run stops rather than go on unrecorded."""

    def __init__(self, message: str, *, path: str, run_id: str | None = None) -> None:
        self.path = path
        self.run_id = run_id
        where = f"{path}" + (f" run {run_id}" if run_id else "")
        super().__init__(f"journal {where}: {message}")


class NotAJournal(InvalidInputError):
    """The database at `path` belongs to something else (its tables are not an fsm-agent
    journal's, or there is no journal there yet for a command that only reads); it was left
    as it is."""

    def __init__(self, message: str, *, path: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")


class RunPaused(FsmAgentError):
    """A person paused the run: its process stops, the run waits in the journal for
    `fsm-agent resume` (not a halt: it has no halt reason and no record yet)."""

    def __init__(self, run_id: str, *, step: int, by: str, why: str) -> None:
        self.run_id = run_id
        self.step = step
        super().__init__(f"run {run_id} paused at step {step} by {by}: {why}")


class Interrupted(BaseException):
    """Raised inside the worker when SIGTERM or SIGINT arrives; the run halts as `interrupted`.

    A BaseException so that adapter code catching `Exception` cannot swallow it.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by signal {signum}")
