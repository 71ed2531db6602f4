"""`python -m examples.<name>`: run one example's scenarios in a temporary directory.

Each run is journaled to a fresh SQLite file and leaves its halt record beside it; a table
shows how each one halted. Exit code 0 only when every run halted as expected.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from fsm_agent import HaltRecord
from fsm_agent.examples.scenarios import Scenario, run_scenario, scenarios_of
from fsm_agent.stores.sqlite import SqliteStore

_ROW = "{:<32}  {:<16}  {:<18}  {:>5}  {:>5}  {:<22}  {}"


def format_row(scenario: Scenario, record: HaltRecord) -> str:
    """One table line: how the run halted, and whether that is the expected halt."""
    ok = record.halt_reason is scenario.expected
    answer = record.answer if record.answer is not None else "-"
    return _ROW.format(
        scenario.name,
        record.terminal_state,
        record.halt_reason.value,
        f"{record.steps_used}/{record.max_steps}",
        len(record.tool_calls),
        answer if len(answer) <= 22 else answer[:21] + "…",
        "yes" if ok else f"NO (expected {scenario.expected.value})",
    )


def main(example: str) -> int:
    """Run every scenario of `example`, print the table; 0 when each halted as expected."""
    scenarios = scenarios_of(example)
    if not scenarios:
        print(f"no scenarios for example {example!r}")
        return 2
    wrong = 0
    with tempfile.TemporaryDirectory(prefix=f"fsm-agent-{example}-") as tmp:
        folder = Path(tmp)
        store = SqliteStore(folder / "journal.db")
        try:
            print(_ROW.format("SCENARIO", "STATE", "HALT REASON", "STEPS", "TOOLS", "ANSWER", "OK"))
            for scenario in scenarios:
                record = run_scenario(
                    scenario, store=store, record_path=folder / f"{scenario.name}.json"
                )
                wrong += record.halt_reason is not scenario.expected
                print(format_row(scenario, record), flush=True)
        finally:
            store.close()
    print(f"{len(scenarios)} scenarios, {wrong} unexpected halts")
    return 1 if wrong else 0
