"""Cases that need a fresh process: startup time, and peak memory of a long run.

Commands run with this interpreter (`sys.executable`) and the `fsm-agent` script installed
beside it; their output is discarded and a non-zero exit fails the benchmark.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.bench.workload import Scratch, Workload

REPO_ROOT = Path(__file__).resolve().parents[2]
KIB = 1024


def fsm_agent_script() -> str | None:
    """The `fsm-agent` console script of this interpreter's environment, if installed."""
    beside = Path(sys.executable).with_name("fsm-agent")
    return str(beside) if beside.exists() else shutil.which("fsm-agent")


def startup_commands() -> dict[str, list[str]]:
    """Metric name → command; the bare interpreter is the baseline."""
    commands = {
        "startup: python -c pass": [sys.executable, "-c", "pass"],
        "startup: import fsm_agent": [sys.executable, "-c", "import fsm_agent"],
    }
    script = fsm_agent_script()
    if script is not None:
        commands["startup: fsm-agent --help"] = [script, "--help"]
    return commands


def _wall_ms(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - start) * 1000


def startup(scratch: Scratch, repeats: int) -> dict[str, list[float]]:
    """ms from spawn to exit for each command, `repeats` times each, interleaved."""
    commands = startup_commands()
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeats):
        for name, command in commands.items():
            samples[name].append(_wall_ms(command, scratch.root))
    return samples


def long_run(workload: Workload, scratch: Scratch) -> dict[str, list[float]]:
    """Peak RSS (MiB) and journal bytes per transition of one long run in a child process."""
    db, record = scratch.fresh("rss.db"), scratch.fresh("rss.json")
    command = [
        sys.executable, "-m", "tests.bench.child",
        "--transitions", str(workload.transitions), "--db", str(db), "--record", str(record),
    ]  # fmt: skip
    out = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    scratch.discard(db, record)
    if out.returncode != 0:
        raise RuntimeError(f"the long-run child exited {out.returncode}:\n{out.stderr[-2000:]}")
    data = json.loads(out.stdout)
    return {
        "peak RSS, long run": [data["rss_peak_kib"] / KIB],
        "RSS after imports": [data["rss_import_kib"] / KIB],
        "journal bytes/transition": [data["journal_bytes"] / data["events"]],
    }
