"""One driver per run: concurrent `fsm-agent resume`s of one interrupted run, in real
processes, on a SQLite file and on PostgreSQL. One takes the run (a compare-and-set on the
run's row); every other is refused with exit 2 and `Error: …` naming the holder (pid@host),
having done nothing; a later one is refused the same way while the holder is live.

Once: the losers overwrote the run's pid (so it showed interrupted while the winner ran), a
third resume was accepted and took over, and the idempotent charge ran 3 times.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsm_agent.journal.chain import verify_run
from fsm_agent.runtime.run_status import shown_status
from fsm_agent.stores import open_store
from tests.fixture_resume import GATE_ENV, HANG_ENV, IDEMPOTENT_ENV, LEDGER_ENV
from tests.test_store_contract import pg_location, pg_server  # noqa: F401 - fixtures

ROOT = Path(__file__).parent.parent
WAIT_S = 60.0  # generous: several import-heavy children on a loaded 2-core machine


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "j.db")
    location: str = request.getfixturevalue("pg_location")
    return location


def fsm_agent(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    full = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), **env)
    return subprocess.Popen(
        [sys.executable, "-m", "fsm_agent", *args],
        cwd=ROOT, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def resume(
    db: str, run_id: str, tmp_path: Path, n: int, env: dict[str, str]
) -> subprocess.Popen[str]:
    return fsm_agent(
        "resume", run_id, "--model", "python:tests.fixture_resume:gated_oracle", "--tools",
        "tests.fixture_resume", "--db", db, "--record", str(tmp_path / f"resumed{n}.json"),
        "--quiet", env=env,
    )  # fmt: skip


def killed_mid_charge(db: str, tmp_path: Path, ledger: Path) -> str:
    """A run SIGKILLed inside `charge`, after its side effect and before its receipt."""
    hang = tmp_path / "hang"
    child = fsm_agent(
        "run", "agent_loop", "--task", "charge order ord_1 once", "--tools",
        "tests.fixture_resume",
        "--allow", "charge",
        "--model", "python:tests.fixture_resume:oracle", "--db", db,
        "--record", str(tmp_path / "first.json"), "--quiet",
        env={LEDGER_ENV: str(ledger), HANG_ENV: str(hang)},
    )  # fmt: skip
    assert child.stdout is not None
    run_id = child.stdout.readline().split()[1]
    deadline = time.monotonic() + WAIT_S
    while not hang.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the charge never started"
        time.sleep(0.01)  # polling a handshake file, not a timing assumption
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=WAIT_S)
    return run_id


def _finished(procs: list[subprocess.Popen[str]], count: int) -> None:
    """Wait until `count` of `procs` have exited (the others wait at the gate)."""
    deadline = time.monotonic() + WAIT_S
    while sum(p.poll() is not None for p in procs) < count:
        if time.monotonic() > deadline:
            for p in procs:
                p.kill()
            pytest.fail(f"fewer than {count} resumes ended: {[p.communicate() for p in procs]}")
        time.sleep(0.02)


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:  # a failed test leaves none behind
        if p.poll() is None:
            p.kill()
            p.communicate()


def one_round(
    db: str, tmp_path: Path, procs: list[subprocess.Popen[str]], racers: int
) -> tuple[int, list[str]]:
    """SIGKILL a run mid-charge, start `racers` resumes of it at once, then one more while
    the winner holds the run; check everything; return the winner's pid and the refusals."""
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    run_id = killed_mid_charge(db, tmp_path, ledger)
    env = {LEDGER_ENV: str(ledger), IDEMPOTENT_ENV: "1", GATE_ENV: str(gate)}
    racing = [resume(db, run_id, tmp_path, n, env) for n in range(racers)]
    procs += racing
    # The winner re-issues the charge, then waits at the gate (its model call).
    _finished(racing, racers - 1)
    (winner,) = [p for p in racing if p.poll() is None]
    holder = f"pid {winner.pid}@{socket.gethostname()}"
    refusals = []
    for p in racing:
        if p is winner:
            continue
        out, err = p.communicate()
        assert p.returncode == 2, (out, err)
        assert err.startswith(f"Error: run {run_id} "), err
        assert holder in err, err
        assert "resumed from" not in out  # it never said it had the run
        refusals.append(err)
    store = open_store(db)
    try:
        row = store.get_run(run_id)
        assert (row.pid, row.host) == (winner.pid, socket.gethostname())
        assert shown_status(row) == "running"  # not interrupted: the losers wrote nothing
        late = resume(db, run_id, tmp_path, racers, env)  # a third resume, while it runs
        procs.append(late)
        out, err = late.communicate(timeout=WAIT_S)
        assert late.returncode == 2, (out, err)
        assert holder in err, err
        gate.touch()
        out, err = winner.communicate(timeout=WAIT_S)
        assert winner.returncode == 0, (out, err)
        assert f"run {run_id} resumed from tool_pending" in out
        assert ledger.read_text().splitlines() == ["ord_1 k-1"] * 2  # the kill's, then one re-issue
        events = store.events(run_id)
        assert [e.kind for e in events].count("resumed") == 1
        assert verify_run(store, run_id).ok
        row = store.get_run(run_id)
        assert (row.status, row.pid) == ("halted", winner.pid)
    finally:
        store.close()
    return winner.pid, refusals


def test_of_concurrent_resumes_one_drives_the_run_and_the_others_are_refused(
    db: str, tmp_path: Path, children: list[subprocess.Popen[str]]
) -> None:
    one_round(db, tmp_path, children, racers=3)


@pytest.mark.slow
def test_concurrent_resumes_many_rounds(
    db: str,
    tmp_path: Path,
    children: list[subprocess.Popen[str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    rounds, racers, lost_the_claim = 5, 4, 0
    for n in range(rounds):
        folder = tmp_path / f"round{n}"
        folder.mkdir()
        target = db if "://" in db else str(folder / "j.db")
        _, refusals = one_round(target, folder, children, racers)
        # refused by the compare-and-set itself (both read the dead owner), not by liveness
        lost_the_claim += sum("was taken first by another process" in r for r in refusals)
    with capsys.disabled():
        print(
            f"\n{rounds} rounds x {racers} concurrent resumes: {rounds} winners,"
            f" {rounds * (racers - 1)} refused ({lost_the_claim} at the compare-and-set)"
        )
