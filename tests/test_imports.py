"""Startup stays cheap: importing the library does not load what only some runs need."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


#: What no review command may load: the checker, the simulator, the console, telemetry,
#: Temporal, the runtime's loop and model adapters, the journal's writers' schemas and the
#: migrations' library (a reader never migrates), the diagram renderers.
NOT_FOR_REVIEW = [
    "fsm_agent.checking",
    "fsm_agent.simulation",
    "fsm_agent.console",
    "fsm_agent.telemetry",
    "fsm_agent.temporal",
    "fsm_agent.runtime.worker",
    "fsm_agent.runtime.resume",
    "fsm_agent.adapters.models",
    "fsm_agent.review.svg_render",
    "fsm_agent.review.mermaid",
    "fsm_agent.review.report",
    "sqlite_utils",
    "opentelemetry",
    "temporalio",
    "starlette",
    "asyncio",
    "multiprocessing",
]
#: `replay` re-decides: it parses the declaration the run ran under (YAML, checked against the
#: declaration's schema, msgspec) and builds its decide table (on `transitions`); `runs`, `show`
#: and `verify` only read rows and events.
NOT_FOR_READING = [*NOT_FOR_REVIEW, "fsm_agent.review.replay", "transitions", "yaml", "msgspec"]


@pytest.fixture(scope="module")
def small_journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.lab import LOOKUP, lab_run

    folder = tmp_path_factory.mktemp("imports")
    lab_run(folder, [LOOKUP, {"final_answer": "it is in the lab"}])
    return folder / "j.db"


def loaded_by(args: list[str], cwd: Path) -> set[str]:
    """The modules `fsm-agent ARGS` imports, as Python's own `-X importtime` lists them."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "fsm_agent", *args],
        capture_output=True, text=True, cwd=cwd, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }


@pytest.mark.parametrize(
    ("command", "absent"),
    [
        (["runs"], NOT_FOR_READING),
        (["show", "@latest"], NOT_FOR_READING),
        (["replay", "@latest"], NOT_FOR_REVIEW),
        (["verify", "@latest"], NOT_FOR_READING),
    ],
    ids=["runs", "show", "replay", "verify"],
)
def test_a_review_command_imports_only_what_it_needs(
    small_journal: Path, command: list[str], absent: list[str]
) -> None:
    loaded = loaded_by([*command, "--db", str(small_journal)], small_journal.parent)
    assert "fsm_agent.stores.sqlite" in loaded  # the measurement sees the command's own imports
    found = sorted(n for n in loaded if any(n == a or n.startswith(f"{a}.") for a in absent))
    assert found == []


def test_every_command_is_named_with_the_module_that_defines_it() -> None:
    """`COMMANDS` is how the group finds a command without importing every module: a
    command registered by a module it does not name would be missing from `fsm-agent`."""
    from fsm_agent.cli.group import COMMANDS, all_commands, cli

    commands = all_commands()
    assert set(commands) == set(COMMANDS) == set(cli.commands)
    for name, command in commands.items():
        assert command.callback is not None
        defined = command.callback.__module__
        assert defined == f"fsm_agent.cli.{COMMANDS[name]}", (name, defined)
