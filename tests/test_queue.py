"""The run queue: submit, lease, renew and release on every store; workers in-process and as
real processes (many at once, one killed with SIGKILL, one stopped with SIGTERM).

Every store test runs on SQLite and, once `fsm_agent.stores.postgres` exists and a server answers,
on
PostgreSQL (`FSM_AGENT_TEST_PG`, default postgresql://postgres@127.0.0.1:5432/test; each
test gets a fresh schema). `FSM_AGENT_PG_TESTS=require` turns a missing server into a
failure instead of a skip.

The runs are `tests.queue_fixture` tasks, whose halt is known in advance; every model reply
and tool result in the journal names the process that made it, so the checks can tell from
the journal alone that no run was ever driven by two workers at once.
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import attrs
import pytest
from click.testing import CliRunner

from fsm_agent import JournalError, ScriptedModel, read_record, resume_run, run
from fsm_agent.adapters.loading import load_model
from fsm_agent.cli.main import cli
from fsm_agent.errors import InvalidInputError, RunAbandoned, RunPaused
from fsm_agent.journal.chain import verify_run
from fsm_agent.journal.store import Control, Event, Job, Store
from fsm_agent.queue import job as queue_job
from fsm_agent.queue import worker as queue_worker
from fsm_agent.queue.submission import WORKER_WHO, queued_spec, submit
from fsm_agent.queue.worker import MAX_BACKOFF_S, QueueWorker, backoff_s
from fsm_agent.review.replay import replay_events
from fsm_agent.run_ids import RunNotFound
from fsm_agent.runtime.proposals import ToolCall
from fsm_agent.runtime.tools import load_tools
from fsm_agent.stores import open_store
from fsm_agent.stores.dsn import is_dsn
from tests import queue_fixture
from tests.queue_fixture import GATE_ENV, STEP_MS_ENV, expected

ROOT = Path(__file__).parent.parent
PG_ENV, PG_DEFAULT = "FSM_AGENT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test"
MODEL = "python:tests.queue_fixture:oracle"
TOOLS = "tests.queue_fixture"
#: agent_loop lists no tools: the fixture's tools are granted by name (`--allow`)
ALLOW = ("step", "charge")
WAIT_S = 60.0  # generous: import-heavy worker processes on a loaded 2-core machine


# --- backends -------------------------------------------------------------------------------


def _unavailable(why: str) -> None:
    if os.environ.get("FSM_AGENT_PG_TESTS") == "require":
        pytest.fail(f"PostgreSQL tests required (FSM_AGENT_PG_TESTS=require): {why}")
    pytest.skip(f"PostgreSQL: {why}")


def with_search_path(dsn: str, schema: str) -> str:
    """`dsn` (a postgresql:// URL) whose sessions use `schema` (libpq `options`)."""
    parts = urllib.parse.urlsplit(dsn)
    query = [*urllib.parse.parse_qsl(parts.query), ("options", f"-csearch_path={schema}")]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


@pytest.fixture
def pg_location() -> Iterator[str]:
    """A DSN on a fresh PostgreSQL schema, dropped afterwards."""
    try:
        importlib.import_module("fsm_agent.stores.postgres")
        psycopg = importlib.import_module("psycopg")
    except ImportError as exc:
        _unavailable(f"fsm_agent.stores.postgres is not importable ({exc})")
    dsn = os.environ.get(PG_ENV) or PG_DEFAULT  # set but empty: the default, never a file
    try:
        admin = psycopg.connect(dsn, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        _unavailable(f"no server at {dsn} ({exc})")
    schema = f"fsm_queue_{uuid.uuid4().hex[:12]}"
    identifier = psycopg.sql.Identifier(schema)
    admin.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(identifier))
    try:
        yield with_search_path(dsn, schema)
    finally:
        admin.execute(psycopg.sql.SQL("DROP SCHEMA {} CASCADE").format(identifier))
        admin.close()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the journal lives: a SQLite file, or a PostgreSQL DSN (fresh schema)."""
    if request.param == "sqlite":
        return str(tmp_path / "journal.db")
    location: str = request.getfixturevalue("pg_location")
    return location


@pytest.fixture
def qstore(backend: str) -> Iterator[Store]:
    store = open_store(backend)
    try:
        yield store
    finally:
        store.close()


# --- the store's queue ----------------------------------------------------------------------


def test_submit_freezes_the_declaration_and_the_budgets(qstore: Store) -> None:
    job = submit(qstore, "agent_loop", "steps 2", {"max_steps": 5, "max_cost": None})
    [queued] = qstore.jobs()
    assert queued == job
    assert (job.status, job.owner, job.lease_until, job.attempts) == ("queued", None, None, 0)
    assert job.machine == "agent_loop"
    assert "name: agent_loop" in job.machine_text
    assert job.budgets.max_steps == 5
    assert job.budgets.max_cost == 1.0
    assert len(job.run_id) == 12


def test_a_bad_submission_is_refused_before_anything_is_queued(qstore: Store) -> None:
    with pytest.raises(Exception, match="budget max_steps"):
        submit(qstore, "agent_loop", "steps 2", {"max_steps": 0})
    with pytest.raises(Exception, match="no declared machine"):
        submit(qstore, "no_such_machine", "steps 2")
    with pytest.raises(Exception, match="task must be"):
        submit(qstore, "agent_loop", "  ")
    assert qstore.jobs() == []


def test_a_run_id_is_queued_once_and_never_over_a_journaled_run(
    qstore: Store, tmp_path: Path
) -> None:
    submit(qstore, "agent_loop", "steps 1", run_id="r1")
    with pytest.raises(JournalError, match="already queued or journaled"):
        submit(qstore, "agent_loop", "steps 1", run_id="r1")
    run("agent_loop", task="x", model=ScriptedModel([{"handoff": {"why": "test"}}]),
        store=qstore, run_id="r2", record_path=tmp_path / "r2.json")  # fmt: skip
    with pytest.raises(JournalError, match="already queued or journaled"):
        submit(qstore, "agent_loop", "steps 1", run_id="r2")
    assert [j.run_id for j in qstore.jobs()] == ["r1"]


def test_jobs_are_listed_oldest_first_capped_and_counted(qstore: Store) -> None:
    ids = [submit(qstore, "agent_loop", f"steps {n}").run_id for n in (1, 2, 3)]
    assert [j.run_id for j in qstore.jobs()] == ids
    assert [j.run_id for j in qstore.jobs("queued", limit=2)] == ids[:2]
    assert qstore.job_counts() == {"queued": 3}
    assert qstore.lease_job("w", 30) is not None
    assert qstore.job_counts() == {"queued": 2, "leased": 1}
    assert [j.run_id for j in qstore.jobs("leased", limit=1)] == ids[:1]


def test_lease_takes_the_oldest_job_and_never_one_that_is_leased(qstore: Store) -> None:
    first = submit(qstore, "agent_loop", "steps 1")
    second = submit(qstore, "agent_loop", "steps 2")
    a = qstore.lease_job("a", 30)
    b = qstore.lease_job("b", 30)
    assert qstore.lease_job("c", 30) is None
    assert a is not None
    assert b is not None
    assert (a.run_id, b.run_id) == (first.run_id, second.run_id)
    assert (a.status, a.owner, a.attempts) == ("leased", "a", 1)
    assert a.lease_until is not None
    assert abs(a.lease_until - (time.time() + 30)) < 5
    assert [j.run_id for j in qstore.jobs("leased")] == [first.run_id, second.run_id]
    assert qstore.jobs("queued") == []
    assert qstore.jobs("done") == []


def test_only_the_owner_renews_or_releases(qstore: Store) -> None:
    job = submit(qstore, "agent_loop", "steps 1")
    leased = qstore.lease_job("a", 30)
    assert leased is not None
    assert not qstore.renew_lease(job.run_id, "b", 30)
    assert not qstore.release_job(job.run_id, "b", "done")
    assert qstore.renew_lease(job.run_id, "a", 60)
    [renewed] = qstore.jobs()
    assert renewed.lease_until is not None
    assert leased.lease_until is not None
    assert renewed.lease_until > leased.lease_until
    assert qstore.release_job(job.run_id, "a", "queued")
    [back] = qstore.jobs()
    assert (back.status, back.owner, back.lease_until, back.attempts) == ("queued", None, None, 1)
    assert not qstore.renew_lease(job.run_id, "a", 30)  # released: no longer a's
    again = qstore.lease_job("b", 30)
    assert again is not None
    assert (again.owner, again.attempts) == ("b", 2)
    assert qstore.release_job(job.run_id, "b", "done")
    [done] = qstore.jobs("done")
    assert (done.status, done.owner, done.lease_until) == ("done", "b", None)
    assert qstore.lease_job("a", 30) is None  # a done job is never leased again
    assert not qstore.release_job(job.run_id, "b", "queued")


def test_an_expired_lease_is_taken_over_and_the_stale_owner_refused(qstore: Store) -> None:
    job = submit(qstore, "agent_loop", "steps 1")
    assert qstore.lease_job("stale", 0.05) is not None
    assert qstore.lease_job("other", 30) is None  # still held
    time.sleep(0.15)
    assert qstore.renew_lease(job.run_id, "stale", 0.05)  # expired, but nobody took it yet
    time.sleep(0.15)
    taken = qstore.lease_job("other", 30)
    assert taken is not None
    assert (taken.owner, taken.attempts) == ("other", 2)
    assert not qstore.renew_lease(job.run_id, "stale", 30)
    assert not qstore.release_job(job.run_id, "stale", "queued")
    assert qstore.renew_lease(job.run_id, "other", 30)
    assert qstore.release_job(job.run_id, "other", "done")


def test_concurrent_leasers_never_share_a_job(backend: str) -> None:
    """8 threads, each with its own store, lease 60 jobs as fast as they can."""
    setup = open_store(backend)
    ids = {submit(setup, "agent_loop", f"steps {i}").run_id for i in range(60)}
    setup.close()
    taken: list[list[str]] = [[] for _ in range(8)]

    def lease_all(mine: list[str], owner: str) -> None:
        store = open_store(backend)
        try:
            while (job := store.lease_job(owner, 30)) is not None:
                mine.append(job.run_id)
        finally:
            store.close()

    threads = [threading.Thread(target=lease_all, args=(taken[i], f"o{i}")) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    every = [run_id for mine in taken for run_id in mine]
    assert sorted(every) == sorted(ids)  # each exactly once


# --- journal checks -------------------------------------------------------------------------


def _pid_of(event: Event) -> int | None:
    """The process that made this event's model reply or ran its tool (queue_fixture)."""
    facts = event.facts
    if facts is None:
        return None
    if facts.tool is not None and isinstance(facts.tool.observation, dict):
        return int(facts.tool.observation["pid"])
    proposal = event.snapshot.proposal
    if facts.action == "model" and isinstance(proposal, ToolCall):
        return int(proposal.args["by"])
    return None


def writers(events: list[Event]) -> list[int]:
    """The processes that drove the run, in order, one per stretch between `resumed` events;
    fails if an event in a stretch came from any other process than its owner's."""
    owners: list[int] = []
    owner: int | None = None
    for e in events:
        if e.kind == "resumed":
            assert e.note is not None
            owner = int(e.note.split()[3])  # "resumed by pid N on HOST"
            owners.append(owner)
            continue
        pid = _pid_of(e)
        if pid is None:
            continue
        if owner is None:
            owner = pid
            owners.append(owner)
        assert pid == owner, f"run {e.run_id} seq {e.seq}: written by {pid}, owned by {owner}"
    return owners


def assert_journal_sound(location: str, records: Path, *, replay: bool = False) -> list[Job]:
    """Every job done; every run halted once, as its task says, gap-free, chained, with
    its record file; never two writers at once."""
    store = open_store(location)
    try:
        jobs = store.jobs()
        assert [j for j in jobs if j.status != "done"] == []
        for job in jobs:
            row = store.get_run(job.run_id)
            events = store.events(job.run_id)
            assert row.status == "halted", job
            assert row.halt_reason is not None
            assert row.halt_reason.value in expected(job.task), (job.task, row.record)
            assert [e.seq for e in events] == list(range(len(events)))
            assert [e.halt for e in events if e.halt is not None] == [row.halt_reason]
            assert verify_run(store, job.run_id).ok
            assert read_record(records / f"{job.run_id}.json") == row.record
            writers(events)
            if replay:
                assert replay_events(row, events).ok, job.run_id
        return jobs
    finally:
        store.close()


# --- a worker in this process ---------------------------------------------------------------


def worker(location: str, records: Path, **options: Any) -> QueueWorker:
    options.setdefault("poll_s", 0.02)
    return QueueWorker(
        location,
        model=lambda: load_model(MODEL),
        tools=lambda: load_tools(TOOLS),
        allow=ALLOW,
        records=records,
        **options,
    )


def in_background(w: QueueWorker) -> tuple[threading.Thread, list[int]]:
    code: list[int] = []
    thread = threading.Thread(target=lambda: code.append(w.serve()), daemon=True)
    thread.start()
    return thread, code


def wait_for(what: str, check: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def events_of(location: str, run_id: str) -> list[Event]:
    store = open_store(location)
    try:
        return store.events(run_id)
    except Exception:
        return []
    finally:
        store.close()


TASKS = [("steps 3", None), ("handoff", None), ("loop", {"max_steps": 3}), ("charge 2", None)]


def test_a_worker_drives_every_job_to_its_expected_halt(qstore: Store, backend: str,
                                                        tmp_path: Path) -> None:  # fmt: skip
    for task, budgets in TASKS * 3:
        submit(qstore, "agent_loop", task, budgets)
    lines: list[str] = []
    w = worker(backend, tmp_path / "records", concurrency=3, idle_exit=True, log=lines.append)
    assert w.serve() == 0
    jobs = assert_journal_sound(backend, tmp_path / "records", replay=True)
    assert {j.attempts for j in jobs} == {1}
    assert w.outcomes == {"halted": 12}
    assert sum(" leased (attempt 1)" in line for line in lines) == 12
    assert any(line.endswith("halted completed (3 steps)") for line in lines), lines
    assert not [p for p in (tmp_path / "records").iterdir() if p.name.startswith(".")]


def test_max_jobs_stops_after_that_many(qstore: Store, backend: str, tmp_path: Path) -> None:
    for _ in range(5):
        submit(qstore, "agent_loop", "steps 1")
    assert worker(backend, tmp_path / "records", concurrency=2, max_jobs=3).serve() == 0
    assert [j.status for j in qstore.jobs()].count("done") == 3


class _FlakyStore:
    """A real store whose first `lease_failures` leases fail as a journal that is down does,
    and whose every lease renewal is counted."""

    def __init__(self, inner: Store, lease_failures: int, fail_append: int = 0) -> None:
        self.inner, self.lease_failures, self.renewals = inner, lease_failures, 0
        self.fail_append, self.appends = fail_append, 0
        self.failing_renewals: range = range(0)  # which renewals fail (1 = the first)

    def append(self, event: Event) -> str:
        self.appends += 1
        if self.appends == self.fail_append:
            raise JournalError("disk I/O error", path="flaky", run_id=event.run_id)
        return self.inner.append(event)

    def lease_job(self, owner: str, lease_s: float) -> Job | None:
        if self.lease_failures > 0:
            self.lease_failures -= 1
            raise JournalError("server closed the connection unexpectedly", path="flaky")
        return self.inner.lease_job(owner, lease_s)

    def renew_lease(self, run_id: str, owner: str, lease_s: float) -> bool:
        self.renewals += 1
        if self.renewals in self.failing_renewals:
            raise JournalError("server closed the connection unexpectedly", path="flaky")
        return self.inner.renew_lease(run_id, owner, lease_s)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_backoff_doubles_from_the_poll_interval_up_to_a_cap() -> None:
    assert [backoff_s(n, 0.2) for n in range(6)] == [0.2, 0.4, 0.8, 1.6, 3.2, MAX_BACKOFF_S]
    assert backoff_s(10_000, 0.2) == MAX_BACKOFF_S


def test_a_journal_that_fails_for_a_while_costs_waits_not_the_worker(
    qstore: Store, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    submit(qstore, "agent_loop", "steps 3")
    monkeypatch.setenv(STEP_MS_ENV, "150")
    stores: list[_FlakyStore] = []
    heartbeat_opens: list[str] = []
    real_open = queue_worker.open_store

    def flaky_open(location: str) -> Any:
        if threading.current_thread().name == "heartbeat":
            heartbeat_opens.append(location)
            if len(heartbeat_opens) == 1:  # the heartbeat's first try finds the server down
                raise JournalError("cannot connect to the server", path=location)
        # The worker thread opens first; its first three leases fail.
        stores.append(_FlakyStore(real_open(location), 0 if stores else 3))
        return stores[-1]

    monkeypatch.setattr(queue_worker, "open_store", flaky_open)
    lines: list[str] = []
    w = worker(backend, tmp_path / "records", idle_exit=True, heartbeat_s=0.1, log=lines.append)
    assert w.serve() == 0
    waits = [line.rsplit("trying again in ", 1)[1] for line in lines if "leasing failed" in line]
    assert waits == ["0.04 s", "0.08 s", "0.16 s"]  # poll_s 0.02, doubled each time
    assert any("heartbeat: " in line and "trying again" in line for line in lines), lines
    assert len(heartbeat_opens) == 2
    assert stores[1].renewals >= 2  # the heartbeat went on after its failure
    assert w.outcomes == {"halted": 1}
    assert_journal_sound(backend, tmp_path / "records")


@pytest.mark.parametrize(
    ("failing", "outcome"),
    [(range(1, 4), "halted"), (range(2, 10**6), "abandoned"), (range(1, 10**6), "abandoned")],
    ids=["a-blip", "down-before-the-call", "down-before-the-start"],
)
def test_a_lease_the_journal_cannot_confirm_is_asked_again_then_nothing_is_done(
    qstore: Store, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    failing: range, outcome: str,
) -> None:  # fmt: skip
    job = submit(qstore, "agent_loop", "charge 1")
    real_open = queue_worker.open_store
    stores: list[_FlakyStore] = []

    def flaky_open(location: str) -> Any:
        stores.append(_FlakyStore(real_open(location), 0))
        stores[-1].failing_renewals = failing
        return stores[-1]

    monkeypatch.setattr(queue_worker, "open_store", flaky_open)
    lines: list[str] = []
    w = worker(backend, tmp_path / "records", lease_s=3.0, heartbeat_s=60.0, max_jobs=1,
               log=lines.append)  # fmt: skip
    assert w.serve() == 0
    assert w.outcomes == {outcome: 1}
    if outcome == "halted":  # the blip passed within a third of the lease
        assert stores[0].renewals == len(failing) + 2  # before the start and before the call
        assert qstore.get_run(job.run_id).halt_reason is not None
        return
    assert any("its lease could not be confirmed" in x for x in lines), lines
    assert 3 <= stores[0].renewals - failing.start + 1 <= 6  # 0.05+0.1+0.2+0.4 s < 1 s
    if failing.start == 1:  # never confirmed before the start: the run never started
        with pytest.raises(RunNotFound):
            qstore.get_run(job.run_id)
    else:  # confirmed for the start, never before the charge: not made, nothing written
        assert [e.dest for e in qstore.events(job.run_id)] == ["drafting", "tool_pending"]


def test_a_failed_journal_write_leaves_the_run_to_its_lease_and_it_is_continued(
    qstore: Store, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = submit(qstore, "agent_loop", "steps 3")
    real_open = queue_worker.open_store
    monkeypatch.setattr(
        queue_worker, "open_store", lambda location: _FlakyStore(real_open(location), 0, 3)
    )
    lines: list[str] = []
    records = tmp_path / "records"
    assert worker(backend, records, lease_s=0.3, max_jobs=1, log=lines.append).serve() == 0
    assert any(f"run {job.run_id} stopped: " in x and "disk I/O error" in x for x in lines)
    failed = read_record(records / f"{job.run_id}.attempt1.failed.json")
    assert failed.halt_reason.value == "journal_failed"
    [left] = qstore.jobs()
    assert (left.status, left.attempts) == ("leased", 1)  # not released: its lease runs out
    committed = len(qstore.events(job.run_id))
    assert committed == 3  # started and two appends; the third append failed

    monkeypatch.setattr(queue_worker, "open_store", real_open)
    heir = worker(backend, records, idle_exit=True, log=lines.append)
    assert heir.serve() == 0
    events = qstore.events(job.run_id)
    assert [e.kind for e in events][committed] == "resumed"
    assert_journal_sound(backend, records)
    assert [j.attempts for j in qstore.jobs()] == [2]


def test_a_run_the_queue_holds_is_not_resumed_by_hand(
    qstore: Store, backend: str, tmp_path: Path
) -> None:
    job = submit(qstore, "agent_loop", "steps 2")
    assert qstore.job(job.run_id) == job
    assert qstore.job("never-queued") is None
    assert qstore.lease_job("w1@host:1", 30) is not None

    def pause_at_start(event: Event) -> None:  # as a draining worker does
        if event.kind == "started":
            qstore.add_control(Control(id=0, run_id=event.run_id, kind="pause", payload={},
                                       who=f"{WORKER_WHO} w1", why="drain", at="now"))  # fmt: skip

    common: dict[str, Any] = {"model": load_model(MODEL), "tools": load_tools(TOOLS),
                              "store": qstore, "record_path": tmp_path / "r.json"}  # fmt: skip
    with pytest.raises(RunPaused):
        run(queued_spec(job), task=job.task, run_id=job.run_id, handle_signals=False,
            on_transition=pause_at_start, allow=ALLOW, **common)  # fmt: skip
    with pytest.raises(InvalidInputError, match="leased by w1@host:1; to take it over by hand"):
        resume_run(job.run_id, **common)
    assert qstore.release_job(job.run_id, "w1@host:1", "queued")
    with pytest.raises(InvalidInputError, match="queued: a queue worker continues it"):
        resume_run(job.run_id, **common)
    result = invoke("resume", job.run_id, "--model", MODEL, "--tools", TOOLS, "--db", backend)
    assert result.exit_code == 2
    assert "is in the run queue, queued" in result.output
    paused = invoke("pause", job.run_id, "--why", "x", "--db", backend)
    assert paused.exit_code == 2
    assert f"(it waits in the run queue: `fsm-agent dequeue {job.run_id}` takes it out)" in (
        paused.output
    )
    # Once the queue is done with it (a person's pause does that), a person may resume it.
    assert qstore.lease_job("w2", 30) is not None
    assert qstore.release_job(job.run_id, "w2", "done")
    assert resume_run(job.run_id, **common).halt_reason.value == "completed"


class _Crash(RunAbandoned):
    """Stops a run between two commits, as a killed process would: the worker writes
    nothing more (any other exception from user code, BaseException too, ends the run
    `internal_error`)."""


def _crash_after(count: int) -> Callable[[Event], None]:
    def on_transition(event: Event) -> None:
        if event.seq + 1 >= count:
            raise _Crash(event.run_id, "crashed (simulated)")

    return on_transition


def test_a_run_left_mid_way_is_resumed_and_one_already_halted_only_released(
    qstore: Store, backend: str, tmp_path: Path
) -> None:
    cut = submit(qstore, "agent_loop", "steps 3")
    halted = submit(qstore, "agent_loop", "handoff")
    # A worker leased both, got one run half-way and the other to its halt, and died.
    assert [qstore.lease_job("dead", 0.05) for _ in range(2)] == [
        attrs.evolve(job, status="leased", owner="dead", lease_until=ANY, attempts=1)
        for job in (cut, halted)
    ]
    with pytest.raises(_Crash):
        run("agent_loop", task=cut.task, model=load_model(MODEL), tools=load_tools(TOOLS),
            allow=ALLOW, store=qstore, run_id=cut.run_id, record_path=tmp_path / "cut.json",
            handle_signals=False, on_transition=_crash_after(4))  # fmt: skip
    finished = run("agent_loop", task=halted.task, model=load_model(MODEL),
                   tools=load_tools(TOOLS), allow=ALLOW, store=qstore, run_id=halted.run_id,
                   record_path=tmp_path / "halted.json")  # fmt: skip
    time.sleep(0.1)  # the dead worker's leases expire
    lines: list[str] = []
    assert worker(backend, tmp_path / "records", idle_exit=True, log=lines.append).serve() == 0
    assert_journal_sound(backend, tmp_path / "records", replay=True)
    assert [e.kind for e in events_of(backend, cut.run_id)].count("resumed") == 1
    assert [e.kind for e in events_of(backend, halted.run_id)].count("resumed") == 0
    assert read_record(tmp_path / "records" / f"{halted.run_id}.json") == finished
    assert any(f"run {halted.run_id} had already halted handoff_requested" in x for x in lines)
    assert {j.attempts for j in qstore.jobs()} == {2}


def _stolen_at_the_gate(
    qstore: Store, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task: str,
    **options: Any,
) -> tuple[Path, Job, list[str], QueueWorker, threading.Thread, list[int]]:  # fmt: skip
    """A worker with a 0.2 s lease starts `task` (a `gated` one: its model call waits for
    the gate file); meanwhile its lease expires and a thief leases the job."""
    gate = tmp_path / "gate"
    monkeypatch.setenv(GATE_ENV, str(gate))
    job = submit(qstore, "agent_loop", task)
    lines: list[str] = []
    w = worker(backend, tmp_path / "records", lease_s=0.2, log=lines.append, **options)
    thread, code = in_background(w)
    wait_for("the run to start", lambda: events_of(backend, job.run_id))
    time.sleep(0.3)
    assert qstore.lease_job("thief", 30) is not None
    return gate, job, lines, w, thread, code


def test_a_lost_lease_stops_the_run_before_its_next_call_and_the_new_owner_finishes_it(
    qstore: Store, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The heartbeat comes too late to keep a 0.2 s lease: a thief takes the job meanwhile.
    gate, job, lines, _, thread, code = _stolen_at_the_gate(
        qstore, backend, tmp_path, monkeypatch, "gated steps 2", heartbeat_s=1.0, idle_exit=True
    )
    wait_for("the lease loss", lambda: any("lost its lease" in x for x in lines))
    gate.touch()  # the model replies with a tool call: the worker stops before making it
    wait_for("the abandon", lambda: any(f"run {job.run_id} abandoned" in x for x in lines))
    events = events_of(backend, job.run_id)
    assert [e.dest for e in events] == ["drafting", "tool_pending"]
    assert qstore.get_run(job.run_id).status == "running"  # as last committed: nothing more
    assert qstore.release_job(job.run_id, "thief", "queued")  # the thief gives it back
    thread.join(WAIT_S)
    assert code == [0]
    assert_journal_sound(backend, tmp_path / "records", replay=True)
    assert [j.attempts for j in qstore.jobs()] == [3]


def test_a_worker_that_lost_its_lease_never_makes_the_next_call(
    qstore: Store, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No heartbeat in time to notice: the thief takes the job while the model call waits at
    # the gate; the reply then proposes a charge.
    gate, job, lines, w, thread, code = _stolen_at_the_gate(
        qstore, backend, tmp_path, monkeypatch, "gated charge 1", heartbeat_s=30.0, max_jobs=1
    )
    gate.touch()
    thread.join(WAIT_S)
    assert code == [0]
    assert any(f"run {job.run_id} abandoned by this process: its lease was lost" in x
               for x in lines), lines  # fmt: skip
    assert w.outcomes == {"abandoned": 1}
    events = events_of(backend, job.run_id)
    assert [e.dest for e in events] == ["drafting", "tool_pending"]  # the charge: never made
    assert all(e.facts is None or e.facts.tool is None for e in events)
    assert qstore.get_run(job.run_id).record is None  # nothing written for it, no record
    # The thief gives the job back; its next owner cannot know the charge was never made
    # (the run stopped in tool_pending), so it does not charge blind: a person checks.
    assert qstore.release_job(job.run_id, "thief", "queued")
    assert worker(backend, tmp_path / "records", idle_exit=True).serve() == 0
    row = qstore.get_run(job.run_id)
    assert row.halt_reason is not None
    assert row.halt_reason.value == "side_effect_unknown"
    assert verify_run(qstore, job.run_id).ok


def test_a_worker_that_stalled_between_lease_and_start_does_not_start_the_run(
    qstore: Store, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = submit(qstore, "agent_loop", "steps 1")
    leased, dequeued = threading.Event(), threading.Event()
    journaled = queue_job.JobDriving._journaled

    def stalled(store: Store, run_id: str) -> Any:
        leased.set()
        dequeued.wait(WAIT_S)  # the worker stalls here, its lease running out
        return journaled(store, run_id)

    monkeypatch.setattr(queue_job.JobDriving, "_journaled", staticmethod(stalled))
    lines: list[str] = []
    w = worker(backend, tmp_path / "records", lease_s=0.2, heartbeat_s=60.0, max_jobs=1,
               log=lines.append)  # fmt: skip
    thread, code = in_background(w)
    assert leased.wait(WAIT_S)
    time.sleep(0.3)  # the lease expires; a person takes the job out meanwhile
    out = invoke("dequeue", job.run_id, "--why", "not today", "--db", backend)
    assert "cancelled: its run never started" in out.output, out.output
    dequeued.set()
    thread.join(WAIT_S)
    assert code == [0]
    assert w.outcomes == {"abandoned": 1}
    assert any("its lease was lost before the run started" in x for x in lines), lines
    with pytest.raises(RunNotFound):
        qstore.get_run(job.run_id)  # never started


def test_a_persons_pause_takes_the_job_out_of_the_queue(
    qstore: Store, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = tmp_path / "gate"
    monkeypatch.setenv(GATE_ENV, str(gate))
    job = submit(qstore, "agent_loop", "gated steps 2")
    lines: list[str] = []
    thread, code = in_background(worker(backend, tmp_path / "r", idle_exit=True,
                                        log=lines.append))  # fmt: skip
    wait_for("the run to start", lambda: events_of(backend, job.run_id))
    time.sleep(0.2)  # the run waits in its first model call
    qstore.add_control(Control(id=0, run_id=job.run_id, kind="pause", payload={}, who="alice",
                               why="look first", at="2026-01-01T00:00:00Z"))  # fmt: skip
    gate.touch()
    thread.join(WAIT_S)
    assert code == [0]
    [done] = qstore.jobs()
    assert done.status == "done"
    assert qstore.get_run(job.run_id).status == "paused"
    assert any("paused by a person" in x for x in lines), lines
    record = resume_run(job.run_id, model=load_model(MODEL), tools=load_tools(TOOLS),
                        store=qstore, record_path=tmp_path / "resumed.json")  # fmt: skip
    assert record.halt_reason.value == "completed"


def test_stop_pauses_the_runs_in_flight_and_gives_them_back(
    qstore: Store, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = tmp_path / "gate"
    monkeypatch.setenv(GATE_ENV, str(gate))
    ids = [submit(qstore, "agent_loop", "gated steps 2").run_id for _ in range(3)]
    w = worker(backend, tmp_path / "records", concurrency=2, drain_s=30)
    thread, code = in_background(w)
    wait_for("two runs", lambda: all(events_of(backend, i) for i in ids[:2]))
    w.stop()
    time.sleep(0.1)
    gate.touch()
    thread.join(WAIT_S)
    assert code == [0]
    assert w.outcomes == {"paused": 2}
    jobs = {j.run_id: j for j in qstore.jobs()}
    assert [jobs[i].status for i in ids] == ["queued"] * 3
    assert [jobs[i].attempts for i in ids] == [1, 1, 0]
    assert [qstore.get_run(i).status for i in ids[:2]] == ["paused", "paused"]
    assert worker(backend, tmp_path / "records", idle_exit=True).serve() == 0
    assert_journal_sound(backend, tmp_path / "records", replay=True)


# --- the command line -----------------------------------------------------------------------


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_cli_submit_and_queue(backend: str) -> None:
    result = invoke("submit", "agent_loop", "--task", "steps 2", "--max-steps", "4",
                    "--db", backend)  # fmt: skip
    assert result.exit_code == 0, result.output
    run_id = result.output.strip()
    assert len(run_id) == 12
    listed = invoke("queue", "--db", backend)
    assert listed.exit_code == 0
    assert run_id in listed.output
    assert "queued" in listed.output
    as_json = json.loads(invoke("queue", "--db", backend, "--json", "--status", "queued").output)
    assert [(j["run_id"], j["budgets"]["max_steps"]) for j in as_json] == [(run_id, 4)]
    assert "no leased jobs" in invoke("queue", "--db", backend, "--status", "leased").output
    assert "queue: 1 queued, 0 leased, 0 done, 0 cancelled\n" in listed.output
    for _ in range(2):
        invoke("submit", "agent_loop", "--task", "steps 1", "--db", backend)
    capped = invoke("queue", "--db", backend, "--limit", "2").output
    assert capped.count(" queued ") == 2
    assert capped.endswith(
        "queue: 3 queued, 0 leased, 0 done, 0 cancelled (1 more not shown: --limit)\n"
    )
    bad = invoke("submit", "agent_loop", "--task", "x", "--max-steps", "0", "--db", backend)
    assert bad.exit_code == 2
    assert "Error: budget max_steps" in bad.output


def test_dequeue_cancels_a_job_that_never_started_and_holds_one_that_did(
    qstore: Store, backend: str, tmp_path: Path
) -> None:
    started = submit(qstore, "agent_loop", "steps 2")
    never = submit(qstore, "agent_loop", "steps 1")
    running = submit(qstore, "agent_loop", "steps 3")
    # `started`: leased by a worker that journaled its first event, then died.
    assert qstore.lease_job("dead", 0.05) == attrs.evolve(
        started, status="leased", owner="dead", lease_until=ANY, attempts=1
    )
    with pytest.raises(_Crash):
        run("agent_loop", task=started.task, model=load_model(MODEL), tools=load_tools(TOOLS),
            allow=ALLOW, store=qstore, run_id=started.run_id, record_path=tmp_path / "x.json",
            handle_signals=False, on_transition=_crash_after(1))  # fmt: skip
    qstore.mark_run(started.run_id, "running", None, None)  # its process is gone
    # `running`: leased by a live worker; `never`: queued, never started.
    taken = [qstore.lease_job("live", 30) for _ in range(2)]
    assert [j.run_id if j else None for j in taken] == [never.run_id, running.run_id]
    assert qstore.release_job(never.run_id, "live", "queued")
    time.sleep(0.1)  # the dead worker's lease on `started` expires

    out = invoke("dequeue", never.run_id, "--why", "wrong task", "--who", "ops", "--db", backend)
    assert out.exit_code == 0, out.output
    assert f"job {never.run_id} cancelled: its run never started" in out.output
    out = invoke("dequeue", started.run_id, "--why", "look first", "--db", backend)
    assert out.exit_code == 0, out.output
    assert f"its run waits, as last journaled, for `fsm-agent resume {started.run_id}" in out.output
    refused = invoke("dequeue", running.run_id, "--why", "x", "--db", backend)
    assert refused.exit_code == 2
    assert "is leased by live, which is driving it: pause the run" in refused.output
    again = invoke("dequeue", never.run_id, "--why", "x", "--db", backend)
    assert again.exit_code == 2
    assert "already out of the queue (cancelled)" in again.output
    missing = invoke("dequeue", "nope", "--why", "x", "--db", backend)
    assert (missing.exit_code, "no job for run 'nope'" in missing.output) == (2, True)
    assert invoke("dequeue", running.run_id, "--why", " ", "--db", backend).exit_code == 2

    cancelled = qstore.job(never.run_id)
    assert cancelled is not None
    assert cancelled.status == "cancelled"
    assert cancelled.note is not None
    assert cancelled.note.startswith("dequeued by ops at ")
    assert cancelled.note.endswith(": wrong task")
    held = qstore.job(started.run_id)
    assert held is not None
    assert (held.status, held.owner, held.lease_until) == ("done", None, None)
    assert qstore.job_counts() == {"cancelled": 1, "done": 1, "leased": 1}
    listed = invoke("queue", "--db", backend, "--status", "cancelled").output
    assert never.run_id in listed
    assert listed.endswith("queue: 0 queued, 1 leased, 1 done, 1 cancelled\n")
    # A worker never takes either; the held run is a person's to resume.
    assert qstore.lease_job("w", 30) is None
    record = resume_run(started.run_id, model=load_model(MODEL), tools=load_tools(TOOLS),
                        store=qstore, record_path=tmp_path / "held.json")  # fmt: skip
    assert record.halt_reason.value == "completed"


def test_an_older_journal_gains_the_note_column_and_keeps_its_jobs(backend: str) -> None:
    store = open_store(backend)
    job = submit(store, "agent_loop", "steps 1")
    store.close()
    # Make it the journal an fsm-agent before the note column wrote.
    raw = _raw_sql(backend)
    raw("ALTER TABLE queue DROP COLUMN note")
    if is_dsn(backend):
        raw("DELETE FROM fsm_agent_migrations WHERE name = 'm003_queue_note'")
    else:
        raw("DELETE FROM _sqlite_migrations WHERE name = 'm005_queue_note'")
    store = open_store(backend)  # migrates
    try:
        assert store.job(job.run_id) == job
        assert store.dequeue_job(job.run_id, "by test") == "cancelled"
    finally:
        store.close()


def _raw_sql(location: str) -> Callable[[str], None]:
    def execute(statement: str) -> None:
        if is_dsn(location):
            import psycopg

            with psycopg.connect(location, autocommit=True) as pg:
                pg.execute(statement.encode())
            return
        conn = sqlite3.connect(location, isolation_level=None)
        try:
            conn.execute(statement)
        finally:
            conn.close()

    return execute


def test_cli_worker_refuses_bad_input_before_leasing(backend: str, tmp_path: Path) -> None:
    invoke("submit", "agent_loop", "--task", "steps 1", "--db", backend)
    base = ["worker", "--db", backend, "--records", str(tmp_path / "r"), "--idle-exit"]
    no_tools = invoke(*base, "--tools", "no.such.module", "--model", MODEL)
    assert no_tools.exit_code == 2
    assert "no.such.module" in no_tools.output
    no_model = invoke(
        *base,
        "--tools",
        TOOLS,
        "--allow",
        "step,charge",
        "--model",
        "python:tests.queue_fixture:nope",
    )
    assert no_model.exit_code == 2
    assert "nope" in no_model.output
    assert "queued" in invoke("queue", "--db", backend).output


# --- worker processes -----------------------------------------------------------------------


def start_worker(location: str, tmp_path: Path, name: str, *args: str,
                 env: dict[str, str] | None = None) -> subprocess.Popen[str]:  # fmt: skip
    """`python -m fsm_agent worker …` with the queue fixture; stderr to tmp_path/NAME.log."""
    command = [sys.executable, "-m", "fsm_agent", "worker", "--db", location, "--tools", TOOLS,
               "--allow", ",".join(ALLOW), "--model", MODEL,
               "--records", str(tmp_path / "records"), *args]  # fmt: skip
    log = (tmp_path / f"{name}.log").open("w", encoding="utf-8")
    return subprocess.Popen(command, cwd=ROOT, env={**os.environ, **(env or {})},
                            stdout=log, stderr=subprocess.STDOUT, text=True)  # fmt: skip


def finish(process: subprocess.Popen[str], timeout: float = WAIT_S) -> int:
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise


def _many_workers(location: str, tmp_path: Path, workers: int, runs: int) -> float:
    store = open_store(location)
    kinds = [("steps 2", None), ("handoff", None), ("loop", {"max_steps": 2}), ("charge 1", None)]
    for i in range(runs):
        task, budgets = kinds[i % len(kinds)]
        submit(store, "agent_loop", task, budgets)
    store.close()
    started = time.monotonic()
    processes = [start_worker(location, tmp_path, f"w{n}", "--concurrency", "2", "--idle-exit")
                 for n in range(workers)]  # fmt: skip
    codes = [finish(p, 300) for p in processes]
    seconds = time.monotonic() - started
    logs = [(tmp_path / f"w{n}.log").read_text(encoding="utf-8") for n in range(workers)]
    assert codes == [0] * workers, logs
    jobs = assert_journal_sound(location, tmp_path / "records")
    assert len(jobs) == runs
    assert {j.attempts for j in jobs} == {1}
    assert sum(log.count(" leased (attempt 1)") for log in logs) == runs
    return seconds


def test_worker_processes_run_every_job_exactly_once(backend: str, tmp_path: Path) -> None:
    _many_workers(backend, tmp_path, workers=2, runs=20)


@pytest.mark.slow
def test_four_worker_processes_run_two_hundred_jobs(backend: str, tmp_path: Path) -> None:
    seconds = _many_workers(backend, tmp_path, workers=4, runs=200)
    print(f"\nqueue: 4 worker processes x 2 threads, 200 runs in {seconds:.1f} s")


def _epoch(wall_time: str) -> float:
    return datetime.datetime.fromisoformat(wall_time).timestamp()


def _held_by(location: str, pid: int) -> list[Job]:
    store = open_store(location)
    try:
        return [j for j in store.jobs("leased") if j.owner and j.owner.endswith(f":{pid}")]
    finally:
        store.close()


def _in_flight(location: str, pid: int, events: int) -> list[Job]:
    """The jobs `pid` holds, once each of its runs has journaled at least `events` events."""
    held = _held_by(location, pid)
    enough = len(held) == 2 and all(len(events_of(location, j.run_id)) >= events for j in held)
    return held if enough else []


def test_a_worker_killed_mid_run_is_taken_over_after_its_lease(
    backend: str, tmp_path: Path
) -> None:
    store = open_store(backend)
    for i in range(8):
        submit(store, "agent_loop", "charge 3" if i % 4 == 3 else "steps 3")
    env = {STEP_MS_ENV: "150"}
    doomed = start_worker(backend, tmp_path, "doomed", "--concurrency", "2", "--lease-s", "1",
                          env=env)  # fmt: skip
    victims = wait_for("two runs in flight", lambda: _in_flight(backend, doomed.pid, 3))
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(WAIT_S)
    killed_at = time.time()
    leases = {j.run_id: j.lease_until for j in store.jobs("leased")}
    heir = start_worker(backend, tmp_path, "heir", "--concurrency", "2", "--lease-s", "1",
                        "--idle-exit", env=env)  # fmt: skip
    assert finish(heir) == 0, (tmp_path / "heir.log").read_text(encoding="utf-8")
    jobs = {j.run_id: j for j in assert_journal_sound(backend, tmp_path / "records")}
    for victim in victims:
        events = store.events(victim.run_id)
        [resumed] = [e for e in events if e.kind == "resumed"]
        assert writers(events) == [doomed.pid, heir.pid]
        assert _epoch(resumed.wall_time) >= (leases[victim.run_id] or killed_at) - 0.01
        assert jobs[victim.run_id].attempts == 2
    store.close()


def test_sigterm_pauses_the_runs_in_flight_and_releases_them(backend: str, tmp_path: Path) -> None:
    store = open_store(backend)
    ids = [submit(store, "agent_loop", "steps 4").run_id for _ in range(3)]
    env = {STEP_MS_ENV: "200"}
    first = start_worker(backend, tmp_path, "first", "--concurrency", "2", "--drain-s", "8",
                         env=env)  # fmt: skip
    held = wait_for("two runs in flight", lambda: _in_flight(backend, first.pid, 2))
    asked = time.monotonic()
    first.send_signal(signal.SIGTERM)
    assert finish(first) == 0, (tmp_path / "first.log").read_text(encoding="utf-8")
    assert time.monotonic() - asked < 8
    log = (tmp_path / "first.log").read_text(encoding="utf-8")
    assert "SIGTERM: no more leases; pausing 2 run(s) in flight" in log
    for job in held:
        assert store.get_run(job.run_id).status == "paused"
        assert f"run {job.run_id} paused at step" in log
    assert [j.status for j in store.jobs()] == ["queued"] * 3
    second = start_worker(backend, tmp_path, "second", "--concurrency", "2", "--idle-exit",
                          env=env)  # fmt: skip
    assert finish(second) == 0
    assert_journal_sound(backend, tmp_path / "records")
    for job in held:
        assert writers(store.events(job.run_id)) == [first.pid, second.pid]
    assert {j.run_id for j in held} <= set(ids)
    store.close()


@pytest.mark.slow
def test_sigterm_past_the_drain_deadline_leaves_the_run_to_its_lease(
    backend: str, tmp_path: Path
) -> None:
    store = open_store(backend)
    job = submit(store, "agent_loop", "steps 2")
    slow = start_worker(backend, tmp_path, "slow", "--drain-s", "0.3", "--lease-s", "1",
                        env={STEP_MS_ENV: "2500"})  # fmt: skip
    wait_for("the run in its tool call", lambda: len(events_of(backend, job.run_id)) >= 2)
    asked = time.monotonic()
    slow.send_signal(signal.SIGTERM)
    assert finish(slow) == 128 + signal.SIGTERM
    assert time.monotonic() - asked < 3
    assert "drain deadline passed with 1 run(s) in flight" in (tmp_path / "slow.log").read_text(
        encoding="utf-8"
    )
    [left] = store.jobs()
    assert left.status == "leased"  # not released: its lease runs out instead
    heir = start_worker(backend, tmp_path, "heir", "--idle-exit", "--lease-s", "1")
    assert finish(heir) == 0
    assert_journal_sound(backend, tmp_path / "records")
    assert writers(store.events(job.run_id)) == [slow.pid, heir.pid]
    store.close()


def test_the_fixture_names_every_halt() -> None:
    assert queue_fixture.expected("charge 2") == {"completed", "side_effect_unknown"}
