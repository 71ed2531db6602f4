"""What a run on Temporal survives besides its worker: the Temporal server, and the database
its journal is in, each stopped for real mid-run and started again.

Each test writes the tools module and the worker program of `tests.temporal_lab` into
`tmp_path` (as `tests.test_temporal_faults` does), starts one real worker process, submits
one run from the test process (a slow read `lookup`, a side-effecting `charge` that writes a
ledger line, the answer) and takes the other party away while a call is in flight:

- the Temporal development server (`DevServer` with a state file) is SIGKILLed, its whole
  process group, and a new one started on the same port and the same state file. The
  worker process is never restarted: it must reconnect by itself (the SDK's client retries
  its polls, heartbeats and completions against the port until a server answers);
- the journal's PostgreSQL server is stopped and started again (`pg_ctlcluster`), the run's
  journal writes waiting meanwhile.

Each way the run must end in a named halt, `charge` must have charged once, the journal
must hold seq 0..N without a gap, each event leaving the state the one before entered, and
`fsm-agent verify` / `fsm-agent replay` must prove the run.

The PostgreSQL tests need a server of this machine they may stop and start
(`FSM_AGENT_TEST_PG`, default postgresql://postgres@127.0.0.1:5432/test, a cluster
`pg_ctlcluster` runs); each takes a fresh schema. Without one they are skipped, or fail
under `FSM_AGENT_PG_TESTS=require`. PostgreSQL is running again after each, however it
ended. Run with `-s` to see what each run's workflow history says of the outage.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsm_agent.halt import HaltReason
from fsm_agent.runtime.record import HaltRecord
from fsm_agent.temporal.activities import HEARTBEAT_S
from fsm_agent.temporal.payloads import INLINE_MAX
from fsm_agent.temporal.service import DevServer, connect, free_port
from fsm_agent.temporal.workflow import Outcome
from tests.temporal_lab import Lab, assert_charge_unknown, assert_contiguous, assert_proven, halted

pytestmark = [pytest.mark.slow, pytest.mark.temporal]

PG_ENV, PG_DEFAULT = "FSM_AGENT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test"
#: How long the run may take once the other party is back (a loaded 2-core machine).
AFTER_RESTART_S = 90.0
ALLOW = "lookup,charge"
TASK = "Look up the lab password, then charge 42 and confirm the charge."
REPLIES = [
    {"tool_call": {"name": "lookup", "args": {"q": "lab password"}}},
    {"tool_call": {"name": "charge", "args": {"amount": 42}}},
    {"answer": "ch_42"},
]


class RestartLab(Lab):
    """The lab of one run of `REPLIES` (its tools logging each answer too, `looked up Q` and
    `charged N`), and the Temporal servers it started."""

    log_answers = True

    def __init__(self, tmp_path: Path, journal: str | None = None) -> None:
        super().__init__(tmp_path, REPLIES, journal)
        self.servers: list[DevServer] = []

    def server(self, port: int, state: Path | None = None) -> DevServer:
        """A Temporal development server on `port`, its state in `state` (else in memory)."""
        dev = DevServer(db_file=None if state is None else str(state), port=port,
                        log=self.dir / "temporal.log")  # fmt: skip
        self.servers.append(dev)
        return dev.start(timeout_s=90.0)

    def close(self) -> None:
        super().close()
        for dev in self.servers:
            dev.stop()


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a process and every process of its group, as a lost machine would."""
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL


async def outcome_and_history(lab: Lab, address: str, run_id: str) -> tuple[Outcome, list[str]]:
    """The run's outcome (from a client connected now), and what its workflow history says
    of each activity attempt, each retried workflow task and each failure, with its time
    since the workflow started (`journal #2 @12.3s <its last failure>`)."""
    outcome = await lab.outcome(address, run_id, AFTER_RESTART_S)
    client = await connect(address, lab.journal)
    said: list[str] = []
    names: dict[int, str] = {}
    first: float | None = None
    async for event in client.get_workflow_handle(run_id).fetch_history_events():
        at = event.event_time.ToDatetime().timestamp()
        first = at if first is None else first
        when = f"@{at - first:.1f}s"
        kind = event.WhichOneof("attributes") or ""
        if kind == "activity_task_scheduled_event_attributes":
            scheduled = event.activity_task_scheduled_event_attributes
            names[event.event_id] = scheduled.activity_type.name.removeprefix("fsm-agent-")
        elif kind == "activity_task_started_event_attributes":
            started = event.activity_task_started_event_attributes
            last = started.last_failure.message[-100:] if started.attempt > 1 else ""
            said.append(f"{names[started.scheduled_event_id]} #{started.attempt} {when} {last}")
        elif kind == "workflow_task_scheduled_event_attributes":
            attempt = event.workflow_task_scheduled_event_attributes.attempt
            if attempt > 1:
                said.append(f"workflow task #{attempt} {when}")
        elif kind.endswith(("_failed_event_attributes", "_timed_out_event_attributes")):
            said.append(f"{kind.removesuffix('_event_attributes')} {when}")
    return outcome, [line.rstrip() for line in said]


def assert_run(lab: Lab, run_id: str, outcome: Outcome) -> HaltRecord:
    """The run's record: a named halt, one charge (made by the one worker), the journal's
    events contiguous, the run verified and its halt proven by replay."""
    record = halted(outcome)
    assert isinstance(record.halt_reason, HaltReason), record
    [worker] = lab.procs
    assert lab.lines(lab.ledger) == [f"{worker.pid} charged 42"], lab.lines(lab.ledger)
    assert lab.called().count(f"{worker.pid} charge 42") == 1, lab.called()
    assert {c.split()[0] for c in lab.called()} == {str(worker.pid)}, lab.called()

    assert_contiguous(lab.events(run_id), record)
    assert_proven(lab, run_id, record.halt_reason)
    return record


def assert_completed(record: HaltRecord, lab: Lab) -> None:
    """The run went on as if nothing had happened: charge's receipt grounds the answer."""
    assert record.halt_reason is HaltReason.COMPLETED, (record, lab.called())
    assert record.answer == "ch_42"
    assert record.grounded_by == ("step 2: charge",), record.grounded_by
    assert [(c.name, c.status) for c in record.tool_calls] == [
        ("lookup", "returned"),
        ("charge", "returned"),
    ], record.tool_calls


def assert_lookup_then_charge_unknown(record: HaltRecord) -> None:
    """lookup returned; charge's answer never reached the run: its effect unknown, named,
    never re-issued."""
    assert_charge_unknown(record)
    lookup, _ = record.tool_calls
    assert (lookup.name, lookup.status) == ("lookup", "returned")


# --- the Temporal server --------------------------------------------------------------------

#: The call in flight when the server is killed, what it logs once it answered, and how long
#: the server stays down after that.
SERVER_CUTS = {
    # the answer is retried by the worker's client until the new server takes it
    "lookup": ("lookup lab password", "looked up lab password", 1.0),
    "charge": ("charge 42", "charged 42", 1.0),
    # down past the heartbeat timeout: the new server times the call out (or, should the
    # worker's next retry of the answer beat the server's timer, takes the answer)
    "charge-long": ("charge 42", "charged 42", HEARTBEAT_S + 4.0),
}


@pytest.mark.parametrize("cut", list(SERVER_CUTS))
def test_temporal_server_killed_and_restarted_mid_run(tmp_path: Path, cut: str) -> None:
    port, state = free_port(), tmp_path / "temporal.db"
    begun, ended, down_s = SERVER_CUTS[cut]
    with RestartLab(tmp_path) as here:
        first = here.server(port, state)
        worker = here.worker(first.address, ALLOW, LAB_LOOKUP_SLEEP_S="2", LAB_CHARGE_SLEEP_S="2")
        run_id = asyncio.run(here.submit(first.address, TASK))
        here.wait_for(begun, lambda: f"{worker.pid} {begun}" in here.called(), 60)
        assert first.proc is not None
        kill_group(first.proc)  # the server, and anything it started
        killed = time.monotonic()
        here.wait_for(ended, lambda: f"{worker.pid} {ended}" in here.called(), 30)
        time.sleep(down_s)  # the call answered while no server listened
        assert worker.poll() is None, f"the worker died with the server\n{here.logs()}"

        second = here.server(port, state)  # the same port, the same state
        back = time.monotonic()
        outcome, history = asyncio.run(outcome_and_history(here, second.address, run_id))
        print(f"\n[server {cut}] down {back - killed:.1f} s, the run done"
              f" {time.monotonic() - back:.1f} s after; history: {history}")  # fmt: skip

        record = assert_run(here, run_id, outcome)
        assert worker.poll() is None, here.logs()  # it reconnected, and serves on
        timed_out = "activity_task_timed_out" in " ".join(history)
        lookups = here.called().count(f"{worker.pid} lookup lab password")
        if cut == "charge-long" and record.halt_reason is not HaltReason.COMPLETED:
            assert_lookup_then_charge_unknown(record)
            assert timed_out, history
        else:
            assert_completed(record, here)
        # the read may be asked again had its answer been lost with the server; charge never
        assert lookups == (2 if timed_out and cut == "lookup" else 1), (history, here.called())


# --- the journal's PostgreSQL server --------------------------------------------------------


def _unavailable(why: str) -> None:
    if os.environ.get("FSM_AGENT_PG_TESTS") == "require":
        pytest.fail(f"PostgreSQL tests required (FSM_AGENT_PG_TESTS=require): {why}")
    pytest.skip(f"PostgreSQL: {why}")


def with_search_path(dsn: str, schema: str) -> str:
    """`dsn` (a postgresql:// URL) whose sessions use `schema` (libpq `options`)."""
    parts = urllib.parse.urlsplit(dsn)
    query = [*urllib.parse.parse_qsl(parts.query), ("options", f"-csearch_path={schema}")]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


class Postgres:
    """The cluster of this machine a DSN names, stopped and started with `pg_ctlcluster`."""

    def __init__(self, dsn: str, version: str, name: str) -> None:
        self.dsn, self.version, self.name = dsn, version, name

    def ctl(self, action: str) -> None:
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, action],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip

    def answers(self) -> bool:
        import psycopg

        try:
            psycopg.connect(self.dsn, connect_timeout=3).close()
        except psycopg.Error:
            return False
        return True

    def ensure_up(self) -> None:
        """Started again if it is not running; returns once it answers."""
        if not self.answers():
            subprocess.run(
                ["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, "start"],
                capture_output=True,
                timeout=120,
                check=False,
            )  # fmt: skip - not check=True: it may have been starting already
        deadline = time.monotonic() + 60
        while not self.answers():
            assert time.monotonic() < deadline, "PostgreSQL did not start again"
            time.sleep(0.2)


def _cluster(dsn: str) -> Postgres:
    """The cluster of this machine that serves `dsn` (else skipped, or failed under
    FSM_AGENT_PG_TESTS=require)."""
    parts = urllib.parse.urlsplit(dsn)
    tools = all(shutil.which(t) for t in ("pg_ctlcluster", "pg_lsclusters"))
    if parts.hostname not in ("127.0.0.1", "localhost", "::1") or not tools:
        _unavailable(f"{parts.hostname}:{parts.port} is no cluster pg_ctlcluster restarts here")
    listed = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True, check=False)
    for line in listed.stdout.splitlines():
        version, name, port, *_ = line.split()
        if int(port) == (parts.port or 5432):
            return Postgres(dsn, version, name)
    _unavailable(f"no cluster of this machine listens on port {parts.port}")
    raise AssertionError("unreachable")  # _unavailable skips or fails


@pytest.fixture
def postgres() -> Iterator[tuple[Postgres, str]]:
    """The test server's cluster, and a DSN on a fresh schema of it (dropped afterwards);
    the cluster is running again after the test, however the test ended."""
    try:
        import psycopg
        from psycopg import sql

        import fsm_agent.stores.postgres  # noqa: F401 - the PostgreSQL store is there
    except ImportError as exc:
        _unavailable(f"fsm_agent.stores.postgres is not importable ({exc})")
    dsn = os.environ.get(PG_ENV) or PG_DEFAULT  # set but empty: the default, never a file
    try:
        psycopg.connect(dsn, connect_timeout=3).close()
    except psycopg.Error as exc:
        _unavailable(f"no server at {dsn} ({exc})")
    cluster = _cluster(dsn)
    name = f"fsm_restart_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        yield cluster, with_search_path(dsn, name)
    finally:
        cluster.ensure_up()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def test_journal_database_stopped_and_started_between_calls(
    tmp_path: Path, postgres: tuple[Postgres, str]
) -> None:
    """PostgreSQL stops while `lookup` runs and stays down past its end, so the run's next
    journal write (lookup's transitions) comes while there is no database: it waits, and
    the run goes on once PostgreSQL is back."""
    cluster, dsn = postgres
    with RestartLab(tmp_path, dsn) as here:
        server = here.server(free_port())
        worker = here.worker(server.address, ALLOW, LAB_LOOKUP_SLEEP_S="2", LAB_CHARGE_SLEEP_S="1")
        run_id = asyncio.run(here.submit(server.address, TASK))
        here.wait_for("lookup", lambda: f"{worker.pid} lookup lab password" in here.called(), 60)
        before = here.events(run_id)  # committed before lookup was called
        assert before[-1].dest == "tool_pending", before
        try:
            cluster.ctl("stop")
            stopped = time.monotonic()
            returned = f"{worker.pid} looked up lab password"
            here.wait_for("lookup returns", lambda: returned in here.called(), 30)
            time.sleep(4.0)  # the run's next journal write waits for the database
            assert worker.poll() is None, here.logs()
            assert f"{worker.pid} model 2" not in here.called()  # nothing goes on unjournaled
        finally:
            cluster.ensure_up()
        back = time.monotonic()
        outcome, history = asyncio.run(outcome_and_history(here, server.address, run_id))
        print(f"\n[postgres between calls] down {back - stopped:.1f} s, the run done"
              f" {time.monotonic() - back:.1f} s after; history: {history}")  # fmt: skip

        record = assert_run(here, run_id, outcome)
        assert_completed(record, here)
        assert here.events(run_id)[: len(before)] == before
        assert here.called().count(f"{worker.pid} lookup lab password") == 1, here.called()
        assert worker.poll() is None, here.logs()


def test_journal_database_restarted_during_a_side_effecting_call(
    tmp_path: Path, postgres: tuple[Postgres, str]
) -> None:
    """PostgreSQL restarts (and answers again) while `charge` runs; charge's answer is
    larger than `INLINE_MAX`, so it goes through the journal's payload table on its way to
    Temporal. No charge is ever made twice, whatever becomes of its answer.

    Once a bug: the payload table's connection died with the restart, and the first use
    after it (encoding charge's answer) failed instead of connecting again; the workflow
    took the failed activity for a lost worker and the run halted `tool_timeout`, charge's
    effect unknown although it had answered. The table now connects again and asks again
    (`fsm_agent.temporal.payloads.RETRY_S`): the run completes."""
    cluster, dsn = postgres
    with RestartLab(tmp_path, dsn) as here:
        server = here.server(free_port())
        pad = str(4 * INLINE_MAX)  # charge's answer goes through the payload table
        worker = here.worker(server.address, ALLOW, LAB_LOOKUP_SLEEP_S="0",
                             LAB_CHARGE_SLEEP_S="6", LAB_CHARGE_PAD=pad)  # fmt: skip
        run_id = asyncio.run(here.submit(server.address, TASK))
        here.wait_for("charge", lambda: f"{worker.pid} charge 42" in here.called(), 60)
        restarted = time.monotonic()
        try:
            cluster.ctl("restart")
        finally:
            cluster.ensure_up()
        back = time.monotonic()
        assert f"{worker.pid} charged 42" not in here.called(), "charge answered too soon"
        outcome, history = asyncio.run(outcome_and_history(here, server.address, run_id))
        print(f"\n[postgres during charge] restart took {back - restarted:.1f} s, the run done"
              f" {time.monotonic() - back:.1f} s after; history: {history}")  # fmt: skip

        record = assert_run(here, run_id, outcome)
        assert worker.poll() is None, here.logs()
        assert_completed(record, here)
