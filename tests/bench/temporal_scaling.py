"""Worker scaling on Temporal: one batch of runs submitted at once to N `fsm-agent worker
--temporal` processes, and the same batch with `fsm_agent.run` in this one process (the
baseline); see `tests.bench.temporal` for the program.

A batch is `runs` runs of `agent_loop` on the halt lab (`examples/halt_lab/proper.json`: a
`lookup` that hits, then the answer; four transitions a run, halting `completed`). On
Temporal, the workers are started (real processes of the CLI, on a fresh journal), the
benchmark waits until every one of them serves (`_wait_polling`), then starts every run's
workflow at once and waits for every result: the figure is the batch's wall time from the
first start to the last result, so the workers' start-up is not counted and the server's
dispatch, every activity and every journal write are. The workers are stopped (SIGTERM;
each must exit 0) after the batch.

The CPU each side used in that span is read from /proc (`utime + stime` of each worker
process and of the development server, and this process's own time, the Temporal client's
threads included), so a figure says where the machine's cores went.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.client import Client

from fsm_agent.adapters.models import ScriptedModel
from fsm_agent.journal.store import Job
from fsm_agent.runtime.tools import load_tools
from fsm_agent.runtime.worker import run
from fsm_agent.stores import open_store
from fsm_agent.submission import frozen_job
from fsm_agent.temporal.service import DevServer, connect, record_of, result, start
from fsm_agent.temporal.setup import TASK_QUEUE, submission
from tests.bench.processes import REPO_ROOT
from tests.bench.workload import Scratch

MACHINE = "agent_loop"
TOOLS = "fsm_agent.examples.halt_lab.tools"
ALLOW = ("lookup", "slow_lookup", "hang")
#: Relative to the repository root (the workers' working directory), as a user types it.
SCRIPT = "examples/halt_lab/proper.json"
READY_TIMEOUT_S = 90.0
#: What a worker says on stderr when it starts serving (`fsm_agent.cli.temporal`).
SERVING = "serving runs from Temporal"
#: How long after that the server is given to list the workers among its pollers.
POLLERS_S = 2.0
BATCH_TIMEOUT_S = 600.0
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Batch:
    """One measured batch: `workers` 0 is the local baseline (one process)."""

    journal: str
    workers: int
    round: int
    runs: int
    transitions: int
    seconds: float
    #: CPU seconds in the batch's span: "workers", "server", "client" (local: "local")
    cpu: dict[str, float] = field(default_factory=dict)
    #: on Temporal: the batch's workflow histories (bytes, events), and its activity
    #: attempts past the first, by activity type
    history_bytes: int = 0
    history_events: int = 0
    retries: dict[str, int] = field(default_factory=dict)
    #: the activity failures the workers logged, by kind
    errors: dict[str, int] = field(default_factory=dict)
    #: the machine's busy cores in the batch's span, this benchmark's and everyone else's
    machine_cores: float = 0.0
    #: the runs that did not halt `completed` (not counted in `runs`), and why
    failures: list[str] = field(default_factory=list)
    #: seconds outside the measured span: the workers' start until all poll, their stop,
    #: and reading the histories and the journal afterwards
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def submitted(self) -> int:
        return self.runs + len(self.failures)

    @property
    def runs_per_s(self) -> float:
        return self.runs / self.seconds

    @property
    def transitions_per_s(self) -> float:
        return self.transitions / self.seconds

    @property
    def cpu_total(self) -> float:
        return sum(self.cpu.values())


def cpu_seconds(pid: int) -> float:
    """utime + stime of process `pid`, all its threads (0.0 once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def machine_ticks() -> tuple[int, int]:
    """(busy, all) clock ticks of every CPU of the machine since boot (/proc/stat)."""
    try:
        first = Path("/proc/stat").read_text(encoding="ascii").splitlines()[0]
    except OSError:
        return 0, 0
    ticks = [int(t) for t in first.split()[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return sum(ticks[:8]) - idle, sum(ticks[:8])


def machine_busy(before: tuple[int, int], after: tuple[int, int]) -> float:
    """How many of the machine's cores were busy between two `machine_ticks`, by anyone."""
    busy, every = after[0] - before[0], after[1] - before[1]
    return (os.cpu_count() or 1) * busy / every if every > 0 else 0.0


def jobs(runs: int, label: str) -> list[Job]:
    """The batch's runs as `fsm-agent submit` freezes them (a fresh run id each)."""
    return [frozen_job(MACHINE, f"Find the lab password ({label}, run {n}).") for n in range(runs)]


def transitions_of(location: str, run_ids: Sequence[str]) -> int:
    """The transitions the journal holds for `run_ids`, each of which must have halted
    `completed`."""
    store = open_store(location)
    try:
        count = 0
        for run_id in run_ids:
            row = store.get_run(run_id)
            if row.halt_reason is None or row.halt_reason.value != "completed":
                raise RuntimeError(f"run {run_id} ended {row.halt_reason} ({row.record})")
            count += sum(1 for e in store.events(run_id) if e.kind == "transition")
        return count
    finally:
        store.close()


# --- the local baseline ---------------------------------------------------------------------


def local_batch(location: str, runs: int, round_: int, journal: str) -> Batch:
    """The batch with `fsm_agent.run`, one run after the other, in this process, on one
    store opened once (as a worker process opens its own)."""
    tools = load_tools(TOOLS)
    model = ScriptedModel.from_file(REPO_ROOT / SCRIPT)
    store = open_store(location)
    ids = [f"local-{round_}-{n}" for n in range(runs)]
    try:
        ticks, cpu0, began = machine_ticks(), time.process_time(), time.perf_counter()
        for n, run_id in enumerate(ids):
            record = run(MACHINE, task=f"Find the lab password (local, run {n}).", model=model,
                         tools=tools, allow=ALLOW, store=store, run_id=run_id,
                         handle_signals=False)  # fmt: skip
            if record.halt_reason.value != "completed":
                raise RuntimeError(f"local run {run_id} ended {record.halt_reason.value}")
        seconds = time.perf_counter() - began
        cpu, busy = time.process_time() - cpu0, machine_busy(ticks, machine_ticks())
    finally:
        store.close()
    return Batch(journal, 0, round_, runs, transitions_of(location, ids), seconds,
                 {"local": cpu}, machine_cores=busy)  # fmt: skip


# --- Temporal workers -----------------------------------------------------------------------


def worker_command(address: str, db: str, concurrency: int | None) -> list[str]:
    command = [
        sys.executable, "-m", "fsm_agent", "worker", "--temporal", address, "--db", db,
        "--tools", TOOLS, "--allow", ",".join(ALLOW), "--model", f"scripted:{SCRIPT}",
    ]  # fmt: skip
    if concurrency is not None:
        command += ["--concurrency", str(concurrency)]
    return command


def cli_concurrency() -> int | None:
    """The default of `fsm-agent worker --concurrency` (None if it cannot be read)."""
    try:
        from fsm_agent.cli.group import all_commands

        command = all_commands()["worker"]
        (option,) = [p for p in command.params if p.name == "concurrency"]
        default = option.default
        return default if isinstance(default, int) else None
    except Exception:
        return None


class Workers:
    """`count` worker processes of the CLI on one journal, as a context manager: started,
    then stopped by SIGTERM (each must exit 0)."""

    def __init__(
        self, address: str, db: str, count: int, scratch: Scratch, concurrency: int | None
    ) -> None:
        self.command = worker_command(address, db, concurrency)
        self.logs = [scratch.fresh(f"temporal-worker-{n}.log") for n in range(count)]
        self.scratch = scratch
        self.procs: list[subprocess.Popen[bytes]] = []
        #: the activity failures the workers logged, by kind (`worker_errors`)
        self.errors: dict[str, int] = {}
        #: where the logs are kept when set (else discarded)
        self.keep: Path | None = None

    def __enter__(self) -> Workers:
        for log in self.logs:
            with log.open("wb") as err:
                self.procs.append(subprocess.Popen(
                    self.command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=err,
                    start_new_session=True,
                ))  # fmt: skip
        return self

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def cpu(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids)

    def serving(self) -> bool:
        """Whether every worker has said it serves (`SERVING` in its log)."""
        for log in self.logs:
            try:
                if SERVING not in log.read_text(encoding="utf-8", errors="replace"):
                    return False
            except OSError:
                return False
        return True

    def check_alive(self) -> None:
        for proc, log in zip(self.procs, self.logs, strict=True):
            if proc.poll() is not None:
                raise RuntimeError(f"a Temporal worker exited ({proc.returncode}): {_tail(log)}")

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        failures = []
        for proc, log in zip(self.procs, self.logs, strict=True):
            try:
                code = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            if code != 0:
                failures.append(f"exit {code}: {_tail(log)}")
        self.errors = worker_errors(self.logs)
        if self.keep is not None:
            self.keep.mkdir(parents=True, exist_ok=True)
            for log in self.logs:
                shutil.copy(log, self.keep / log.name)
        self.scratch.discard(*self.logs)
        if failures and exc[0] is None:
            raise RuntimeError("a Temporal worker failed: " + "\n".join(failures))


#: An activity failure as the SDK logs it: `temporalio.exceptions.ApplicationError: TYPE: …`.
_FAILED = re.compile(r"ApplicationError: (\w+): (.*)$")
#: What varies between two failures of one kind: the journal's path, run ids, numbers.
_VARIES = re.compile(r"journal \S+( run [0-9a-z_-]+)?|\b\d+\b")


def worker_errors(logs: Sequence[Path]) -> dict[str, int]:
    """The activity failures in the workers' logs, by type and message (its journal, run id
    and numbers left out)."""
    found: Counter[str] = Counter()
    for log in logs:
        with contextlib.suppress(OSError):
            for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
                match = _FAILED.search(line)
                if match is not None:
                    message = _VARIES.sub("#", match[2]).lstrip(": ")
                    found[f"{match[1]}: {message}"] += 1
    return dict(found)


def _tail(log: Path) -> str:
    try:
        return log.read_text(encoding="utf-8", errors="replace")[-2000:]
    except OSError:
        return "(no log)"


async def _wait_polling(address: str, workers: Workers) -> None:
    """Until every worker process serves: each has said so on stderr (`SERVING`, just
    before its Temporal worker starts polling), then until the server lists each as a
    poller of the run queue's workflow and activity tasks (a poller's identity is
    `PID@HOST`, the SDK's default) or `POLLERS_S` more have passed — the server lists the
    pollers of the queue's root partition only, and a worker whose first polls wait on
    another partition shows there only when they time out (about a minute)."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
    from temporalio.client import Client

    from fsm_agent.temporal.service import NAMESPACE

    client = await Client.connect(address, namespace=NAMESPACE)
    wanted = {f"{pid}@{socket.gethostname()}" for pid in workers.pids}
    kinds = (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY)
    deadline = time.monotonic() + READY_TIMEOUT_S
    serving: float | None = None
    while time.monotonic() < deadline:
        workers.check_alive()
        if serving is None and workers.serving():
            serving = time.monotonic()
        if serving is not None:
            if time.monotonic() - serving > POLLERS_S:
                return
            listed = True
            for kind in kinds:
                answer = await client.workflow_service.describe_task_queue(
                    DescribeTaskQueueRequest(
                        namespace=NAMESPACE, task_queue=TaskQueue(name=TASK_QUEUE),
                        task_queue_type=kind,
                    )
                )  # fmt: skip
                listed = listed and wanted <= {p.identity for p in answer.pollers}
            if listed:
                return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"the Temporal workers did not serve within {READY_TIMEOUT_S:.0f} s")


async def _submit_all(address: str, db: str, batch: Sequence[Job]) -> tuple[float, dict[str, str]]:
    """Start every run's workflow at once, then wait for every result: the seconds from the
    first start to the last result, and the runs that did not halt `completed` (why)."""
    client = await connect(address, db)
    began = time.perf_counter()
    await asyncio.gather(*(start(client, submission(job)) for job in batch))
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(result(client, job.run_id) for job in batch), return_exceptions=True),
        BATCH_TIMEOUT_S,
    )
    seconds = time.perf_counter() - began
    failed = {}
    for job, outcome in zip(batch, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            failed[job.run_id] = _cause(outcome)
            continue
        record = record_of(outcome)
        if record is None or record.halt_reason.value != "completed":
            failed[job.run_id] = f"ended {outcome}"
    return seconds, failed


def _keep_journal(location: str, keep: Path) -> None:
    """A copy of a SQLite journal (and its WAL) under `keep` (a DSN is not copied)."""
    if "://" in location:
        return
    keep.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal"):
        found = Path(location + suffix)
        if found.exists():
            shutil.copy(found, keep / found.name)


def _cause(exc: BaseException) -> str:
    """The innermost cause of a workflow's failure, as its message says it."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return f"{type(exc).__name__}: {exc}"


def temporal_batch(
    server: DevServer,
    location: str,
    workers: int,
    runs: int,
    round_: int,
    journal: str,
    scratch: Scratch,
    concurrency: int | None,
    keep: Path | None = None,
) -> Batch:
    """The batch on `workers` worker processes (its histories read after it). A run that
    does not halt `completed` is not counted, but named; the workers' logs of such a batch
    are kept under `keep`."""
    assert server.proc is not None
    began = time.perf_counter()
    batch = jobs(runs, f"{journal}, {workers} workers, round {round_}")
    with Workers(server.address, location, workers, scratch, concurrency) as pool:
        asyncio.run(_wait_polling(server.address, pool))
        ready = time.perf_counter()
        ticks = machine_ticks()
        before = (pool.cpu(), cpu_seconds(server.proc.pid), time.process_time())
        seconds, failed = asyncio.run(_submit_all(server.address, location, batch))
        after = (pool.cpu(), cpu_seconds(server.proc.pid), time.process_time())
        busy = machine_busy(ticks, machine_ticks())
        if failed and keep is not None:
            pool.keep = keep / f"{journal}-{workers}-workers-round-{round_}"
            _keep_journal(location, pool.keep)
        stopping = time.perf_counter()
    stopped = time.perf_counter()
    cpu = {side: a - b for side, a, b in zip(("workers", "server", "client"), after, before,
                                              strict=True)}  # fmt: skip
    ids = [job.run_id for job in batch]
    done = [run_id for run_id in ids if run_id not in failed]
    seen = histories(server.address, location, ids, done)
    failures = [f"run {run_id}: {why}" for run_id, why in failed.items()]
    transitions = transitions_of(location, done)
    phases = {"start": ready - began, "stop": stopped - stopping,
              "read": time.perf_counter() - stopped}  # fmt: skip
    return Batch(journal, workers, round_, len(done), transitions, seconds, cpu, seen.bytes,
                 seen.events, seen.retries, pool.errors, busy, failures, phases)  # fmt: skip


# --- histories ------------------------------------------------------------------------------


@dataclass(frozen=True)
class History:
    """A workflow's history over all its runs (continue-as-new links them)."""

    bytes: int
    events: int
    segments: int
    #: the largest one run's history, which is what Temporal's limits apply to
    max_bytes: int
    max_events: int


async def _history(client: Client, workflow_id: str) -> History:
    """From the workflow's latest run back along `continued_execution_run_id`."""
    sizes: list[tuple[int, int]] = []
    run_id: str | None = None
    while True:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        history = await handle.fetch_history()
        sizes.append((sum(e.ByteSize() for e in history.events), len(history.events)))
        first = history.events[0].workflow_execution_started_event_attributes
        run_id = first.continued_execution_run_id or None
        if run_id is None:
            break
    return History(
        bytes=sum(b for b, _ in sizes),
        events=sum(n for _, n in sizes),
        segments=len(sizes),
        max_bytes=max(b for b, _ in sizes),
        max_events=max(n for _, n in sizes),
    )


def history(address: str, db: str, workflow_id: str) -> History:
    async def one() -> History:
        return await _history(await connect(address, db), workflow_id)

    return asyncio.run(one())


@dataclass(frozen=True)
class Histories:
    """The histories of a batch's workflows: their size, and the activity attempts past
    the first (a retry), by activity type."""

    bytes: int
    events: int
    retries: dict[str, int]


async def _retries(client: Client, workflow_id: str) -> Counter[str]:
    """Each activity attempt past the first (`ActivityTaskStarted.attempt`), by type, in
    the workflow's latest run."""
    found: Counter[str] = Counter()
    scheduled: dict[int, str] = {}
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attrs.activity_type.name
        elif event.HasField("activity_task_started_event_attributes"):
            began = event.activity_task_started_event_attributes
            if began.attempt > 1:
                found[scheduled.get(began.scheduled_event_id, "?")] += began.attempt - 1
    return found


def histories(
    address: str, db: str, workflow_ids: Sequence[str], sized: Sequence[str] | None = None
) -> Histories:
    """The repeated activities of `workflow_ids`, and the size of the histories of those
    among them in `sized` (default all)."""
    counted = set(workflow_ids if sized is None else sized)

    async def every() -> Histories:
        client = await connect(address, db)
        sizes = await asyncio.gather(*(_history(client, w) for w in workflow_ids))
        retries = await asyncio.gather(*(_retries(client, w) for w in workflow_ids))
        mine = [h for w, h in zip(workflow_ids, sizes, strict=True) if w in counted]
        return Histories(
            bytes=sum(h.bytes for h in mine),
            events=sum(h.events for h in mine),
            retries=dict(sum(retries, Counter())),
        )

    return asyncio.run(every())
