"""The fsm-agent benchmark (issue 3): the runtime against its floor and its peers, one run.

From the repository root, with the project installed (`pip install -e '.[test]'`; add
`'.[bench]'` for the peers):

    python -m tests.bench.run            # full run: N=2,000, 15 rounds, 3-4 minutes
    python -m tests.bench.run --smoke    # tiny N, 1 round, a few seconds (CI)

Options: `--n N` transitions a run, `--rounds R`, `--long N` transitions of the long run
(replay read-back and peak RSS; default 10,000), `--overshoot-runs K` (default 20, spread
over the rounds), `--case NAME` (repeatable; only these cases), `--workdir DIR` (where the
fresh journal files go; default the system temp dir — put it on a real disk, since fsync on
tmpfs costs nothing) and `--json PATH` (default `<tempdir>/fsm-agent-bench/results.json`,
`results-smoke.json` with `--smoke`; outside the repository so a run never dirties it).

The cases (all on the agent loop of `workload.py`, a fresh WAL journal file a run):
`floor` and `floor-full` (raw sqlite3 INSERT + COMMIT per event, synchronous NORMAL /
FULL); `naive` (`transitions.Machine` + the same insert); `fsm-agent` and
`fsm-agent-durable` (`fsm_agent.run` on `agent_loop`, store NORMAL / FULL; µs = elapsed /
events in the journal, halt record included); `replay` (`SqliteStore.events` of the long
run); `overshoot` (a hung tool under a 200 ms wall clock); `startup` (fresh processes);
`long-run` (peak RSS and journal bytes, in a child process); the peers `langgraph` and
`burr` (µs per step; skipped unless the `bench` extra is installed); `queue-sqlite` and
`queue-postgres` (aggregate transitions per second of 1, 2 and 4 `fsm-agent worker`
processes on one journal, measured in 5 of the rounds; PostgreSQL only with a DSN in
FSM_AGENT_BENCH_PG or FSM_AGENT_TEST_PG; see `workers.py`).

Every case runs in this one process, interleaved round by round — forward on even rounds,
backward on odd ones (A B … B A), after a warm-up round at small sizes whose figures are
discarded. The table shows medians, the max, the spread (max/min) and ratios against the
baselines measured in the same run, paired by round; then the issue's targets as a
checklist. Absolute times on a shared machine are noise; the ratios are the result. The
exit status is 0 whatever the figures (a missed target is not a failure); non-zero only if
a case could not run or ended wrongly.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from tests.bench import processes, runtime
from tests.bench.cases import CASES, METRICS, TARGETS, WORKER_CASES, Case, Measured, Plan
from tests.bench.report import Samples, render_table, render_targets, to_json
from tests.bench.workload import Scratch, Workload, filesystem_of


@dataclass(frozen=True)
class Settings:
    transitions: int
    rounds: int
    long: int
    overshoot_runs: int
    startup_repeats: int
    smoke: bool
    #: worker scaling: runs submitted per measurement, model calls per run, and in how many
    #: of the rounds it is measured (spread evenly; each costs seconds of process start-up)
    worker_runs: int = 80
    worker_steps: int = 10
    worker_rounds: int = 5


FULL = Settings(
    transitions=2000, rounds=15, long=10_000, overshoot_runs=20, startup_repeats=3, smoke=False
)
SMOKE = Settings(
    transitions=60, rounds=1, long=300, overshoot_runs=2, startup_repeats=1, smoke=True,
    worker_runs=8, worker_steps=2, worker_rounds=1,
)  # fmt: skip


# --- scheduling -----------------------------------------------------------------------------


def _note(text: str, end: str = "\n") -> None:
    print(text, end=end, file=sys.stderr, flush=True)


def _share(total: int, rounds: int, index: int) -> int:
    """Round `index`'s part of `total` runs spread over `rounds` rounds."""
    return total // rounds + (1 if index < total % rounds else 0)


def _run_round(cases: Sequence[Case], plan: Plan, label: str) -> Measured:
    _note(f"{label}:", end="")
    measured: Measured = {}
    for case in cases:
        if plan.overshoot_runs == 0 and case.name == "overshoot":
            continue
        if plan.worker_runs == 0 and case.name in WORKER_CASES:
            continue
        _note(f" {case.name}", end="")
        for metric, values in case.measure(plan).items():
            measured.setdefault(metric, []).extend(values)
    _note("")
    return measured


def measure_all(cases: Sequence[Case], settings: Settings, scratch: Scratch) -> dict[str, Samples]:
    """Warm up, then run every case once per round, alternating the order."""
    selected = {metric for case in cases for metric in case.metrics}
    table = {
        m.name: Samples(m, [[] for _ in range(settings.rounds)])
        for m in METRICS
        if m.name in selected
    }
    runnable = []
    for case in cases:
        reason = case.skip()
        if reason is None:
            runnable.append(case)
        for metric in case.metrics:
            table[metric].skipped = reason
    replay = None
    if any(c.name == "replay" for c in runnable):
        _note(f"preparing the replay journal ({settings.long:,} transitions) ...")
        replay = runtime.make_replay_journal(Workload.of(settings.long), scratch)
    small = Workload.of(min(settings.transitions, 300))
    warm = Plan(small, Workload.of(min(settings.long, 300)), 1, 1, scratch, replay)
    _run_round(runnable, warm, "warm-up")
    every = max(1, settings.rounds // max(1, settings.worker_rounds))
    for index in range(settings.rounds):
        scaling = index % every == 0 and index // every < settings.worker_rounds
        plan = Plan(
            workload=Workload.of(settings.transitions),
            long=Workload.of(settings.long),
            overshoot_runs=_share(settings.overshoot_runs, settings.rounds, index),
            startup_repeats=settings.startup_repeats,
            scratch=scratch,
            replay=replay,
            worker_runs=settings.worker_runs if scaling else 0,
            worker_steps=settings.worker_steps,
        )
        order = runnable if index % 2 == 0 else runnable[::-1]
        measured = _run_round(order, plan, f"round {index + 1}/{settings.rounds}")
        for metric, values in measured.items():
            table[metric].rounds[index] = values
    return table


# --- context --------------------------------------------------------------------------------


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    """Read-only git facts about the checkout measured (None without git)."""
    try:
        out = subprocess.run(
            ["git", "--no-optional-locks", *args],
            cwd=processes.REPO_ROOT, capture_output=True, text=True, check=True, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def checkout() -> dict[str, Any]:
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": _git("rev-parse", "--short=12", "HEAD"), "modified": bool(status)}


def header(settings: Settings, scratch: Scratch) -> dict[str, Any]:
    dists = (
        "fsm-agent", "transitions", "attrs", "cattrs", "sqlite-utils",
        "langgraph", "langgraph-checkpoint-sqlite", "burr", "apache-burr",
    )  # fmt: skip
    return {
        "format": "fsm-agent/bench/1",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.machine(),
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "implementation": platform.python_implementation(),
            "sqlite": sqlite3.sqlite_version,
            "workdir": str(scratch.root),
            "workdir_filesystem": filesystem_of(scratch.root),
        },
        "checkout": checkout(),
        "packages": {d: _version(d) for d in dists},
        "settings": asdict(settings),
        "workload": {
            "transitions": Workload.of(settings.transitions).transitions,
            "events": Workload.of(settings.transitions).events,
            "long_transitions": Workload.of(settings.long).transitions,
        },
    }


# --- command line ---------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> tuple[Settings, list[Case], Path, str | None]:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.run", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--smoke", action="store_true", help="tiny N, 1 round (CI)")
    parser.add_argument("--n", type=int, help="transitions a run (default 2000)")
    parser.add_argument("--rounds", type=int, help="measured rounds (default 15)")
    parser.add_argument("--long", type=int, help="transitions of the long run (default 10000)")
    parser.add_argument("--overshoot-runs", type=int, help="overshoot runs in all (default 20)")
    parser.add_argument(
        "--case",
        action="append",
        choices=[c.name for c in CASES],
        metavar="CASE",
        help=f"run only this case (repeatable): {', '.join(c.name for c in CASES)}",
    )
    parser.add_argument("--workdir", help="directory for the fresh journal files")
    parser.add_argument("--json", type=Path, help="where to write the results")
    opts = parser.parse_args(argv)
    settings = SMOKE if opts.smoke else FULL
    overrides = {
        "transitions": opts.n,
        "rounds": opts.rounds,
        "long": opts.long,
        "overshoot_runs": opts.overshoot_runs,
    }
    settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})
    if min(settings.transitions, settings.rounds, settings.long) < 1:
        parser.error("--n, --rounds and --long must be at least 1")
    cases = [c for c in CASES if opts.case is None or c.name in opts.case]
    name = "results-smoke.json" if settings.smoke else "results.json"
    default = Path(tempfile.gettempdir()) / "fsm-agent-bench" / name
    return settings, cases, opts.json or default, opts.workdir


def main(argv: Sequence[str] | None = None) -> int:
    settings, cases, json_path, workdir = parse_args(argv)
    scratch = Scratch(workdir)
    began = time.perf_counter()
    try:
        info = header(settings, scratch)
        table = measure_all(cases, settings, scratch)
    finally:
        runtime.release_hung_tools()
        scratch.close()
    info["seconds"] = round(time.perf_counter() - began, 1)
    machine, work, repo = info["machine"], info["workload"], info["checkout"]
    dirty = " + local changes" if repo["modified"] else ""
    print(
        f"fsm-agent bench{' (smoke: figures not meaningful)' if settings.smoke else ''} "
        f"at {repo['commit'] or 'unknown commit'}{dirty}: "
        f"{work['transitions']:,} transitions a run, {settings.rounds} round(s) after a "
        f"warm-up, long run {work['long_transitions']:,}; python {machine['python']}, "
        f"sqlite {machine['sqlite']}, {machine['cpus']} cpus, journals on "
        f"{machine['workdir_filesystem']}; {info['seconds']} s"
    )
    print()
    print(render_table(table))
    print()
    print("targets (ratios from this run):")
    print(render_targets(TARGETS, table))
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(
        json.dumps(to_json(table, TARGETS, info), indent=2, ensure_ascii=False) + "\n", "utf-8"
    )
    print(f"\nresults: {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
