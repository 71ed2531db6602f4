"""One scaling run in a fresh process: time, peak memory and journal size at one size.

    python -m tests.bench.child --transitions 100000 --db DB --record RECORD

Imports, then a warm-up run of a few transitions on a journal of its own (so the measured
run does not pay the process's one-time costs: loading and checking the declaration,
building the machine, the thread pool), then the measured run. Prints one JSON object:
`us_per_transition` (elapsed / events in the journal, as in the in-process cases),
`rss_import_kib` (VmHWM after the imports, before any run), `rss_peak_kib` (VmHWM after
the measured run), `events`, and `journal_bytes` (the database file plus its WAL after a
TRUNCATE checkpoint). `ru_maxrss` would be inherited from the parent at fork, so this
reads `/proc/self/status` in a process of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
from pathlib import Path

from tests.bench.runtime import count_events, run_loop
from tests.bench.workload import Workload

WARM_UP = 30


def vm_hwm_kib() -> int:
    """This process's peak resident set size, from /proc/self/status (Linux)."""
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM line in /proc/self/status")


def journal_bytes(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    wal = Path(f"{db}-wal")
    return os.path.getsize(db) + (os.path.getsize(wal) if wal.exists() else 0)


def _remove(*paths: Path) -> None:
    for path in paths:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transitions", type=int, required=True)
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--record", type=Path, required=True)
    opts = parser.parse_args()
    before = vm_hwm_kib()
    warm_db, warm_record = Path(f"{opts.db}.warm"), Path(f"{opts.record}.warm")
    try:
        run_loop(Workload.of(WARM_UP), warm_db, warm_record)
    finally:
        _remove(warm_db, warm_record)
    record, elapsed = run_loop(Workload.of(opts.transitions), opts.db, opts.record)
    peak = vm_hwm_kib()
    events = count_events(opts.db, record.run_id)
    result = {
        "us_per_transition": elapsed * 1e6 / events,
        "rss_import_kib": before,
        "rss_peak_kib": peak,
        "events": events,
        "journal_bytes": journal_bytes(opts.db),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
