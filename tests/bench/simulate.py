"""The `fsm-agent simulate` benchmark: simulated runs per second of the canonical machine,
with and without crashes, against a baseline measured in the same process.

From the repository root, with the project installed:

    python -m tests.bench.simulate             # 10,000 runs a case, about a minute or two
    python -m tests.bench.simulate --smoke     # 200 runs a case, seconds

Options: `--runs N` (simulated runs a case), `--baseline-runs N` (default 1,000),
`--workdir DIR` (where the baseline's journal file goes; default the system temp dir: put
it on a real disk) and `--json PATH` (the figures, for a record).

The cases (all `agent_loop`, each simulated run checked against every invariant, as
`fsm-agent simulate` does; the simulation's journal is a SQLite file on /dev/shm where
there is one, as the command's default):

- `baseline`: `fsm_agent.run` with a `ScriptedModel` (a lookup that hits, then its
  answer), the real halt-lab tools, a normal SQLite journal file; runs per second.
- `halt_lab`, `halt_lab+crash`: `simulate` with the halt-lab tools, no crash / a crash
  at a random journal write followed by resume.
- `stop_conditions`, `stop_conditions+crash`: the same with the stop-conditions tools.

Each simulated case prints its runs per second, the time 10,000 runs take at that rate
(target: well under a minute on one core) and its ratio to the baseline's runs per second
(a simulated run checks its journal too: replay, chain, receipts, re-issues).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from fsm_agent.adapters.models import ScriptedModel
from fsm_agent.declaration.load import load_machine
from fsm_agent.runtime.tools import load_tools
from fsm_agent.runtime.worker import run
from fsm_agent.simulation.session import simulate
from fsm_agent.stores.sqlite import SqliteStore

MACHINE = "agent_loop"
TOOLS = {
    "halt_lab": "fsm_agent.examples.halt_lab.tools",
    "stop_conditions": "fsm_agent.examples.stop_conditions.tools",
}
#: The target: 10,000 runs in well under this many seconds.
TARGET_S = 60.0
SCRIPT = [{"tool_call": {"name": "lookup", "args": {"q": "lab password"}}},
          {"answer": "swordfish"}]  # fmt: skip


def baseline(runs: int, workdir: str | None) -> float:
    """Runs per second of plain `fsm_agent.run` on a normal SQLite journal file."""
    spec = load_machine(MACHINE)
    tools = load_tools(TOOLS["halt_lab"])
    with tempfile.TemporaryDirectory(prefix="fsm-agent-bench-sim-", dir=workdir) as tmp:
        store = SqliteStore(Path(tmp) / "baseline.db")
        try:
            started = time.perf_counter()
            for i in range(runs):
                record = run(spec, task="bench", model=ScriptedModel(SCRIPT), tools=tools,
                             store=store, handle_signals=False, run_id=f"b-{i}")  # fmt: skip
                assert record.halt_reason.value == "completed", record.halt_reason
            return runs / (time.perf_counter() - started)
        finally:
            store.close()


def simulated(tools: str, runs: int, crash: bool) -> tuple[float, dict[str, int]]:
    """Runs per second of a simulation (checks included), and its halts."""
    summary = simulate(load_machine(MACHINE), load_tools(tools), runs=runs, seed=1,
                       crash="random" if crash else None)  # fmt: skip
    if summary.failures:
        raise SystemExit(f"{tools}: {len(summary.failures)} runs broke an invariant")
    return summary.runs_per_s, summary.halts


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.simulate")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--baseline-runs", type=int, default=1_000)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args()
    runs, base_runs = (200, 100) if args.smoke else (args.runs, args.baseline_runs)
    simulate(load_machine(MACHINE), load_tools(TOOLS["halt_lab"]), runs=20, seed=0)  # warm-up
    base = baseline(base_runs, args.workdir)
    rows: list[dict[str, Any]] = [{"case": "baseline", "runs": base_runs, "runs_per_s": base}]
    print(f"{'CASE':<24} {'RUNS':>7} {'RUNS/S':>9} {'10k RUNS':>9} {'VS BASELINE':>12}")
    name = "baseline (run, scripted)"
    print(f"{name:<24} {base_runs:>7} {base:>9.0f} {1e4 / base:>8.1f}s {1:>11.2f}x")
    for name, module in TOOLS.items():
        for crash in (False, True):
            rate, halts = simulated(module, runs, crash)
            case = name + ("+crash" if crash else "")
            rows.append({"case": case, "runs": runs, "runs_per_s": rate, "halts": halts})
            print(f"{case:<24} {runs:>7} {rate:>9.0f} {1e4 / rate:>8.1f}s {rate / base:>11.2f}x")
    worst = min(r["runs_per_s"] for r in rows[1:])
    verdict = "met" if 1e4 / worst < TARGET_S / 2 else "NOT met"
    print(f"target: 10,000 runs well under {TARGET_S:.0f} s (here: under half): {verdict};"
          f" slowest case {1e4 / worst:.1f} s")  # fmt: skip
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
