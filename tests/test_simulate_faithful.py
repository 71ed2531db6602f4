"""A simulated crash leaves the journal a real one does: a child process running the same
run is SIGKILLed just before its Nth journal write (`tests/sim_kill_child.py`), and the
events it left are compared with those `SimStore(crash_at=N)` leaves in-process — the
same committed prefix, the deferred read results lost with it. Then both are resumed, by
`fsm-agent resume` in a fresh process and by `resume_run` in this one, to the same halt."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fsm_agent import ScriptedModel, load_tools, run
from fsm_agent.journal.store import Event
from fsm_agent.runtime.worker import resume_run
from fsm_agent.simulation.clock import VirtualClock
from fsm_agent.simulation.crash import SimStore, SimulatedCrash
from fsm_agent.stores.sqlite import SqliteStore
from tests.lab import LAB_ALLOW
from tests.sim_kill_child import SCRIPT, TOOLS

REPO = Path(__file__).resolve().parent.parent
CHILD = REPO / "tests" / "sim_kill_child.py"
#: The journal writes of the child's run when nothing kills it.
WRITES_IN_ALL = 7


def shape(events: list[Event]) -> list[tuple[Any, ...]]:
    """What a crash decides about a journal: which events, with which outcome."""
    return [
        (e.seq, e.kind, e.source, e.dest, e.trigger, e.halt,
         None if e.facts is None or e.facts.tool is None else e.facts.tool.status)
        for e in events
    ]  # fmt: skip


def simulated(db: Path, n: int) -> tuple[list[tuple[Any, ...]], str | None]:
    """The events a simulated crash at write `n` leaves, and the halt of its resume."""
    journal = SqliteStore(db)
    clock = VirtualClock()
    with contextlib.suppress(SimulatedCrash):  # the simulated process dies at write n
        run("agent_loop", task="Find the lab password", model=ScriptedModel(SCRIPT),
            tools=load_tools(TOOLS), allow=LAB_ALLOW, store=SimStore(journal, clock, n).as_store(),
            clock=clock, handle_signals=False, run_id="killed")  # fmt: skip
    if "killed" not in journal.run_ids():
        return [], None
    left = shape(journal.events("killed"))
    record = resume_run("killed", model=ScriptedModel(SCRIPT), tools=load_tools(TOOLS),
                        store=SimStore(journal, clock).as_store(), clock=clock,
                        handle_signals=False)  # fmt: skip
    return left, record.halt_reason.value


@pytest.mark.slow
@pytest.mark.parametrize("n", range(1, 9))
def test_a_simulated_crash_leaves_what_a_sigkill_leaves(tmp_path: Path, n: int) -> None:
    real_db = tmp_path / "real.db"
    child = subprocess.run([sys.executable, str(CHILD), str(real_db), str(n)], cwd=REPO,
                           capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    if n > WRITES_IN_ALL:  # the run ends before its nth write: nothing to kill
        assert child.returncode == 0, child.stderr
        return
    assert child.returncode == -signal.SIGKILL, child.stderr
    sim_left, sim_halt = simulated(tmp_path / "sim.db", n)
    real = SqliteStore(real_db)
    real_ids = real.run_ids()
    real.close()
    if not real_ids:
        assert sim_left == []
        return
    real_store = SqliteStore(real_db)
    real_left = shape(real_store.events("killed"))
    real_store.close()
    assert sim_left == real_left
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT), encoding="utf-8")
    resumed = subprocess.run(
        [sys.executable, "-m", "fsm_agent", "resume", "killed", "--db", str(real_db),
         "--model", f"scripted:{script}", "--tools", TOOLS, "--json",
         "--record", str(tmp_path / "record.json")],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert json.loads(resumed.stdout)["halt_reason"] == sim_halt, resumed.stderr
