"""The `fsm-agent simulate` benchmark: simulated runs per second of the canonical machine,
with and without crashes, against a baseline measured in the same process.

From the repository root, with the project installed:

    python -m tests.bench.simulate             # 10,000 runs a case, about a minute or two
    python -m tests.bench.simulate --smoke     # 200 runs a case, seconds

Options: `--runs N` (simulated runs a case, over all rounds), `--baseline-runs N` (default
1,000), `--rounds R` (default 5: every case once a round, interleaved, so a machine whose
load changes meanwhile skews every case alike),
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

Each simulated case prints its median runs per second, the time 10,000 runs take at that
rate (target: well under a minute on one core; the verdict asks for under half) and its
median ratio to the baseline's runs per second in the same round (a simulated run checks
its journal too: replay, chain, receipts, re-issues).
"""

from __future__ import annotations

import argparse
import json
import statistics
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
                             allow=tools.names(), store=store, handle_signals=False,
                             run_id=f"b-{i}")  # fmt: skip
                assert record.halt_reason.value == "completed", record.halt_reason
            return runs / (time.perf_counter() - started)
        finally:
            store.close()


def simulated(tools: str, runs: int, crash: bool, seed: int) -> float:
    """Runs per second of a simulation (checks included)."""
    summary = simulate(load_machine(MACHINE), load_tools(tools), runs=runs, seed=seed,
                       crash="random" if crash else None)  # fmt: skip
    if summary.failures:
        raise SystemExit(f"{tools}: {len(summary.failures)} runs broke an invariant")
    return summary.runs_per_s


CASES = [(name + ("+crash" if crash else ""), module, crash)
         for name, module in TOOLS.items() for crash in (False, True)]  # fmt: skip


def measure(runs: int, base_runs: int, rounds: int, workdir: str | None) -> dict[str, Any]:
    """Every case once a round, the baseline first, forward on even rounds and backward on
    odd ones; per round, each case's runs/s and its ratio to that round's baseline."""
    rates: dict[str, list[float]] = {"baseline": []}
    ratios: dict[str, list[float]] = {}
    for r in range(rounds):
        base = baseline(base_runs // rounds, workdir)
        rates["baseline"].append(base)
        for case, module, crash in CASES if r % 2 == 0 else CASES[::-1]:
            rate = simulated(module, runs // rounds, crash, seed=r)
            rates.setdefault(case, []).append(rate)
            ratios.setdefault(case, []).append(rate / base)
    return {"rates": rates, "ratios": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.simulate")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--baseline-runs", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--json", dest="json_path", default=None)
    args = parser.parse_args()
    runs, base_runs, rounds = (
        (200, 100, 1) if args.smoke else (args.runs, args.baseline_runs, args.rounds)
    )
    simulate(load_machine(MACHINE), load_tools(TOOLS["halt_lab"]), runs=20, seed=0)  # warm-up
    found = measure(runs, base_runs, rounds, args.workdir)
    rates, ratios = found["rates"], found["ratios"]
    print(f"{rounds} round(s); medians; a case's ratio is paired with its round's baseline")
    print(f"{'CASE':<24} {'RUNS':>7} {'RUNS/S':>9} {'10k RUNS':>9} {'VS BASELINE':>12}")
    base = statistics.median(rates["baseline"])
    name = "baseline (run, scripted)"
    print(f"{name:<24} {base_runs:>7} {base:>9.0f} {1e4 / base:>8.1f}s {1:>11.2f}x")
    for case, _, _ in CASES:
        rate, ratio = statistics.median(rates[case]), statistics.median(ratios[case])
        print(f"{case:<24} {runs:>7} {rate:>9.0f} {1e4 / rate:>8.1f}s {ratio:>11.2f}x")
    worst = min(statistics.median(rates[c]) for c, _, _ in CASES)
    verdict = "met" if 1e4 / worst < TARGET_S / 2 else "NOT met"
    print(f"target: 10,000 runs well under {TARGET_S:.0f} s (here: under half): {verdict};"
          f" slowest case {1e4 / worst:.1f} s")  # fmt: skip
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(found, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
