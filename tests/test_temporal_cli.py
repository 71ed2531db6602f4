"""`--temporal` through the real CLI, in real processes, on a real Temporal development
server: a worker process serves runs that `submit` starts; a person's decisions and an
operator's pause reach them, journaled as the CLI journals them, and the run goes on as a
workflow; what the journal then holds verifies and replays."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.temporal.service import DevServer

pytestmark = pytest.mark.temporal
ROOT = Path(__file__).parent.parent
SHOP = str(ROOT / "tests" / "approval_fixtures" / "shop.yaml")
SHOP_WORKER = ("--tools", "tests.fixture_approvals",
               "--model", "python:tests.fixture_approvals:shop_model")  # fmt: skip
LAB_WORKER = ("--tools", "fsm_agent.examples.halt_lab.tools", "--allow", "lookup,slow_lookup",
              "--model", f"scripted:{ROOT / 'examples' / 'halt_lab' / 'slow.json'}")  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    with DevServer(log=tmp_path_factory.mktemp("temporal") / "server.log") as dev:
        yield dev


def env(tmp: Path) -> dict[str, str]:
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths),
                FSM_TEST_REFUNDS=str(tmp / "refunds.txt"))  # fmt: skip


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fsm_agent", *args], capture_output=True, text=True,
        cwd=tmp, env=env(tmp), check=False, timeout=120,
    )  # fmt: skip


@pytest.fixture
def worker(server: DevServer, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A `fsm-agent worker --temporal` process for the test (its options by `request.param`)."""
    log = (tmp_path / "worker.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fsm_agent", "worker", "--temporal", server.address,
         "--db", str(tmp_path / "j.db"), *request.param],
        cwd=tmp_path, env=env(tmp_path), stdout=log, stderr=log,
    )  # fmt: skip
    try:
        yield tmp_path
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def status(tmp: Path, run_id: str, want: str, timeout_s: float = 60.0) -> str:
    """Wait until `fsm-agent runs` shows the run's halt (or `paused`) as `want`."""
    deadline = time.monotonic() + timeout_s
    seen = ""
    while time.monotonic() < deadline:
        if (tmp / "j.db").exists():
            store = SqliteStore(tmp / "j.db")
            try:
                rows = [r for r in store.list_runs() if r.run_id == run_id]
            finally:
                store.close()
            if rows:
                row = rows[0]
                seen = row.halt_reason.value if row.halt_reason else row.status
                if seen == want:
                    return seen
        time.sleep(0.2)
    raise AssertionError(f"run {run_id}: {seen or 'not there'}, not {want}, in {timeout_s} s")


def proven(tmp: Path, run_id: str) -> None:
    verified = cli(tmp, "verify", run_id, "--db", "j.db")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    replayed = cli(tmp, "replay", run_id, "--db", "j.db")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "proven" in replayed.stdout, replayed.stdout


@pytest.mark.parametrize("worker", [SHOP_WORKER], indirect=True)
def test_a_person_decides_a_temporal_run_and_it_goes_on_as_a_workflow(
    server: DevServer, worker: Path
) -> None:
    tmp, at = worker, ("--temporal", server.address, "--db", "j.db")
    started = cli(tmp, "submit", SHOP, "--task", "Refund 500 cents to customer C-17.", *at)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    status(tmp, run_id, "approval_required")
    denied = cli(tmp, "deny", run_id, "--why", "wrong order", *at)
    assert denied.returncode == 0, denied.stderr
    assert "goes on as a Temporal workflow" in denied.stdout
    status(tmp, run_id, "handoff_requested")
    answered = cli(tmp, "answer", run_id, "--text", "refund 300 instead", "--why", "asked", *at)
    assert answered.returncode == 0, answered.stderr
    status(tmp, run_id, "approval_required")
    assert not (tmp / "refunds.txt").exists()  # nothing ran before a person approved it
    approved = cli(tmp, "approve", run_id, "--why", "checked", *at)
    assert approved.returncode == 0, approved.stderr
    status(tmp, run_id, "completed")
    assert (tmp / "refunds.txt").read_text() == "C-17 300\n"  # the approved call, once
    proven(tmp, run_id)
    shown = cli(tmp, "show", run_id, "--db", "j.db")
    assert "answer: refund rf_1_300" in shown.stdout
    again = cli(tmp, "approve", run_id, "--why", "twice", *at)
    assert again.returncode == 2  # it waits for nobody now
    assert "Error:" in again.stderr


@pytest.mark.parametrize("worker", [LAB_WORKER], indirect=True)
def test_an_operator_pauses_a_temporal_run_and_resume_goes_on_with_it(
    server: DevServer, worker: Path
) -> None:
    tmp, at = worker, ("--temporal", server.address, "--db", "j.db")
    started = cli(tmp, "submit", "agent_loop", "--task", "Find the lab password.", *at)
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()
    status(tmp, run_id, "running")
    paused = cli(tmp, "pause", run_id, "--why", "look first", *at)  # during the 3 s lookup
    assert paused.returncode == 0, paused.stderr
    status(tmp, run_id, "paused")
    resumed = cli(tmp, "resume", run_id, *at)
    assert resumed.returncode == 0, resumed.stderr
    status(tmp, run_id, "completed")
    proven(tmp, run_id)
    shown = cli(tmp, "show", run_id, "--db", "j.db")
    assert "paused by" in shown.stdout
    assert "resumed" in shown.stdout


def test_temporal_commands_say_what_is_wrong(tmp_path: Path) -> None:
    with_model = cli(tmp_path, "resume", "r1", "--temporal", "dev", "--model", "scripted:x.json")
    assert with_model.returncode == 2
    assert "--model is the Temporal workers' own" in with_model.stderr
    without = cli(tmp_path, "resume", "r1")
    assert without.returncode == 2
    assert "Missing option '--model'" in without.stderr
    unreachable = cli(tmp_path, "submit", "agent_loop", "--task", "t", "--temporal",
                      "127.0.0.1:1", "--db", "j.db")  # fmt: skip
    assert unreachable.returncode == 2
    assert "cannot reach Temporal at 127.0.0.1:1" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr


def temporal(server: DevServer, *args: str) -> None:
    from fsm_agent.temporal.service import temporal_binary

    done = subprocess.run(
        [temporal_binary(), "workflow", *args, "--address", server.address],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("worker", [LAB_WORKER], indirect=True)
def test_a_cancelled_workflow_halts_its_run_as_a_sigterm_would(
    server: DevServer, worker: Path
) -> None:
    tmp, at = worker, ("--temporal", server.address, "--db", "j.db")
    run_id = cli(tmp, "submit", "agent_loop", "--task", "Find the lab password.", *at).stdout
    run_id = run_id.strip()
    status(tmp, run_id, "running")
    time.sleep(1.0)  # inside the 3 s lookup
    temporal(server, "cancel", "--workflow-id", run_id)
    status(tmp, run_id, "interrupted")
    shown = cli(tmp, "show", run_id, "--db", "j.db")
    assert "signal 15" in shown.stdout or "SIGTERM" in shown.stdout, shown.stdout
    proven(tmp, run_id)


@pytest.mark.parametrize("worker", [LAB_WORKER], indirect=True)
def test_a_terminated_workflow_leaves_its_run_to_resume_on_temporal(
    server: DevServer, worker: Path
) -> None:
    """Terminated, no code of the workflow runs: the run stays as the journal has it
    (owned by Temporal); `resume --temporal` takes it from there under the resume rules."""
    tmp, at = worker, ("--temporal", server.address, "--db", "j.db")
    run_id = cli(tmp, "submit", "agent_loop", "--task", "Find the lab password.", *at).stdout
    run_id = run_id.strip()
    status(tmp, run_id, "running")
    time.sleep(1.0)
    temporal(server, "terminate", "--workflow-id", run_id, "--reason", "test")
    script = f"scripted:{ROOT / 'examples' / 'halt_lab' / 'slow.json'}"
    local = cli(tmp, "resume", run_id, "--db", "j.db", "--model", script)
    assert local.returncode == 2, local.stdout  # Temporal's, not this process's to take
    assert "temporal" in local.stderr
    resumed = cli(tmp, "resume", run_id, *at)
    assert resumed.returncode == 0, resumed.stderr
    status(tmp, run_id, "completed")  # the lookup is a read: asked again
    proven(tmp, run_id)


def test_a_temporal_worker_sends_traces_live_as_export_traces_does(
    server: DevServer, tmp_path: Path
) -> None:
    """`worker --temporal --otel`: each committed event and the halt, sent by the journal
    activity once committed, under the ids `export-traces` gives the same run."""
    from tests.otlp_receiver import otlp_receiver

    proper = f"scripted:{ROOT / 'examples' / 'halt_lab' / 'proper.json'}"
    with otlp_receiver() as rx:
        environ = {k: v for k, v in env(tmp_path).items() if not k.startswith("OTEL_")}
        environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = rx.endpoint
        proc = subprocess.Popen(
            [sys.executable, "-m", "fsm_agent", "worker", "--temporal", server.address,
             "--db", "j.db", "--tools", "fsm_agent.examples.halt_lab.tools", "--allow",
             "lookup", "--model", proper, "--otel"],
            cwd=tmp_path, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            at = ("--temporal", server.address, "--db", "j.db")
            started = cli(tmp_path, "submit", "agent_loop", "--task", "Find it.", *at)
            run_id = started.stdout.strip()
            status(tmp_path, run_id, "completed")
            deadline = time.monotonic() + 30
            while not any(s["parent_id"] is None for s in rx.spans):  # the root: the halt
                assert time.monotonic() < deadline, rx.spans
                time.sleep(0.1)
        finally:
            proc.terminate()
            proc.wait(30)
        live = {s["span_id"]: (s["name"], s["start_ns"], s["end_ns"]) for s in rx.spans}
        assert len(live) == 8, live  # root, 4 transitions, 2 model calls, 1 tool call
        rx.spans.clear()
        exported = subprocess.run(
            [sys.executable, "-m", "fsm_agent", "export-traces", run_id, "--db", "j.db"],
            cwd=tmp_path, env=environ, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert exported.returncode == 0, exported.stderr
        again = {s["span_id"]: (s["name"], s["start_ns"], s["end_ns"]) for s in rx.spans}
    assert again == live


def test_queue_and_dequeue_keep_their_meaning_on_temporal(
    server: DevServer, tmp_path: Path
) -> None:
    """No worker serves: the run waits on Temporal, `queue` lists it open, `dequeue` takes it
    out (its workflow terminated, the reason kept); a run that started is refused."""
    at = ("--temporal", server.address, "--db", "j.db")
    run_id = cli(tmp_path, "submit", "agent_loop", "--task", "t", "--run-id", "waits-1", *at)
    assert run_id.returncode == 0, run_id.stderr
    listed = cli(tmp_path, "queue", *at)
    assert listed.returncode == 0, listed.stderr
    assert "waits-1" in listed.stdout
    assert "running" in listed.stdout
    out = cli(tmp_path, "dequeue", "waits-1", "--why", "not today", *at)
    assert out.returncode == 0, out.stderr
    assert "cancelled on Temporal" in out.stdout
    done = cli(tmp_path, "queue", "--status", "done", *at)
    assert "waits-1" in done.stdout
    assert "terminated" in done.stdout
    assert "waits-1" not in cli(tmp_path, "queue", *at).stdout
    again = cli(tmp_path, "dequeue", "waits-1", "--why", "twice", *at)
    assert again.returncode == 2
    assert "no workflow runs run waits-1" in again.stderr
    wrong = cli(tmp_path, "queue", "--status", "leased", *at)
    assert wrong.returncode == 2
    assert "'leased' is not one of 'open', 'done', 'all'" in wrong.stderr


@pytest.mark.parametrize("worker", [LAB_WORKER], indirect=True)
def test_dequeue_refuses_a_run_that_started_on_temporal(server: DevServer, worker: Path) -> None:
    tmp, at = worker, ("--temporal", server.address, "--db", "j.db")
    run_id = cli(tmp, "submit", "agent_loop", "--task", "Find it.", *at).stdout.strip()
    status(tmp, run_id, "running")
    refused = cli(tmp, "dequeue", run_id, "--why", "late", *at)
    assert refused.returncode == 2
    assert "has started on Temporal: pause it" in refused.stderr
    status(tmp, run_id, "completed")


@pytest.mark.parametrize("command", [["submit", "agent_loop", "--task", "t"], ["queue"]])
def test_without_the_extra_the_commands_say_how_to_add_it(
    tmp_path: Path, command: list[str]
) -> None:
    """No temporalio installed (hidden from the import system): one line, exit 2, no file."""
    hide = ("import sys; sys.modules['temporalio'] = None; sys.argv = ['fsm-agent', *sys.argv[1:]];"
            " from fsm_agent.cli.entry import main; main()")  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", hide, *command, "--db", "j.db"], cwd=tmp_path, env=env(tmp_path),
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "pip install 'fsm-agent[temporal]'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "j.db").exists()


PROPER = f"scripted:{ROOT / 'examples' / 'halt_lab' / 'proper.json'}"
PROPER_WORKER = ("--tools", "fsm_agent.examples.halt_lab.tools", "--allow", "lookup",
                 "--model", PROPER)  # fmt: skip


@pytest.mark.parametrize("worker", [PROPER_WORKER], indirect=True)
def test_many_runs_at_once_on_one_worker_each_journal_whole(
    server: DevServer, worker: Path
) -> None:
    """24 runs started at once on one worker: its journal activities share one SQLite
    connection (once, two threads' writes interleaved on it and one run's write was lost)
    and its calls a pool of their own; every run completes and every chain verifies."""
    import asyncio

    from fsm_agent.submission import frozen_job
    from fsm_agent.temporal.service import connect, result, start
    from fsm_agent.temporal.setup import submission

    tmp = worker
    jobs = [frozen_job("agent_loop", f"Find it ({n}).") for n in range(24)]

    async def all_of_them() -> list[str | None]:
        client = await connect(server.address, str(tmp / "j.db"))
        await asyncio.gather(*(start(client, submission(job)) for job in jobs))
        done = await asyncio.gather(*(result(client, job.run_id) for job in jobs))
        return [None if o.record is None else o.record.halt_reason.value for o in done]

    assert asyncio.run(all_of_them()) == ["completed"] * len(jobs)
    verified = cli(tmp, "verify", "--all", "--db", "j.db")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"{len(jobs)} of {len(jobs)} runs verify" in verified.stdout
    log = (tmp / "worker.log").read_text(errors="replace")
    assert "transaction" not in log, log[-3000:]  # no write ran inside another's transaction
