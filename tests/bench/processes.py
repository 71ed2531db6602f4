"""Startup: the time from spawn to exit of fresh processes (the bare interpreter, the import,
the CLI's help, and the review commands people wait for: `runs`, `show` and `replay` of a
small run, on a journal of the demo's 13 runs made once per benchmark run). The scaling
rows run in fresh processes too (`scaling.py`, `child.py`).

Commands run with this interpreter (`sys.executable`) and the `fsm-agent` script installed
beside it; their output is discarded and a non-zero exit fails the benchmark.
"""

from __future__ import annotations

import os
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


#: The review commands measured cold, each on the small journal (`review_journal`).
REVIEW = ("runs", "show", "replay")


def review_metric(command: str) -> str:
    return f"startup: fsm-agent {command}"


_journals: dict[Path, Path] = {}


def review_journal(scratch: Scratch, script: str) -> Path:
    """A journal holding the demo's runs (each a few steps), made by the real CLI once per
    scratch directory."""
    if scratch.root not in _journals:
        db = scratch.fresh("startup.db")
        subprocess.run([script, "demo", "--db", str(db)], cwd=scratch.root, check=True,
                       stdout=subprocess.DEVNULL, env=_env())  # fmt: skip
        _journals[scratch.root] = db
    return _journals[scratch.root]


def startup_commands(journal: Path | None = None) -> dict[str, list[str]]:
    """Metric name → command; the bare interpreter is the baseline. With `journal`, the
    review commands too (`show` and `replay` of its latest run)."""
    commands = {
        "startup: python -c pass": [sys.executable, "-c", "pass"],
        "startup: import fsm_agent": [sys.executable, "-c", "import fsm_agent"],
    }
    script = fsm_agent_script()
    if script is not None:
        commands["startup: fsm-agent --help"] = [script, "--help"]
        if journal is not None:
            for name in REVIEW:
                run = [] if name == "runs" else ["@latest"]
                commands[review_metric(name)] = [script, name, *run, "--db", str(journal)]
    return commands


def _env() -> dict[str, str]:
    """The children's environment: Python may write and read its bytecode cache, as it does
    for anyone who installed the package (an environment that says PYTHONDONTWRITEBYTECODE
    would have every child compile every module from source: ~100 ms more for a command)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _wall_ms(command: list[str], cwd: Path) -> float:
    env = _env()
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, stdout=subprocess.DEVNULL, env=env)
    return (time.perf_counter() - start) * 1000


def startup(scratch: Scratch, repeats: int) -> dict[str, list[float]]:
    """ms from spawn to exit for each command, `repeats` times each, interleaved."""
    script = fsm_agent_script()
    journal = None if script is None else review_journal(scratch, script)
    commands = startup_commands(journal)
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeats):
        for name, command in commands.items():
            samples[name].append(_wall_ms(command, scratch.root))
    return samples
