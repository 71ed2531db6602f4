"""Startup: the time from spawn to exit of fresh processes (the bare interpreter, the import,
the CLI). The scaling rows run in fresh processes too (`scaling.py`, `child.py`).

Commands run with this interpreter (`sys.executable`) and the `fsm-agent` script installed
beside it; their output is discarded and a non-zero exit fails the benchmark.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.bench.workload import Scratch

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
