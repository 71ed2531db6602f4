"""Several real processes writing runs into one SQLite journal at once, while the read
commands run against it.

Each writer is `tests/child_writer.py`: it imports, says it is ready, and waits for a go
file, so every writer opens the journal, which does not exist yet, at the same moment (the
migrations race). While they write, this process keeps invoking `runs`, `show` and
`stats`. Afterwards every run is there exactly once, halted as its script says, with
gap-free sequence numbers and a chain that verifies; no writer saw "database is locked".
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner, Result

from fsm_agent import HaltReason, read_record
from fsm_agent.cli.main import cli
from fsm_agent.journal.chain import verify_run
from fsm_agent.stores.sqlite import SqliteStore
from tests.child_writer import expected_halt, run_id

ROOT = Path(__file__).parent.parent
CHILD = Path(__file__).parent / "child_writer.py"
STARTUP_S = 60.0  # generous: import-heavy children on a loaded 2-core machine
FINISH_S = 120.0
#: Events of one run of each script in tests/child_writer.py: the start, 3 per model call
#: that proposes a tool (to tool_pending, to awaiting_receipts, back to drafting), the halt.
EVENTS = {
    HaltReason.COMPLETED: 1 + 3 + 1,
    HaltReason.HANDOFF_REQUESTED: 1 + 1,
    HaltReason.MAX_STEPS: 1 + 2 * 3 + 1,
}


@attrs.frozen
class Writers:
    """What a batch of writer processes left behind."""

    db: Path
    records: Path
    exit_codes: tuple[int, ...]
    stdouts: tuple[str, ...]
    stderrs: tuple[str, ...]
    reads: Counter[str]  # read command -> successful invocations while the writers ran
    seconds: float  # from the go signal to the last writer's exit


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _read_while_writing(db: Path, reads: Counter[str], rng: random.Random) -> None:
    """One round of the read commands; each must succeed while the writers write."""
    result = invoke("runs", "--db", str(db), "--json", "--limit", "50")
    assert result.exit_code == 0, result.output
    reads["runs"] += 1
    rows = json.loads(result.output)
    if rows:
        shown = invoke("show", rng.choice(rows)["run_id"], "--db", str(db))
        assert shown.exit_code == 0, shown.output
        reads["show"] += 1
    stats = invoke("stats", "--db", str(db))
    assert stats.exit_code == 0, stats.output
    reads["stats"] += 1


def run_writers(tmp_path: Path, writers: int, runs: int) -> Writers:
    db, records = tmp_path / "journal.db", tmp_path / "records"
    records.mkdir()
    go = tmp_path / "go"
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    procs = []
    for w in range(writers):
        args = [
            sys.executable, str(CHILD), "--db", str(db), "--records", str(records),
            "--worker", str(w), "--runs", str(runs), "--ready", str(tmp_path / f"ready{w}"),
            "--go", str(go),
        ]  # fmt: skip
        pipe = subprocess.PIPE
        procs.append(subprocess.Popen(args, cwd=ROOT, env=env, stdout=pipe, stderr=pipe, text=True))
    try:
        deadline = time.monotonic() + STARTUP_S
        while not all((tmp_path / f"ready{w}").exists() for w in range(writers)):
            dead = [p.returncode for p in procs if p.poll() is not None]
            assert not dead, f"a writer exited {dead} before it was ready"
            assert time.monotonic() < deadline, "writers not ready in time"
            time.sleep(0.01)
        assert not db.exists()
        go.touch()
        start = time.monotonic()
        reads: Counter[str] = Counter()
        rng = random.Random(7)  # noqa: S311 - which run to show
        while any(p.poll() is None for p in procs):
            assert time.monotonic() < start + FINISH_S, "writers did not finish in time"
            if db.exists():
                _read_while_writing(db, reads, rng)
            else:
                time.sleep(0.001)
        seconds = time.monotonic() - start
        outputs = [p.communicate() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return Writers(
        db=db,
        records=records,
        exit_codes=tuple(p.returncode for p in procs),
        stdouts=tuple(out for out, _ in outputs),
        stderrs=tuple(err for _, err in outputs),
        reads=reads,
        seconds=seconds,
    )


def check_journal(result: Writers, writers: int, runs: int) -> int:
    """Assert everything the writers did is in the journal exactly once; return the number
    of events."""
    assert result.exit_codes == (0,) * writers, result.stderrs
    for err in result.stderrs:
        assert "locked" not in err.lower(), err
        assert "Traceback" not in err, err
    expected = {run_id(w, n): expected_halt(n) for w in range(writers) for n in range(runs)}
    printed = [json.loads(line) for out in result.stdouts for line in out.splitlines()]
    assert {p["run_id"]: p["halt"] for p in printed} == {k: v.value for k, v in expected.items()}
    assert len(printed) == writers * runs

    store = SqliteStore(result.db)
    try:
        ids = store.run_ids()
        assert sorted(ids) == sorted(expected)  # exactly these runs, none twice
        (total,) = store.conn.execute("SELECT COUNT(*) FROM events").fetchone()
        assert total == sum(EVENTS[halt] for halt in expected.values())  # none lost, none twice
        for rid, halt in expected.items():
            row = store.get_run(rid)
            assert (row.status, row.halt_reason) == ("halted", halt), rid
            events = store.events(rid)
            assert [e.seq for e in events] == list(range(EVENTS[halt])), rid
            assert events[-1].halt is halt
            assert [e.halt for e in events[:-1]] == [None] * (len(events) - 1)
            report = verify_run(store, rid)
            assert report.ok, (rid, report.findings)
            assert report.events == len(events)
            record = read_record(result.records / f"{rid}.json")
            assert record == row.record
            assert record.journal_head == report.head_hash
    finally:
        store.close()
    return int(total)


def test_writers_and_readers_share_one_new_journal(tmp_path: Path) -> None:
    # A small batch in the default suite; the 4 x 50 is the slow test below.
    result = run_writers(tmp_path, writers=3, runs=6)
    check_journal(result, writers=3, runs=6)
    assert result.reads["runs"] >= 1


@pytest.mark.slow
def test_four_processes_write_fifty_runs_each_into_one_new_journal(tmp_path: Path) -> None:
    result = run_writers(tmp_path, writers=4, runs=50)
    events = check_journal(result, writers=4, runs=50)
    assert min(result.reads[c] for c in ("runs", "show", "stats")) >= 3
    print(
        f"\n4 writers x 50 runs: {events} events in {result.seconds:.1f} s;"
        f" reads while writing: {dict(result.reads)}"
    )
