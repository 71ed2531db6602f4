"""What one Temporal worker process serves runs with: its journal, model, tools, allow-list
and secrets (as `fsm-agent worker` is given them), shared by the workflow code and the
activities it runs in the same process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import attrs

from fsm_agent.adapters.models import ModelAdapter
from fsm_agent.journal.store import Job
from fsm_agent.redaction import Redactor, run_secrets
from fsm_agent.runtime.actions import has_side_effect
from fsm_agent.runtime.lanes import LOCAL, ControlPlane, Lane
from fsm_agent.runtime.tools import ToolRegistry

TASK_QUEUE = "fsm-agent"
WORKFLOW = "fsm-agent-run"


@attrs.define
class Setup:
    journal: str
    model: ModelAdapter
    tools: ToolRegistry = attrs.field(factory=ToolRegistry)
    allow: tuple[str, ...] | None = None
    secret_env: tuple[str, ...] = ()
    judge: Callable[[Any], Any] | None = None
    repair: Callable[[Any], Any] | None = None
    #: what the runs redact (`--secret-env`, the model's own key), read once at start
    secrets: Redactor = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.secrets = run_secrets(self.secret_env, self.model)

    def side_effect(self, call_name: str) -> bool:
        """Whether the call a run yields under `call_name` may change the world (never
        re-issued by Temporal: the runtime's own rules decide what a lost call means)."""
        kind, _, name = call_name.partition(":")
        if kind == "tool":
            tool = self.tools.get(name)
            return tool is None or tool.side_effect
        if kind == "action":
            return has_side_effect(name)
        return False


@attrs.frozen
class Submission:
    """A run as its workflow is started with: the job frozen as `submit` freezes one, and
    the run's halt lane and thrash limit (None: the declaration's)."""

    job: Job
    halt_lane: Lane = LOCAL
    thrash_limit: int | None = None
    #: the halt policy's control plane, read once when the run was submitted (None: the
    #: machine declares no policy); a workflow never reads a policy file
    control: ControlPlane | None = None
    #: start: a new run; resume: a journaled run (paused, interrupted, or decided), taken
    #: for Temporal; continue: the same workflow's own run, continued as new
    mode: Literal["start", "resume", "continue"] = "start"


def submission(job: Job, *, halt_lane: Lane = LOCAL, thrash_limit: int | None = None) -> Submission:
    """The run as its workflow is started with, its policy's control plane read now (from
    the file its declaration names, next to it)."""
    from fsm_agent.submission import queued_spec

    declared = queued_spec(job).policy_path()
    control = None
    if declared is not None:
        from fsm_agent.declaration.policy import load_policy

        control = load_policy(declared).control_plane_for_runtime()
    return Submission(job, halt_lane, thrash_limit, control=control)


_current: Setup | None = None


def install(setup: Setup) -> None:
    global _current
    _current = setup


def current() -> Setup:
    if _current is None:
        raise RuntimeError("no fsm-agent Temporal worker is set up in this process")
    return _current
