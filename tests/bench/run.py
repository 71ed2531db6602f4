"""The fsm-agent benchmark: the runtime against its floor and its peers, one run.

From the repository root, with the project installed (`pip install -e '.[test]'`; add
`'.[bench]'` for the peers):

    python -m tests.bench.run            # full run: N=2,000, 15 rounds, about 5 minutes
    python -m tests.bench.run --smoke    # tiny sizes, 1 round, seconds (CI)

Options: `--n N` transitions a run, `--rounds R`, `--long N` transitions of the replay
journal (default 10,000), `--sizes A,B,…` the scaling sizes (default
100,1000,10000,100000), `--overshoot-runs K` (default 20, spread over the rounds), `--case
NAME` (repeatable; only these cases), `--workdir DIR` (where the fresh journal files go;
default the system temp dir — put it on a real disk, since fsync on tmpfs costs nothing)
and `--json PATH` (default `<tempdir>/fsm-agent-bench/results.json`, `results-smoke.json`
with `--smoke`; outside the repository so a run never dirties it).

The cases (all on the agent loop of `workload.py`, a fresh WAL journal file a run):
`floor` and `floor-full` (raw sqlite3 INSERT + COMMIT per event, synchronous NORMAL /
FULL); `naive` (`transitions.Machine` + the same insert); `fsm-agent`, `fsm-agent-inline`
and `fsm-agent-durable` (`fsm_agent.run` on `agent_loop`, store NORMAL / FULL; µs =
elapsed / events in the journal); `fsm-agent-postgres` (the same on the PostgreSQL store,
one process); `replay` (`SqliteStore.events` + `replay_events` of the replay journal);
`overshoot` (a hung tool under a 200 ms wall clock); `startup` (fresh processes);
`scaling` (one run of each size in a child process: µs per transition, peak RSS, journal
bytes per transition; see `scaling.py`); `declarations` (how many times a journal stores
one declaration after 5 runs of it; see `declarations.py`); the peers `langgraph` and
`burr` (µs per step; skipped unless the `bench` extra is installed; see `peers.py` for
how a Burr step pairs with one of our transitions). The PostgreSQL case needs a DSN in
FSM_AGENT_BENCH_PG or FSM_AGENT_TEST_PG (`pg.py`). Workers on Temporal are measured by
`python -m tests.bench.temporal`.

Every case runs in this one process, interleaved round by round — forward on even rounds,
backward on odd ones (A B … B A), after a warm-up round at small sizes whose figures are
discarded (the warm-up runs no scaling case: those start fresh processes). A
few cases cost seconds a sample and are measured in fewer rounds, spread evenly over the
run: the scaling runs of 10,000 transitions in 5 rounds and of 100,000 in 3 (sizes up to
1,000 in every round), the PostgreSQL case in 5. The table shows medians, the
max, the spread (max/min) and ratios against the baselines measured in the same run,
paired by round; then the targets as a checklist (`checklist.py`), each with its figure
and its bound. Absolute times on a shared machine are noise; the ratios are the result.
The exit status is 0 whatever the figures (a missed target is not a failure); non-zero
only if a case could not run or ended wrongly.
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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tests.bench import checklist, processes, runtime, scaling
from tests.bench.cases import CASES, Case, Measured, Plan
from tests.bench.report import Samples, render_table, render_targets, to_json
from tests.bench.scaling import Scale
from tests.bench.workload import Scratch, Workload, filesystem_of


@dataclass(frozen=True)
class Settings:
    transitions: int
    rounds: int
    long: int
    overshoot_runs: int
    startup_repeats: int
    smoke: bool
    #: the scaling rows: sizes, in how many rounds each, and the size compared with
    scale: Scale = field(default_factory=lambda: Scale.of(scaling.SIZES))
    #: in how many of the rounds (spread evenly) the costly case is measured: the
    #: PostgreSQL store (ms a transition)
    sparse_rounds: int = 5


FULL = Settings(
    transitions=2000, rounds=15, long=10_000, overshoot_runs=20, startup_repeats=3, smoke=False
)
SMOKE = Settings(
    transitions=60, rounds=1, long=300, overshoot_runs=2, startup_repeats=1, smoke=True,
    scale=Scale.of((30, 100, 300)), sparse_rounds=1,
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
        if not case.wanted(plan):
            continue
        _note(f" {case.name}", end="")
        for metric, values in case.measure(plan).items():
            measured.setdefault(metric, []).extend(values)
    _note("")
    return measured


def _table(
    cases: Sequence[Case], settings: Settings, skipped: dict[str, str | None]
) -> dict[str, Samples]:
    """An empty table of the rows the cases fill, each skipped one with its reason."""
    selected = {metric for case in cases for metric in case.rows(settings.scale)}
    table = {
        m.name: Samples(m, [[] for _ in range(settings.rounds)])
        for m in checklist.metrics(settings.scale)
        if m.name in selected
    }
    for case in cases:
        for metric in case.rows(settings.scale):
            table[metric].skipped = skipped[case.name]
    return table


def measure_all(cases: Sequence[Case], settings: Settings, scratch: Scratch) -> dict[str, Samples]:
    """Warm up, then run every case once per round, alternating the order."""
    skipped = {case.name: case.skip() for case in cases}
    table = _table(cases, settings, skipped)
    runnable = [case for case in cases if skipped[case.name] is None]
    replay = None
    if any(c.name == "replay" for c in runnable):
        _note(f"preparing the replay journal ({settings.long:,} transitions) ...")
        replay = runtime.make_replay_journal(Workload.of(settings.long), scratch)
    small = Workload.of(min(settings.transitions, 300))
    warm = Plan(small, 1, 1, scratch, replay, sparse=True)
    _run_round(runnable, warm, "warm-up")
    for index in range(settings.rounds):
        sparse = scaling.spread(index, settings.rounds, settings.sparse_rounds)
        plan = Plan(
            workload=Workload.of(settings.transitions),
            overshoot_runs=_share(settings.overshoot_runs, settings.rounds, index),
            startup_repeats=settings.startup_repeats,
            scratch=scratch,
            replay=replay,
            sparse=sparse,
            scale_sizes=settings.scale.in_round(settings.rounds, index),
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
        "psycopg", "langgraph", "langgraph-checkpoint-sqlite", "burr", "apache-burr",
    )  # fmt: skip
    return {
        "format": "fsm-agent/bench/2",
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
            "scale_transitions": [Workload.of(s).transitions for s in settings.scale.sizes],
        },
    }


# --- command line ---------------------------------------------------------------------------


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of sizes: {text!r}") from None
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError("sizes are whole numbers of transitions, at least 1")
    return sizes


def parse_args(argv: Sequence[str] | None) -> tuple[Settings, list[Case], Path, str | None]:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.run", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 1 round (CI)")
    parser.add_argument("--n", type=int, help="transitions a run (default 2000)")
    parser.add_argument("--rounds", type=int, help="measured rounds (default 15)")
    parser.add_argument(
        "--long", type=int, help="transitions of the replay journal (default 10000)"
    )
    parser.add_argument(
        "--sizes",
        type=_sizes,
        help="scaling sizes, comma-separated (default 100,1000,10000,100000)",
    )
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
    if opts.sizes is not None:
        settings = replace(settings, scale=Scale.of(opts.sizes))
    if min(settings.transitions, settings.rounds, settings.long) < 1:
        parser.error("--n, --rounds and --long must be at least 1")
    cases = [c for c in CASES if opts.case is None or c.name in opts.case]
    name = "results-smoke.json" if settings.smoke else "results.json"
    default = Path(tempfile.gettempdir()) / "fsm-agent-bench" / name
    return settings, cases, opts.json or default, opts.workdir


def _scale_text(settings: Settings) -> str:
    """`100 (15) / 1,000 (15) / 10,000 (5) / 100,000 (3) transitions (rounds)`."""
    parts = []
    for size, times in zip(settings.scale.sizes, settings.scale.times, strict=True):
        n = settings.rounds if times is None else min(times, settings.rounds)
        parts.append(f"{size:,} ({n})")
    return " / ".join(parts) + " transitions (rounds)"


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
        f"warm-up, replay journal {work['long_transitions']:,}, scaling "
        f"{_scale_text(settings)}; python {machine['python']}, sqlite {machine['sqlite']}, "
        f"{machine['cpus']} cpus, journals on {machine['workdir_filesystem']}; "
        f"{info['seconds']} s"
    )
    print()
    print(render_table(table))
    print()
    print("targets (ratios from this run):")
    targets = checklist.targets(settings.scale)
    print(render_targets(targets, table))
    json_path.parent.mkdir(parents=True, exist_ok=True)
    results = to_json(table, targets, info)
    json_path.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", "utf-8")
    print(f"\nresults: {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
