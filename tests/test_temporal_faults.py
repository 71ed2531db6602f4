"""Temporal workers killed for real (SIGKILL), another worker finishing the run.

Each test starts a Temporal development server (`DevServer`), writes a tools module and a
worker program into `tmp_path`, starts worker process A, submits one run from the test
process, SIGKILLs A at a chosen point of the run (found by watching the ledger a tool
writes, or the run's journal), starts worker B, and awaits the run's outcome. Then the
journal must hold every transition exactly once, and `fsm-agent verify` / `fsm-agent
replay` must prove the run as a local run's.

The workflow learns that A is gone only when the call A was making misses its heartbeat
(`fsm_agent.temporal.activities.HEARTBEAT_S`, 10 s) and the workflow task sticky to A times
out (5 s): each test takes some 15-20 s.
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fsm_agent.halt import HaltReason
from fsm_agent.journal.store import Event
from fsm_agent.run_ids import RunNotFound
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.stores import open_store
from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.submission import frozen_job
from fsm_agent.temporal.activities import HEARTBEAT_S
from fsm_agent.temporal.service import DevServer, connect, record_of, result, start
from fsm_agent.temporal.setup import submission
from fsm_agent.temporal.workflow import Outcome

pytestmark = [pytest.mark.slow, pytest.mark.temporal]

#: How long the run may take once A is dead: the heartbeat timeout, the sticky workflow
#: task's timeout, B's start and a loaded 2-core machine's slack.
AFTER_KILL_S = 90.0
#: agent_loop's wall clock (15 s) is below what a lost worker costs, its tool timeout (5 s)
#: no longer than `charge` takes: the run's own budgets must not be what ends it.
BUDGETS = {"wall_clock_ms": 180_000, "tool_timeout_ms": 30_000}

TOOLS_MODULE = '''\
"""The tools of the fault tests: a side-effecting `charge` that writes the ledger first
and answers only after a while, and a read `lookup`."""

import os
import time

from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.tools import ToolRegistry, ToolResult

TOOLS = ToolRegistry()


def log(line):
    with open(os.environ["FAULT_CALLS"], "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()} {line}\\n")


@TOOLS.tool()
def charge(amount: int) -> ToolResult:
    """Charge `amount`: the side effect (a ledger line) happens at once, the answer later."""
    log(f"charge {amount}")  # before the ledger: the test kills A once the ledger has it
    with open(os.environ["FAULT_LEDGER"], "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()} charged {amount}\\n")
        f.flush()
        os.fsync(f.fileno())
    time.sleep(float(os.environ.get("FAULT_CHARGE_SLEEP_S", "5")))
    charge_id = f"ch_{amount}"
    return ToolResult(
        receipts=(Receipt(status=200, id=charge_id, idempotency_key=f"charge-{amount}"),),
        observation={"charged": amount, "charge_id": charge_id},
    )


@TOOLS.tool(side_effect=False)
def lookup(q: str = "") -> ToolResult:
    """A read: the fact, with its receipt."""
    log(f"lookup {q}")
    return ToolResult(
        receipts=(Receipt(status=200, id="fact:lab password"),), observation={"fact": "swordfish"}
    )
'''

WORKER_PROGRAM = '''\
"""One Temporal worker process: `python fault_worker.py ADDRESS DB SCRIPT ALLOW`."""

import asyncio
import itertools
import os
import sys
import time

from fsm_agent import ScriptedModel, load_tools
from fsm_agent.stores import open_store
from fsm_agent.temporal.service import serve
from fsm_agent.temporal.setup import Setup

from fault_tools import log


class LoggedModel(ScriptedModel):
    """The scripted replies, each call logged (pid, step) and slowed by FAULT_MODEL_SLEEP_S."""

    isolation = "thread"

    def __call__(self, prompt):
        log(f"model {prompt.step}")
        time.sleep(float(os.environ.get("FAULT_MODEL_SLEEP_S", "0")))
        return super().__call__(prompt)


address, db, script, allow = sys.argv[1:5]
setup = Setup(
    journal=db,
    model=LoggedModel.from_file(script),
    tools=load_tools("fault_tools"),
    allow=tuple(allow.split(",")),
)
log("serving")
asyncio.run(serve(address, setup, open_store(db)))
'''


class Lab:
    """One test's files, environment and worker processes."""

    def __init__(self, tmp_path: Path, address: str, replies: list[object]) -> None:
        self.dir = tmp_path
        self.address = address
        self.db = tmp_path / "journal.db"
        self.ledger = tmp_path / "ledger.txt"
        self.calls = tmp_path / "calls.txt"
        self.script = tmp_path / "replies.json"
        self.script.write_text(json.dumps(replies), encoding="utf-8")
        (tmp_path / "fault_tools.py").write_text(TOOLS_MODULE, encoding="utf-8")
        (tmp_path / "fault_worker.py").write_text(WORKER_PROGRAM, encoding="utf-8")
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        self.env.update(FAULT_LEDGER=str(self.ledger), FAULT_CALLS=str(self.calls))
        self.procs: list[subprocess.Popen[bytes]] = []
        open_store(self.db).close()  # the journal exists before any worker opens it

    def worker(self, name: str, allow: str, **env: str) -> subprocess.Popen[bytes]:
        log = open(self.dir / f"worker-{name}.log", "ab")  # noqa: SIM115 - the child's
        try:
            proc = subprocess.Popen(
                [sys.executable, str(self.dir / "fault_worker.py"), self.address,
                 str(self.db), str(self.script), allow],
                env={**self.env, **env}, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        finally:
            log.close()
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL, as an OOM killer or a lost machine would: no handler runs."""
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)

    def lines(self, path: Path) -> list[str]:
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
            for p in sorted(self.dir.glob("worker-*.log"))
        )

    def cli(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fsm_agent", *argv, "--db", str(self.db)],
            env=self.env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip


@pytest.fixture
def server(tmp_path: Path) -> Iterator[DevServer]:
    with DevServer(log=tmp_path / "temporal.log") as dev:
        yield dev


@contextmanager
def lab(tmp_path: Path, server: DevServer, replies: list[object]) -> Iterator[Lab]:
    here = Lab(tmp_path, server.address, replies)
    try:
        yield here
    finally:
        here.close()


def wait_for(what: str, done: Callable[[], bool], timeout_s: float, lab: Lab) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s} s\n{lab.logs()}")
        for proc in lab.procs:
            if proc.poll() is not None and proc.returncode != -signal.SIGKILL:
                pytest.fail(f"a worker exited ({proc.returncode}) while {what}\n{lab.logs()}")
        time.sleep(0.05)


def journal_events(db: Path, run_id: str) -> list[Event]:
    store = SqliteStore(db, read_only=True)
    try:
        return store.events(run_id)
    except RunNotFound:
        return []
    finally:
        store.close()


async def submit(lab: Lab, task: str) -> str:
    job = frozen_job("agent_loop", task, BUDGETS)
    client = await connect(lab.address, str(lab.db))
    await start(client, submission(job))
    return job.run_id


async def outcome_of(lab: Lab, run_id: str) -> Outcome:
    client = await connect(lab.address, str(lab.db))
    return await asyncio.wait_for(result(client, run_id), AFTER_KILL_S)


def assert_proven(lab: Lab, run_id: str, halt: HaltReason) -> None:
    verified = lab.cli("verify", run_id)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    replayed = lab.cli("replay", run_id)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "proven" in replayed.stdout, replayed.stdout
    assert f"halt {halt.value} proven" in replayed.stdout, replayed.stdout


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


def test_sigkill_during_side_effecting_tool_call_never_repeats_it(
    tmp_path: Path, server: DevServer
) -> None:
    replies = [{"tool_call": {"name": "charge", "args": {"amount": 42}}}, {"answer": "ch_42"}]
    with lab(tmp_path, server, replies) as here:
        a = here.worker("a", "charge", FAULT_CHARGE_SLEEP_S="5")
        run_id = asyncio.run(submit(here, "Charge 42 and confirm the charge."))
        wait_for("charge is called", lambda: len(here.lines(here.ledger)) == 1, 60, here)
        here.kill(a)  # charge has taken effect; its result (and receipt) die with A
        killed = time.monotonic()
        here.worker("b", "charge", FAULT_CHARGE_SLEEP_S="5")
        outcome = asyncio.run(outcome_of(here, run_id))
        lost_after_s = time.monotonic() - killed

        # exactly one side effect, made by A: B never re-issued the call
        assert here.lines(here.ledger) == [f"{a.pid} charged 42"], here.lines(here.ledger)
        assert lost_after_s > HEARTBEAT_S / 2  # A's loss is seen when its heartbeat is missed
        record = record_of(outcome)
        assert outcome.paused is None
        assert record is not None, outcome
        # The lost call reaches the runtime as the call's timeout (`tool_timed_out`), its
        # effect unknown. agent_loop declares `tool_timed_out` from tool_pending to
        # budget_exhausted with halt `tool_timeout`: the run ends there, and the model is
        # never asked again, so charge cannot even be proposed a second time (had it been,
        # the contract's `unknown_effect` rule would halt `side_effect_unknown`). The record
        # names the unreceipted charge: a person checks the ledger, not the runtime. (Not
        # killed, this very script ends `completed`, grounded by charge's receipt.)
        assert isinstance(record.halt_reason, HaltReason)
        assert record.halt_reason is HaltReason.TOOL_TIMEOUT, record
        assert record.terminal_state == "budget_exhausted"
        assert record.steps_used == 1
        assert record.grounded_by == ()
        assert "ch_42" not in (record.answer or ""), record.answer  # the model's never read
        assert len(record.unreceipted) == 1, record.unreceipted
        assert "charge" in record.unreceipted[0], record.unreceipted
        [lost] = record.tool_calls
        assert (lost.name, lost.status, lost.receipts) == ("charge", "timed_out", ())
        assert lost.outcome_unknown, lost

        calls = here.lines(here.calls)
        assert [c for c in calls if not c.endswith("serving")] == [
            f"{a.pid} model 1",
            f"{a.pid} charge 42",
        ], calls
        events = journal_events(here.db, run_id)
        assert_contiguous(events, record)
        assert [e.trigger for e in events if e.kind == "transition"][-1] == "tool_timed_out"
        assert_proven(here, run_id, record.halt_reason)


def test_sigkill_between_steps_loses_no_transition(tmp_path: Path, server: DevServer) -> None:
    replies = [{"tool_call": {"name": "lookup", "args": {"q": "lab password"}}},
               {"answer": "swordfish"}]  # fmt: skip
    with lab(tmp_path, server, replies) as here:
        # each model call takes 4 s: A is killed inside step 2's, after step 1's read tool
        # returned and its transitions were committed
        a = here.worker("a", "lookup", FAULT_MODEL_SLEEP_S="4")
        run_id = asyncio.run(submit(here, "Find the lab password in the lookup tool."))

        wait_for("step 2's model call", lambda: f"{a.pid} model 2" in here.lines(here.calls),
                 60, here)  # fmt: skip
        before = journal_events(here.db, run_id)  # committed before the call began
        assert [e.trigger for e in before] == [None, "tool_call", "tool_returned", "collected"]
        assert before[-1].dest == "drafting"
        here.kill(a)
        assert journal_events(here.db, run_id) == before  # A wrote nothing more
        b = here.worker("b", "lookup", FAULT_MODEL_SLEEP_S="0")
        outcome = asyncio.run(outcome_of(here, run_id))

        record = record_of(outcome)
        assert outcome.paused is None
        assert record is not None, outcome
        assert record.halt_reason is HaltReason.COMPLETED, record
        assert record.answer == "swordfish"
        assert record.steps_used == 2

        events = journal_events(here.db, run_id)
        # 0 transitions lost: what A committed is there unchanged, B went on from its last
        # event (seq contiguous from 0 to the halt, each transition leaving the state the one
        # before entered)
        assert events[: len(before)] == before
        assert [e.trigger for e in events[len(before) :]] == ["answer"]  # B: step 2
        assert_contiguous(events, record)
        # B made step 2's model call again (a read: Temporal may ask it again), nothing of
        # step 1: the read tool ran once, in A
        calls = [c for c in here.lines(here.calls) if not c.endswith("serving")]
        assert calls == [
            f"{a.pid} model 1",
            f"{a.pid} lookup lab password",
            f"{a.pid} model 2",
            f"{b.pid} model 2",
        ], calls
        assert_proven(here, run_id, record.halt_reason)
