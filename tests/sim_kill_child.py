"""A run that kills its own process (SIGKILL) just before its Nth journal write, for
`tests/test_simulate_faithful.py`:

    python tests/sim_kill_child.py DB N

What the journal holds afterwards is what a real kill at that point leaves; the test
compares it with what `fsm_agent.simulation.crash.SimStore` leaves in-process.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from fsm_agent import ScriptedModel, load_tools, run
from fsm_agent.stores.sqlite import SqliteStore

#: A miss, a hit (each a read whose result may wait for the next commit), then the answer.
SCRIPT = [
    {"tool_call": {"name": "lookup", "args": {"q": "again"}}},
    {"tool_call": {"name": "lookup", "args": {"q": "lab password"}}},
    {"answer": "swordfish"},
]
TOOLS = "fsm_agent.examples.halt_lab.tools"
WRITES = ("start_run", "append", "append_many", "finish_run", "mark_run", "claim_run")


class DyingStore(SqliteStore):
    """A journal whose process is killed just before its `die_at`th write."""

    die_at = 0
    writes = 0
    inside = False  # in a write (`append` is made of `append_many`: one write, not two)

    def __getattribute__(self, name: str) -> Any:
        found = super().__getattribute__(name)
        if name not in WRITES or DyingStore.inside:
            return found

        def write(*args: Any, **kwargs: Any) -> Any:
            DyingStore.writes += 1
            if DyingStore.writes >= DyingStore.die_at:
                os.kill(os.getpid(), signal.SIGKILL)
            DyingStore.inside = True
            try:
                return found(*args, **kwargs)
            finally:
                DyingStore.inside = False

        return write


def main() -> None:
    db, n = sys.argv[1], int(sys.argv[2])
    DyingStore.die_at = n
    store = DyingStore(db)
    run("agent_loop", task="Find the lab password", model=ScriptedModel(SCRIPT),
        tools=load_tools(TOOLS),
        allow=("lookup", "slow_lookup", "hang"),
        store=store, run_id="killed")  # fmt: skip
    sys.exit(0)  # the run ended before its Nth write


if __name__ == "__main__":
    main()
