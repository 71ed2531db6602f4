"""Shared fixtures: a fresh journal path and store, and machine declarations written to disk."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fsm_agent.stores.sqlite import SqliteStore
from tests.model_server import ModelServer, model_server

#: The checkout's root: the test helpers (`tests.fixture_tools`, the child programs) are
#: imported from it. An install maps only the `fsm_agent` package, so the child processes the
#: tests start find `tests` through PYTHONPATH (set once here, inherited by every child).
ROOT = Path(__file__).resolve().parent.parent
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
)

#: The smallest valid declaration: one model state and the three terminal states. Loader
#: tests mutate it with `str.replace`, so each line below is unique on purpose.
MINIMAL_MACHINE = """\
name: minimal
description: smallest valid machine
initial: drafting
budgets:
  max_steps: 3
  wall_clock_ms: 1000
  max_cost: 0.5
  tool_timeout_ms: 100
  max_retries: 1
states:
  drafting: {action: model}
  done: {terminal: true}
  budget_exhausted: {terminal: true}
  handoff: {terminal: true}
transitions:
  - {trigger: answer, source: drafting, dest: done, guards: [evidence_complete], halt: completed}
  - {trigger: answer, source: drafting, dest: handoff, halt: schema_fail}
  - {trigger: handoff, source: drafting, dest: handoff, halt: handoff_requested}
"""


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A path for a fresh SQLite journal (the file does not exist yet)."""
    return tmp_path / "journal.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[SqliteStore]:
    """A `SqliteStore` on `db_path`, closed after the test."""
    s = SqliteStore(db_path)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def machine_yaml(tmp_path: Path) -> Callable[..., Path]:
    """Write a YAML declaration into tmp_path and return its path."""

    def write(text: str, name: str = "machine.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def minimal_machine_text() -> str:
    """A valid declaration string to mutate in loader tests."""
    return MINIMAL_MACHINE


@pytest.fixture(scope="module")
def running_server() -> Iterator[ModelServer]:
    """An OpenAI-compatible test server on 127.0.0.1 (`tests.model_server`), one a module."""
    with model_server() as s:
        yield s


@pytest.fixture
def server(running_server: ModelServer) -> ModelServer:
    """The module's model server with an empty script and no requests seen (a module may
    define its own `server`, which then wins)."""
    running_server.reset()
    return running_server
