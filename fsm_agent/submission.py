"""A run as it is submitted: its declaration and budgets checked and frozen (`frozen_job`),
and the declaration as its driver reads it back (`declared_spec`, `queued_spec`).
"""

from __future__ import annotations

import datetime
import importlib.resources
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from fsm_agent.declaration.load import load_machine, machine_path, parse_machine
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.encoding import refuse_unencodable
from fsm_agent.errors import (
    InvalidInputError,
    MachineSpecError,
)
from fsm_agent.journal.store import Job
from fsm_agent.redaction import env_secrets
from fsm_agent.run_ids import check_run_id
from fsm_agent.runtime.budgets import make_budgets


def _reference(machine: str) -> str:
    """What a job records of its machine: a declared name as given, a file as an absolute
    path (a declared halt policy is looked up next to it)."""
    if machine.endswith((".yaml", ".yml")) or "/" in machine or "\\" in machine:
        return str(Path(machine).resolve())
    return machine


def frozen_job(
    machine: str,
    task: str,
    budgets: Mapping[str, int | float | None] | None = None,
    *,
    run_id: str | None = None,
    secret_env: Sequence[str] = (),
) -> Job:
    """A run of `machine` on `task` as a worker is given it: the declaration loaded and
    checked, the budgets frozen (its defaults with `budgets` overrides). Its `run_id`
    (given, it must be under `fsm_agent.run_ids.RUN_ID_GRAMMAR`) is the run's. The values
    of the environment variables `secret_env` are redacted from the task
    (`fsm_agent.redaction`)."""
    if run_id is not None:
        check_run_id(run_id, where="run_id")
    secrets = env_secrets(secret_env, what="secret_env")
    spec = load_machine(machine)
    if not isinstance(task, str) or not task.strip():
        raise InvalidInputError("task must be a non-empty string")
    task = secrets.text(task)
    refuse_unencodable("the task", task)
    return Job(
        run_id=run_id or uuid.uuid4().hex[:12],
        machine=_reference(machine),
        machine_text=spec.text,
        task=task,
        budgets=make_budgets(spec.budgets, budgets),
        submitted_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds"),
    )


def declared_spec(job: Job) -> MachineSpec:
    """The job's declaration parsed from its frozen text, placed where it was submitted
    from without looking at any file: what a durable workflow decides with (a worker on
    another host need not have the file, and a replay must not depend on it)."""
    ref = job.machine
    if ref.endswith((".yaml", ".yml")) or "/" in ref or "\\" in ref:
        path = Path(ref)
    else:
        path = Path(str(importlib.resources.files("fsm_agent.machines").joinpath(f"{ref}.yaml")))
    return parse_machine(job.machine_text, source=str(path), home=path.parent)


def queued_spec(job: Job) -> MachineSpec:
    """The job's declaration as frozen at submit time."""
    home: Path | None = None
    try:
        path = machine_path(job.machine)
        source, home = str(path), path.parent  # its references resolve next to it
    except MachineSpecError:
        source = f"{job.machine} (queued as run {job.run_id})"
    return parse_machine(job.machine_text, source=source, home=home)
