"""Crash safety with real processes and real signals: writers killed with SIGKILL at random
moments (20 kills here, 200 in the slow suite), SIGTERM and SIGINT under load, and every killed run
resumed afterwards.

After each kill: the journal opens, every run of the killed writer verifies, every event
decodes (none is partial), the last transition the writer reported as committed is there,
and a run it left behind shows as `interrupted` — at most one per writer.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fsm_agent import HaltReason, Prompt, Tool, ToolRegistry, read_record
from fsm_agent.cli.main import cli
from fsm_agent.journal.chain import verify_run
from fsm_agent.runtime.run_status import shown_status
from fsm_agent.runtime.worker import resume_run
from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.testing import assert_replays
from tests.crash_child import ANSWER, LOOKUP

ROOT = Path(__file__).parent.parent
CHILD = Path(__file__).parent / "crash_child.py"
GONE_S = 10.0  # how long a killed process may take to disappear (a loaded machine)


class ForkServer:
    """`crash_child.py`: forks writers on request, so each kill costs a fork, not an
    interpreter start."""

    def __init__(self, tmp_path: Path) -> None:
        self.db = tmp_path / "journal.db"
        self.records = tmp_path / "records"
        self.records.mkdir()
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
        )
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(self.db), str(self.records)],
            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            start_new_session=True,  # its own process group: close() kills every writer
        )  # fmt: skip

    def fork(self, name: str, seed: int, *, signals: bool = False) -> int:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(f"fork {name} {seed}{' signals' if signals else ''}\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def reported(self, name: str) -> list[tuple[str, int]]:
        """The (run id, seq) pairs a writer reported after their commits."""
        log = self.records / f"{name}.log"
        if not log.exists():
            return []
        lines = log.read_text().splitlines()
        return [(w[0], int(w[1])) for w in (x.split() for x in lines) if w[0] != "EXIT"]

    def close(self) -> None:
        """Kill the server and any writer still running (a failed test leaves none behind)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ForkServer]:
    s = ForkServer(tmp_path)
    yield s
    s.close()


def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + GONE_S
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"writer {pid} still there {GONE_S} s after SIGKILL")
        time.sleep(0.002)


def check_after_kill(server: ForkServer, name: str) -> int:
    """The journal after one writer was killed; returns how many runs it left interrupted."""
    store = SqliteStore(server.db)  # the journal opens
    try:
        runs = [store.get_run(r) for r in store.run_ids() if r.startswith(f"{name}-")]
        committed = dict(server.reported(name))
        interrupted = 0
        for run in runs:
            report = verify_run(store, run.run_id)
            assert report.ok, (run.run_id, report.findings)
            events = store.events(run.run_id)  # every event decodes: none is partial
            assert [e.seq for e in events] == list(range(len(events)))
            if run.run_id in committed:
                assert events[-1].seq >= committed[run.run_id]  # what was reported is there
            if run.status == "halted":
                assert run.record is not None
            else:
                assert shown_status(run) == "interrupted", run
                interrupted += 1
        assert set(committed) <= {r.run_id for r in runs}
        assert interrupted <= 1
        return interrupted
    finally:
        store.close()


def lab_oracle(prompt: Prompt) -> Any:
    """A model for resumed runs: look the password up until a receipted hit, then answer."""
    seen = any(m.get("receipts_complete") for m in prompt.history)
    return ANSWER if seen else LOOKUP


lab_oracle.isolation = "inline"  # type: ignore[attr-defined]


def lab_tools(*, idempotent: bool) -> ToolRegistry:
    from fsm_agent.examples.halt_lab.tools import lookup

    return ToolRegistry(
        (Tool(name="lookup", fn=lookup, idempotent=idempotent, isolation="inline"),)
    )


def kill_many(server: ForkServer, kills: int, seed: int) -> tuple[int, float]:
    """SIGKILL `kills` writers at random moments; returns (runs left interrupted, seconds)."""
    rng = random.Random(seed)  # noqa: S311 - test data
    interrupted = 0
    started = time.monotonic()
    for k in range(kills):
        name = f"k{k}"
        pid = server.fork(name, rng.randrange(1 << 30))
        time.sleep(rng.uniform(0.0, 0.08))  # anywhere: mid-commit, mid-tool, between runs
        os.kill(pid, signal.SIGKILL)
        wait_gone(pid)
        interrupted += check_after_kill(server, name)
    return interrupted, time.monotonic() - started


def resume_all(server: ForkServer) -> dict[str, int]:
    """Resume every interrupted run (half of them with `lookup` declared idempotent); each
    must end with a named halt, verify and replay."""
    store = SqliteStore(server.db)
    halts: dict[str, int] = {}
    try:
        stuck = [r for r in store.list_runs(100_000) if r.status != "halted"]
        for i, run in enumerate(stuck):
            record = resume_run(
                run.run_id,
                model=lab_oracle,
                tools=lab_tools(idempotent=i % 2 == 0),
                store=store,
                record_path=server.records / f"{run.run_id}.resumed.json",
                handle_signals=False,
            )
            assert read_record(server.records / f"{run.run_id}.resumed.json") == record
            assert record.halt_reason in (
                HaltReason.COMPLETED,
                HaltReason.SIDE_EFFECT_UNKNOWN,
                HaltReason.HANDOFF_REQUESTED,
            ), record
            assert record.budgets == run.budgets  # the same frozen budgets
            assert verify_run(store, run.run_id).ok
            assert_replays(server.db, run.run_id)
            halts[record.halt_reason.value] = halts.get(record.halt_reason.value, 0) + 1
    finally:
        store.close()
    return halts


def _kill_and_resume(server: ForkServer, kills: int, seed: int) -> None:
    interrupted, seconds = kill_many(server, kills, seed)
    halts = resume_all(server)
    assert sum(halts.values()) == interrupted
    result = CliRunner().invoke(cli, ["verify", "--all", "--db", str(server.db)])
    assert result.exit_code == 0, result.output
    store = SqliteStore(server.db)
    total = len(store.list_runs(100_000))
    events = sum(len(store.events(r)) for r in store.run_ids())
    store.close()
    assert total >= kills // 2  # the kills landed on writers that were writing
    assert interrupted >= kills // 5  # ... and many of them in the middle of a run
    print(  # the figures the README quotes come from this line (pytest -s)
        f"\ncrash: {kills} SIGKILLs in {seconds:.1f} s; {total} runs, {events} events;"
        f" {interrupted} runs left interrupted, resumed: {halts}; 0 events lost"
    )


def test_writers_killed_at_random_moments_lose_nothing(server: ForkServer) -> None:
    _kill_and_resume(server, kills=20, seed=7)


@pytest.mark.slow
def test_two_hundred_kills(server: ForkServer) -> None:
    _kill_and_resume(server, kills=200, seed=2026)


def test_sigterm_and_sigint_under_load_leave_a_record_and_a_journaled_halt(
    server: ForkServer,
) -> None:
    # Three writers share the journal; one of them gets SIGTERM or SIGINT mid-stream.
    # A stop that lands mid-run halts that run `interrupted`; one that lands between runs or
    # as a run halts is not lost: the writer still exits 143, and no run is left open.
    rng = random.Random(11)  # noqa: S311 - test data
    interrupted = 0
    for round_ in range(8):
        busy = [server.fork(f"busy{round_}-{i}", rng.randrange(1 << 30)) for i in range(2)]
        victim = f"term{round_}"
        pid = server.fork(victim, rng.randrange(1 << 30), signals=True)
        time.sleep(rng.uniform(0.02, 0.1))
        stop = signal.SIGTERM if round_ % 2 == 0 else signal.SIGINT
        os.kill(pid, stop)
        wait_gone(pid)
        for other in busy:
            os.kill(other, signal.SIGKILL)
            wait_gone(other)
        log = (server.records / f"{victim}.log").read_text().splitlines()
        assert log[-1] == f"EXIT {128 + stop}", log[-3:]
        store = SqliteStore(server.db)
        try:
            mine = [r for r in store.list_runs(100_000) if r.run_id.startswith(f"{victim}-")]
            for run in mine:
                assert run.status == "halted", run  # nothing left open by a stop
                record = read_record(server.records / f"{run.run_id}.json")
                assert record.halt_reason is run.halt_reason
                assert record.journal_head == store.chain(run.run_id)[2]
                assert verify_run(store, run.run_id).ok
                if run.halt_reason is HaltReason.INTERRUPTED:
                    interrupted += 1
                    assert record.signal == stop
                    assert store.events(run.run_id)[-1].halt is HaltReason.INTERRUPTED
        finally:
            store.close()
    assert interrupted >= 4  # most stops landed mid-run
