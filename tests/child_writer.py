"""One of several writer processes sharing one journal (`tests/test_concurrency.py`).

    python tests/child_writer.py --db DB --records DIR --worker N --runs K --ready R --go G

Imports everything, writes READY, waits for GO (so that every writer opens the journal,
which may not exist yet, at the same moment), then does K complete halt-lab runs, each
opening the journal by path as a caller of `fsm_agent.run` does. Prints one JSON line per
run: its id and how it halted. Any exception escapes: a traceback and a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Final

from fsm_agent import ScriptedModel, load_tools, run
from fsm_agent.halt import HaltReason

LOOKUP: Final = {"tool_call": {"name": "lookup", "args": {"q": "lab password"}}}
MISS: Final = {"tool_call": {"name": "lookup", "args": {"q": "again"}}}

#: Run n uses SCRIPTS[n % 3]: (replies, budget overrides, the halt it must end with).
SCRIPTS: Final[tuple[tuple[list[Any], dict[str, int], HaltReason], ...]] = (
    ([LOOKUP, {"answer": "swordfish"}], {}, HaltReason.COMPLETED),
    ([{"handoff": {"why": "a person decides"}}], {}, HaltReason.HANDOFF_REQUESTED),
    ([MISS, MISS, MISS], {"max_steps": 2}, HaltReason.MAX_STEPS),
)


def expected_halt(n: int) -> HaltReason:
    """How run number `n` of a writer must halt."""
    return SCRIPTS[n % len(SCRIPTS)][2]


def run_id(worker: int, n: int) -> str:
    return f"w{worker}-{n:03d}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--records", required=True)
    parser.add_argument("--worker", type=int, required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--ready", required=True)
    parser.add_argument("--go", required=True)
    opts = parser.parse_args()

    tools = load_tools("fsm_agent.examples.halt_lab.tools")
    Path(opts.ready).write_text("ready", encoding="utf-8")
    deadline = time.monotonic() + 60
    while not Path(opts.go).exists():
        if time.monotonic() > deadline:
            raise SystemExit("no go signal within 60 s")
        time.sleep(0.001)
    for n in range(opts.runs):
        replies, budgets, _ = SCRIPTS[n % len(SCRIPTS)]
        rid = run_id(opts.worker, n)
        record = run(
            "agent_loop",
            task=f"Find the lab password ({rid})",
            model=ScriptedModel(list(replies)),
            tools=tools,
            allow=tools.names(),
            store=opts.db,
            budgets=budgets,
            record_path=Path(opts.records) / f"{rid}.json",
            handle_signals=False,
            run_id=rid,
        )
        print(json.dumps({"run_id": rid, "halt": record.halt_reason.value}), flush=True)


if __name__ == "__main__":
    main()
