"""The run queue: `submit` puts a run in the store's queue with its declaration and budgets
frozen; `fsm_agent.queue.worker.QueueWorker` leases and drives the runs.
"""

from __future__ import annotations

import datetime
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
from fsm_agent.journal.store import Job, Store
from fsm_agent.redaction import env_secrets
from fsm_agent.run_ids import check_run_id
from fsm_agent.runtime.budgets import make_budgets

DEFAULT_LEASE_S = 30.0
DEFAULT_DRAIN_S = 10.0
DEFAULT_RECORDS = "halt-records"
#: `who` of the pauses a worker queues (a lost lease, a shutdown); any other pause is a
#: person's, and the run then waits for `fsm-agent resume` outside the queue.
WORKER_WHO = "fsm-agent worker"


def _reference(machine: str) -> str:
    """What a job records of its machine: a declared name as given, a file as an absolute
    path (a declared halt policy is looked up next to it)."""
    if machine.endswith((".yaml", ".yml")) or "/" in machine or "\\" in machine:
        return str(Path(machine).resolve())
    return machine


def submit(
    store: Store,
    machine: str,
    task: str,
    budgets: Mapping[str, int | float | None] | None = None,
    *,
    run_id: str | None = None,
    secret_env: Sequence[str] = (),
) -> Job:
    """Queue a run of `machine` (a declared name or a .yaml path) on `task`, frozen by
    `frozen_job`. Returns the job; its `run_id` is the run's."""
    job = frozen_job(machine, task, budgets, run_id=run_id, secret_env=secret_env)
    store.enqueue(job)
    return job


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


def queued_spec(job: Job) -> MachineSpec:
    """The job's declaration as frozen at submit time."""
    home: Path | None = None
    try:
        path = machine_path(job.machine)
        source, home = str(path), path.parent  # its references resolve next to it
    except MachineSpecError:
        source = f"{job.machine} (queued as run {job.run_id})"
    return parse_machine(job.machine_text, source=source, home=home)
