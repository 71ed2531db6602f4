"""The lab of the tests that take something away from a run on Temporal mid-run, for real:
its worker (`tests.test_temporal_faults`), the Temporal server or the journal's database
(`tests.test_temporal_restarts`).

A `Lab` writes a tools module and a worker program into `tmp_path`, starts real worker
processes on them, and reads what they did: the tools log each call (`PID TIME WHAT`) and
`charge` writes a ledger line for each side effect. The helpers below submit a run, await
its outcome, and check that its journal is whole and that `fsm-agent verify` / `fsm-agent
replay` prove it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Self

import pytest

from fsm_agent.halt import HaltReason
from fsm_agent.journal.store import Event
from fsm_agent.run_ids import RunNotFound
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.stores import open_store
from fsm_agent.submission import frozen_job
from fsm_agent.temporal.service import connect, record_of, result, start
from fsm_agent.temporal.setup import submission
from fsm_agent.temporal.workflow import Outcome

#: agent_loop's wall clock (15 s) is below what a lost worker or server costs, its tool
#: timeout (5 s) no longer than a slow tool takes: the run's own budgets must not be what
#: ends it.
BUDGETS = {"wall_clock_ms": 180_000, "tool_timeout_ms": 30_000}

TOOLS_MODULE = '''\
"""The lab's tools: a read `lookup`, and `charge`, whose side effect (a ledger line) is made
at once and its answer given a while later. Each call is logged to LAB_CALLS; with
LAB_LOG_ANSWERS set, each answer too (`looked up Q`, `charged N`)."""

import os
import time

from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.tools import ToolRegistry, ToolResult

TOOLS = ToolRegistry()


def log(line):
    with open(os.environ["LAB_CALLS"], "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()} {time.monotonic():.3f} {line}\\n")


def answered(line):
    if os.environ.get("LAB_LOG_ANSWERS"):
        log(line)


@TOOLS.tool(side_effect=False)
def lookup(q: str = "") -> ToolResult:
    """A read, LAB_LOOKUP_SLEEP_S slow: the fact, with its receipt."""
    log(f"lookup {q}")
    time.sleep(float(os.environ.get("LAB_LOOKUP_SLEEP_S", "0")))
    answered(f"looked up {q}")
    return ToolResult(
        receipts=(Receipt(status=200, id="fact:lab password"),), observation={"fact": "swordfish"}
    )


@TOOLS.tool()
def charge(amount: int) -> ToolResult:
    """Charge `amount`: the side effect (a ledger line) happens at once, the answer
    (LAB_CHARGE_PAD characters of note in it) LAB_CHARGE_SLEEP_S later."""
    log(f"charge {amount}")  # before the ledger: a test may kill the worker once the ledger has it
    with open(os.environ["LAB_LEDGER"], "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()} charged {amount}\\n")
        f.flush()
        os.fsync(f.fileno())
    time.sleep(float(os.environ.get("LAB_CHARGE_SLEEP_S", "5")))
    answered(f"charged {amount}")
    charge_id = f"ch_{amount}"
    note = "x" * int(os.environ.get("LAB_CHARGE_PAD", "0"))
    return ToolResult(
        receipts=(Receipt(status=200, id=charge_id, idempotency_key=f"charge-{amount}"),),
        observation={"charged": amount, "charge_id": charge_id, "note": note},
    )
'''

WORKER_PROGRAM = '''\
"""One Temporal worker process: `python lab_worker.py ADDRESS JOURNAL SCRIPT ALLOW`."""

import asyncio
import os
import sys
import time

from fsm_agent import ScriptedModel, load_tools
from fsm_agent.stores import open_store
from fsm_agent.temporal.service import serve
from fsm_agent.temporal.setup import Setup

from lab_tools import log


class LoggedModel(ScriptedModel):
    """The scripted replies, each call logged (pid, step) and slowed by LAB_MODEL_SLEEP_S."""

    isolation = "thread"

    def __call__(self, prompt):
        log(f"model {prompt.step}")
        time.sleep(float(os.environ.get("LAB_MODEL_SLEEP_S", "0")))
        return super().__call__(prompt)


address, journal, script, allow = sys.argv[1:5]
setup = Setup(
    journal=journal,
    model=LoggedModel.from_file(script),
    tools=load_tools("lab_tools"),
    allow=tuple(allow.split(",")),
)
log("serving")
try:
    asyncio.run(serve(address, setup, open_store(journal)))
except BaseException as exc:
    log(f"worker ended: {type(exc).__name__}: {exc}")
    raise
'''


class Lab:
    """One test's files, environment and worker processes; `journal` a SQLite path or a
    PostgreSQL DSN (by default `journal.db` in `tmp_path`), `replies` the model's script."""

    #: whether the tools log each answer too (`looked up Q`, `charged N`) besides each call
    log_answers = False

    def __init__(self, tmp_path: Path, replies: list[object], journal: str | None = None) -> None:
        self.dir = tmp_path
        self.journal = journal or str(tmp_path / "journal.db")
        self.ledger = tmp_path / "ledger.txt"
        self.calls = tmp_path / "calls.txt"
        self.script = tmp_path / "replies.json"
        self.script.write_text(json.dumps(replies), encoding="utf-8")
        (tmp_path / "lab_tools.py").write_text(TOOLS_MODULE, encoding="utf-8")
        (tmp_path / "lab_worker.py").write_text(WORKER_PROGRAM, encoding="utf-8")
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        self.env.update(LAB_LEDGER=str(self.ledger), LAB_CALLS=str(self.calls))
        if self.log_answers:
            self.env["LAB_LOG_ANSWERS"] = "1"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.killed: list[subprocess.Popen[bytes]] = []  # by `kill`: their end is no failure
        open_store(self.journal).close()  # the journal exists before any worker opens it

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def worker(
        self, address: str, allow: str, name: str = "", **env: str
    ) -> subprocess.Popen[bytes]:
        """A worker process serving `address`, allowed the tools `allow` (`a,b`), its output
        in `worker-NAME.log` (`worker.log` without a name), `env` added to its environment."""
        path = self.dir / (f"worker-{name}.log" if name else "worker.log")
        log = open(path, "ab")  # noqa: SIM115 - the child's
        try:
            proc = subprocess.Popen(
                [sys.executable, str(self.dir / "lab_worker.py"), address, self.journal,
                 str(self.script), allow],
                env={**self.env, **env}, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        finally:
            log.close()
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL, as an OOM killer or a lost machine would: no handler runs."""
        self.killed.append(proc)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)

    def lines(self, path: Path) -> list[str]:
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []

    def called(self) -> list[str]:
        """The calls made, as `PID WHAT` (the time each was logged at left out)."""
        logged = (c.split(" ", 2) for c in self.lines(self.calls))
        return [f"{pid} {what}" for pid, _, what in logged]

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-6000:]}"
            for p in sorted(self.dir.glob("*.log"))
        )

    def wait_for(self, what: str, done: Callable[[], bool], timeout_s: float) -> None:
        """Returns once `done()`; fails the test after `timeout_s`, or as soon as a worker
        the lab did not kill has exited."""
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                pytest.fail(f"{what}: not within {timeout_s} s\n{self.logs()}")
            for proc in self.procs:
                if proc.poll() is not None and proc not in self.killed:
                    pytest.fail(f"a worker exited ({proc.returncode}) while {what}\n{self.logs()}")
            time.sleep(0.05)

    def events(self, run_id: str) -> list[Event]:
        """The run's events in the journal (none while it has not started)."""
        store = open_store(self.journal, read_only=True)
        try:
            return store.events(run_id)
        except RunNotFound:
            return []
        finally:
            store.close()

    async def submit(self, address: str, task: str) -> str:
        """A run of agent_loop on `task` started on Temporal at `address`, as `fsm-agent
        submit` starts one; its id."""
        job = frozen_job("agent_loop", task, BUDGETS)
        client = await connect(address, self.journal)
        await start(client, submission(job))
        return job.run_id

    async def outcome(self, address: str, run_id: str, timeout_s: float) -> Outcome:
        """The run's outcome, from a client connected now."""
        client = await connect(address, self.journal)
        return await asyncio.wait_for(result(client, run_id), timeout_s)

    def cli(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fsm_agent", *argv, "--db", self.journal],
            env=self.env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip


def halted(outcome: Outcome) -> HaltRecord:
    """The record of a run that halted (not paused)."""
    record = record_of(outcome)
    assert outcome.paused is None
    assert record is not None, outcome
    return record


def assert_contiguous(events: list[Event], record: HaltRecord) -> None:
    """Seq 0..last without a gap, each event leaving the state the one before entered, the
    last one the record's halt, the record started when the journal says the run did."""
    assert [e.seq for e in events] == list(range(len(events)))
    assert events[0].kind == "started"
    for before, after in itertools.pairwise(events):
        assert after.source == before.dest, (before, after)
    assert events[-1].halt is record.halt_reason
    # the workflow's Worker is rebuilt by every worker that replays the run: what it
    # records of the run's start must be the journal's (not the replaying process's clock)
    assert record.started_at == events[0].wall_time, (
        f"the record says the run started at {record.started_at}, its journal says at"
        f" {events[0].wall_time}: a replaying worker's own clock, not the workflow's"
    )
    assert record.started_at <= record.ended_at, (record.started_at, record.ended_at)


def assert_proven(lab: Lab, run_id: str, halt: HaltReason) -> None:
    """`fsm-agent verify` passes the run's chain, `fsm-agent replay` proves its halt."""
    verified = lab.cli("verify", run_id)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    replayed = lab.cli("replay", run_id)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "proven" in replayed.stdout, replayed.stdout
    assert f"halt {halt.value} proven" in replayed.stdout, replayed.stdout


def assert_charge_unknown(record: HaltRecord) -> None:
    """charge's answer never reached the run (its last call): the call timed out, its effect
    unknown and named, nothing grounded by it."""
    assert isinstance(record.halt_reason, HaltReason)
    assert record.halt_reason is HaltReason.TOOL_TIMEOUT, record
    assert record.terminal_state == "budget_exhausted"
    assert record.grounded_by == ()
    assert "ch_42" not in (record.answer or ""), record.answer  # the model's never read
    charge = record.tool_calls[-1]
    assert (charge.name, charge.status, charge.receipts) == ("charge", "timed_out", ())
    assert charge.outcome_unknown, charge
    assert len(record.unreceipted) == 1, record.unreceipted
    assert "charge" in record.unreceipted[0], record.unreceipted
