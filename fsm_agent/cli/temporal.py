"""`--temporal ADDRESS` of `fsm-agent submit` and `fsm-agent worker`: the run starts as a
Temporal workflow, a worker serves workflows (`fsm_agent.temporal`). `dev` as the address:
the worker starts Temporal's development server on 127.0.0.1:7233 (its state in a file next
to a SQLite journal) unless one already answers there; `submit` connects to it.

Imported only when `--temporal` is given: without the extra, `Error: …` says how to add it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import click

from fsm_agent.adapters.models import ModelAdapter
from fsm_agent.errors import InvalidInputError

DEV = "dev"
DEV_ADDRESS = "127.0.0.1:7233"


def _sdk() -> None:
    try:
        import temporalio  # noqa: F401
    except ModuleNotFoundError:
        raise InvalidInputError(
            "this runs on Temporal, which needs its integration: pip install 'fsm-agent[temporal]'"
        ) from None


def _address(given: str) -> str:
    return DEV_ADDRESS if given == DEV else given


def submit_run(
    address: str,
    db: str,
    machine: str,
    task: str,
    budgets: Mapping[str, int | float | None],
    run_id: str | None,
    secret_env: tuple[str, ...],
) -> str:
    """Start the run's workflow on `address`; return its run id."""
    _sdk()
    from fsm_agent.cli.options import journal_store
    from fsm_agent.run_ids import RunNotFound
    from fsm_agent.submission import frozen_job
    from fsm_agent.temporal.service import connect, start
    from fsm_agent.temporal.setup import submission

    job = frozen_job(machine, task, budgets, run_id=run_id, secret_env=secret_env)
    with journal_store(db) as store:  # the journal the workers write to: there, and free
        try:
            store.get_run(job.run_id)
        except RunNotFound:
            pass
        else:
            raise InvalidInputError(f"run {job.run_id} is already in the journal {db}")

    async def go() -> None:
        client = await connect(_address(address), db)
        await start(client, submission(job))

    _refused(go)
    return job.run_id


def resume_on(address: str, db: str, run_id: str) -> None:
    """Go on with a journaled run (paused, interrupted, or decided and waiting to go on) as
    a Temporal workflow: a worker takes it from the journal (refused there, the workflow
    failed, if it cannot be resumed)."""
    _sdk()
    from fsm_agent.cli.options import journal_store
    from fsm_agent.journal.store import Job
    from fsm_agent.runtime.resume import check_resumable
    from fsm_agent.temporal.port import owned_by_temporal
    from fsm_agent.temporal.service import connect, start
    from fsm_agent.temporal.setup import Submission

    with journal_store(db, must_exist=True) as store:
        row = store.get_run(run_id)
    check_resumable(row, lease_held=owned_by_temporal(row))  # a refusal says why, now
    job = Job(run_id=row.run_id, machine=row.machine, machine_text=row.machine_text,
              task=row.task, budgets=row.budgets, submitted_at=row.started_at)  # fmt: skip

    async def go() -> None:
        client = await connect(_address(address), db)
        await start(client, Submission(job, mode="resume"))

    _refused(go)


def signal_control(address: str, db: str, run_id: str, number: int) -> bool:
    """Send the journaled control `number` to the run's workflow, if one runs it now
    (False: none does; the run reads the control from the journal when it next goes on)."""
    _sdk()
    from fsm_agent.cli.options import journal_store
    from fsm_agent.temporal import wire
    from fsm_agent.temporal.service import connect

    with journal_store(db, must_exist=True) as store:
        (control,) = [c for c in store.controls(run_id, after=number - 1) if c.id == number]

    async def go() -> bool:
        client = await connect(_address(address), db)
        try:
            await client.get_workflow_handle(run_id).signal("control", wire.dumps(control))
        except Exception:  # no workflow runs it now
            return False
        return True

    return asyncio.run(go())


@attrs.frozen
class Listed:
    """A run's workflow as Temporal lists it (the newest run of its chain)."""

    run_id: str
    workflow: str
    started: str
    closed: str | None


def list_workflows(address: str, db: str, status: str, limit: int) -> list[Listed]:
    """The runs' workflows on `address`, newest first: `open` (running), `done` (closed),
    or `all`; at most `limit` of them."""
    _sdk()
    from temporalio.client import WorkflowExecutionStatus

    from fsm_agent.temporal.service import connect
    from fsm_agent.temporal.setup import WORKFLOW

    query = f"WorkflowType = '{WORKFLOW}'"
    if status == "open":
        query += " AND ExecutionStatus = 'Running'"
    elif status == "done":
        query += " AND ExecutionStatus != 'Running'"

    async def go() -> list[Listed]:
        client = await connect(_address(address), db)
        found: list[Listed] = []
        async for execution in client.list_workflows(query):
            if execution.status == WorkflowExecutionStatus.CONTINUED_AS_NEW:
                continue  # an earlier run of a chain: its newest is listed
            state = "?" if execution.status is None else execution.status.name.lower()
            closed = None if execution.close_time is None else execution.close_time.isoformat()
            found.append(Listed(execution.id, state, execution.start_time.isoformat(), closed))
            if len(found) >= limit:
                break
        return found

    try:
        return asyncio.run(go())
    except InvalidInputError:
        raise
    except Exception as exc:
        raise InvalidInputError(f"Temporal did not list the runs: {exc}") from None


def cancel_unstarted(address: str, db: str, run_id: str, note: str) -> None:
    """Take a run out of Temporal before it started: its workflow terminated (`note` is the
    reason Temporal keeps). A run the journal has is refused: it has started."""
    _sdk()
    from fsm_agent.cli.options import journal_store
    from fsm_agent.run_ids import RunNotFound
    from fsm_agent.temporal.service import connect

    with journal_store(db) as store:
        try:
            store.get_run(run_id)
        except RunNotFound:
            pass
        else:
            raise InvalidInputError(
                f"run {run_id} has started on Temporal: pause it (`fsm-agent pause {run_id}"
                f" --temporal {address} --why …`; `resume --temporal` goes on with it), or cancel"
                f" its workflow (`temporal workflow cancel --workflow-id {run_id}`: the run"
                " halts interrupted)"
            )

    async def go() -> None:
        client = await connect(_address(address), db)
        await client.get_workflow_handle(run_id).terminate(reason=note)

    try:
        asyncio.run(go())
    except InvalidInputError:
        raise
    except Exception as exc:  # none runs with that id
        raise InvalidInputError(f"no workflow runs run {run_id} on Temporal ({exc})") from None


def _refused(go: Callable[[], Any]) -> None:
    try:
        asyncio.run(go())
    except InvalidInputError:
        raise
    except Exception as exc:  # the server's refusal (the run id taken): one line
        raise InvalidInputError(f"Temporal refused the run: {exc}") from None


@contextlib.contextmanager
def _server(address: str, db: str) -> Iterator[str]:
    """The address to serve on: a development server started here for `dev`, unless one
    already answers on its port."""
    if address != DEV:
        yield address
        return
    from fsm_agent.stores.dsn import is_dsn
    from fsm_agent.temporal.service import DevServer, answers

    if answers(DEV_ADDRESS):
        yield DEV_ADDRESS
        return
    state = None if is_dsn(db) else str(Path(db).resolve().with_suffix(".temporal.db"))
    with DevServer(db_file=state, port=int(DEV_ADDRESS.rsplit(":", 1)[1])) as server:
        click.echo(f"fsm-agent: Temporal development server on {server.address}", err=True)
        yield server.address


def serve_runs(
    address: str,
    db: str,
    *,
    model: Callable[[], ModelAdapter],
    tools: Callable[[], Any],
    allow: tuple[str, ...] | None,
    secret_env: tuple[str, ...],
    concurrency: int,
    drain_s: float,
    tracer: Any = None,
) -> int:
    """Serve runs until SIGTERM/SIGINT; the calls in flight get `drain_s` to end (a run
    in flight is not lost: another worker goes on with its workflow)."""
    _sdk()
    from fsm_agent.stores import open_store
    from fsm_agent.temporal.service import serve
    from fsm_agent.temporal.setup import Setup

    setup = Setup(journal=db, model=model(), tools=tools(), allow=allow, secret_env=secret_env)
    store = open_store(db)
    stopped: list[int] = []

    async def go(where: str) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def stopping(signum: int) -> None:
            stopped.append(signum)
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping, int(sig))
        click.echo(f"fsm-agent: serving runs from Temporal at {where}", err=True)
        await serve(where, setup, store, stop=stop, max_concurrent=concurrency,
                    drain_s=drain_s, tracer=tracer)  # fmt: skip

    try:
        with _server(address, db) as where:
            asyncio.run(go(where))
    finally:
        store.close()
    if stopped:
        name = signal.Signals(stopped[0]).name
        click.echo(f"fsm-agent: worker stopped by {name}; runs in flight go on elsewhere", err=True)
    return 0
