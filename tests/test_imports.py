"""Startup stays cheap: importing the library does not load what only some runs need."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("statement", "absent"),
    [
        (
            "import fsm_agent",
            [
                "asyncio",
                "ssl",
                "multiprocessing",
                "yaml",
                "sqlite_utils",
                "msgspec",
                "docstring_parser",
            ],
        ),
        (
            "import fsm_agent.cli.main",
            [
                "asyncio",
                "ssl",
                "multiprocessing",
                "yaml",
                "sqlite_utils",
                "msgspec",
                "docstring_parser",
                "opentelemetry",  # only when traces are asked for
                "starlette",  # only when the console is started
                "uvicorn",
                # the checker and the simulator load when their commands run, not at start
                "fsm_agent.checking.explore",
                "fsm_agent.simulation.runner",
                "fsm_agent.telemetry.otlp",
                "fsm_agent.console.app",
            ],
        ),
        ("import fsm_agent.telemetry.root, fsm_agent.telemetry.live", ["opentelemetry"]),
    ],
)
def test_heavy_modules_are_imported_only_when_used(statement: str, absent: list[str]) -> None:
    code = f"{statement}; import sys; print(' '.join(sorted(sys.modules)))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert [name for name in absent if name in loaded] == []
