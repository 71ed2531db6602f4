"""A real agent run in its own process, for the signal tests (`tests/test_signals.py`).

    python tests/child_run.py --via lib|cli --db DB --record RECORD --ready READY [--process]

The agent loops on `nap`, a tool that writes READY (holding its own pid) and then sleeps
30 s, so the run is mid-tool when the parent sends SIGTERM or SIGINT. `--via lib` calls
`fsm_agent.run` and exits with the documented code for the halt; `--via cli` runs the real
`fsm-agent run` command in this process. `--process` runs `nap` in a killable child process.
`--hang-in-callback` (with `--via lib`) gives the run an `on_transition` that writes READY
at the first transition and then never returns (the tool is never reached).
"""

from __future__ import annotations

import argparse
import os
import sys

from tests.lab import granted

RUN_ID = "child-run"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--via", choices=("lib", "cli"), required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--ready", required=True)
    parser.add_argument("--process", action="store_true")
    parser.add_argument("--hang-in-callback", action="store_true")
    opts = parser.parse_args()

    # Read by tests.fixture_tools.nap / new_tools (inherited by a spawned tool process).
    os.environ["FSM_AGENT_TEST_READY"] = opts.ready
    os.environ["FSM_AGENT_TEST_ISOLATION"] = "process" if opts.process else "thread"

    if opts.via == "cli":
        from fsm_agent.cli.main import main as cli_main

        sys.argv = [
            "fsm-agent", "run", "agent_loop", "--task", "nap until killed",
            "--model", "python:tests.fixture_tools:napping_model",
            "--tools", "tests.fixture_tools",
            "--allow", "nap",
            "--db", opts.db, "--record", opts.record,
            "--wall-clock-ms", "120000", "--tool-timeout-ms", "60000", "--quiet",
        ]  # fmt: skip
        cli_main()
        return

    import time
    from pathlib import Path

    from fsm_agent import Event, run
    from fsm_agent.halt import exit_code
    from tests.fixture_tools import napping_model, new_tools

    def hang(event: Event) -> None:
        if event.seq >= 1:
            Path(opts.ready).write_text(str(os.getpid()), encoding="utf-8")
            while True:
                time.sleep(3600)

    record = run(
        "agent_loop",
        task="nap until killed",
        model=napping_model,
        **granted(new_tools()),
        store=opts.db,
        budgets={"wall_clock_ms": 120_000, "tool_timeout_ms": 60_000},
        record_path=opts.record,
        run_id=RUN_ID,
        on_transition=hang if opts.hang_in_callback else None,
    )
    print(f"halted: {record.halt_reason.value}", flush=True)
    sys.exit(exit_code(record.halt_reason, record.signal))


if __name__ == "__main__":
    main()
