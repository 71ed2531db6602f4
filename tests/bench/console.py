"""The console's run list on a journal of 100,000 runs: how long a page takes, first and
deep, filtered and not, against a plain `SELECT * FROM runs LIMIT 50` on the same table.

From the repository root, with the project installed:

    python -m tests.bench.console                # 100,000 runs, 15 rounds
    python -m tests.bench.console --smoke        # 2,000 runs, 3 rounds (seconds)

Options: `--runs N`, `--rounds R`, `--workdir DIR` (where the journal file goes; default
the system temp dir), `--json PATH` (the figures as JSON).

The journal is built fast but realistic: six real runs of the agent loop (completed,
max_steps, a handoff, with tool calls and receipts) are journaled by `fsm_agent.run`, and
their rows (the `runs` row, its events and its record, as the store wrote them) are cloned
under new ids, machines (four names), tasks and start times spread over 30 days, in one
transaction; 1% are left `running` with an owner that is gone (the console shows them
`interrupted`). The clones' hash chains are not recomputed (nothing here verifies them).

Each case is what the console runs for one page (`fsm_agent.console.queries.run_page`:
the store's keyset query, 51 rows read and decoded into `RunRow`s; the `rows only` cases
run the same query without decoding, to tell the two costs apart), measured in every
round, in a shuffled order each round; the table shows the median and max in ms and the
median ratio to the baseline of the same round. `deep` pages start at the run 99% of the
way down the list (its cursor, as the next-page link carries it). `offset` is the same deep
page read with OFFSET instead of a cursor, for comparison (the console never does that).
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import socket
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fsm_agent import ScriptedModel, load_tools, run
from fsm_agent.console.queries import RunFilters, run_page
from fsm_agent.halt import HaltReason
from fsm_agent.stores import codec
from fsm_agent.stores.run_lookup import runs_query
from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.stores.sqlite_schema import INSERT_DECLARATION, INSERT_EVENT, INSERT_RUN

MACHINES = ("agent_loop", "payments_retry", "halt_lab", "support_triage")
WORDS = ("refund window", "lab password", "invoice 4471", "shipping delay", "reset token")
LOOKUP = {"tool_call": {"name": "lookup", "args": {"q": "lab password"}}}
MISS = {"tool_call": {"name": "lookup", "args": {"q": "again"}}}
#: The templates: (replies, budgets) of six real runs.
SCRIPTS: tuple[tuple[list[Any], dict[str, int]], ...] = (
    ([LOOKUP, {"answer": "swordfish"}], {}),
    ([MISS, LOOKUP, {"answer": "swordfish"}], {}),
    ([MISS, MISS, MISS], {"max_steps": 2}),
    ([MISS] * 9, {"max_steps": 8}),
    ([{"handoff": {"why": "a person decides"}}], {}),
    (["not json at all", "still not", "nope"], {}),
)
# Column positions in INSERT_RUN's parameters.
_ID, _MACHINE, _TASK, _STATUS, _REASON, _STARTED, _ENDED, _RECORD = 0, 1, 4, 7, 8, 10, 11, 12
_PID, _HOST, _RECORD_HASH, _HEAD_HASH, _HEAD_SEQ = 13, 14, 16, 17, 18
PAGE = 50


def _templates(work: Path) -> tuple[list[tuple[tuple[Any, ...], list[tuple[Any, ...]]]], Any]:
    """The six real runs' row and event parameters (as `import_run` writes them)."""
    db = work / "templates.db"
    for i, (replies, budgets) in enumerate(SCRIPTS):
        run("agent_loop", task="Find the lab password", model=ScriptedModel(replies),
            tools=load_tools("fsm_agent.examples.halt_lab.tools"), allow=("lookup",), store=db,
            budgets=budgets, record_path=work / f"r{i}.json", run_id=f"template-{i}",
            handle_signals=False)  # fmt: skip
    store = SqliteStore(db)
    try:
        out = []
        for i in range(len(SCRIPTS)):
            r, events = store.get_run(f"template-{i}"), store.events(f"template-{i}")
            out.append(codec.import_params(r, events, r.record, store._error))
        return out, codec.declared_row(store.get_run("template-0"))
    finally:
        store.close()


def _stamp(start: datetime.datetime, n: int, total: int) -> str:
    moment = start + datetime.timedelta(seconds=30 * 86400 * n / total)
    return moment.isoformat(timespec="milliseconds")


def build(path: Path, runs: int, work: Path) -> None:
    """A journal of `runs` runs at `path` (see the module docstring)."""
    templates, declaration = _templates(work)
    rng = random.Random(20)  # noqa: S311 - a benchmark's data, not a secret
    start = datetime.datetime(2026, 10, 1, tzinfo=datetime.UTC)
    store = SqliteStore(path)
    try:
        conn = store.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(INSERT_DECLARATION, declaration)
        rows, events = [], []
        for n in range(runs):
            row, evs = templates[n % len(templates)]
            rid = f"r{n:07d}{rng.randrange(16**4):04x}"
            # every 1000th run starts at the same millisecond as the one before (ties)
            at = _stamp(start, n - (n % 1000 == 1), runs)
            new = list(row)
            new[_ID], new[_MACHINE], new[_STARTED] = rid, MACHINES[n % 4], at
            new[_TASK] = f"{WORDS[rng.randrange(len(WORDS))]}: ticket {n}"
            if new[_ENDED] is not None:
                new[_ENDED] = at
            if n % 100 == 7:  # cut off: its process is gone
                new[_STATUS], new[_REASON], new[_ENDED], new[_RECORD] = "running", *(None,) * 3
                new[_PID], new[_HOST] = 2**22 + 1, socket.gethostname()  # past pid_max
                new[_RECORD_HASH] = new[_HEAD_HASH] = new[_HEAD_SEQ] = None
            rows.append(tuple(new))
            events += [(rid, *e[1:]) for e in evs]
        conn.executemany(INSERT_RUN, rows)
        conn.executemany(INSERT_EVENT, events)
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
    finally:
        store.close()


def _page_sql(store: SqliteStore, before: tuple[str, str] | None) -> tuple[str, dict[str, Any]]:
    """The store's own query for a page (51 rows), to time it without decoding the rows."""
    return runs_query(store.SELECT_RUNS_FOR_LIST, store._placeholder, PAGE + 1, {}, before)


def cases(store: SqliteStore, runs: int) -> dict[str, Callable[[], int]]:
    """Each case reads one page; it returns how many runs it read."""
    deep_at = int(runs * 0.99)
    conn = store.conn
    cursor_row = conn.execute(
        "SELECT started_at, run_id FROM runs ORDER BY started_at DESC, run_id DESC"
        " LIMIT 1 OFFSET ?",
        (deep_at,),
    ).fetchone()
    deep = (cursor_row[0], cursor_row[1])
    machine_deep = conn.execute(
        "SELECT started_at, run_id FROM runs WHERE machine = ?"
        " ORDER BY started_at DESC, run_id DESC LIMIT 1 OFFSET ?",
        (MACHINES[1], deep_at // 4),
    ).fetchone()

    def page(f: RunFilters, cursor: tuple[str, str] | None = None) -> Callable[[], int]:
        return lambda: len(run_page(store, f, cursor).runs)

    window = RunFilters(since=_stamp(datetime.datetime(2026, 10, 1, tzinfo=datetime.UTC),
                                     runs // 2, runs),
                        until=_stamp(datetime.datetime(2026, 10, 1, tzinfo=datetime.UTC),
                                     runs // 2 + runs // 30, runs))  # fmt: skip
    return {
        "baseline: SELECT * FROM runs LIMIT 50": lambda: len(
            conn.execute("SELECT * FROM runs LIMIT 50").fetchall()
        ),
        "first page": page(RunFilters()),
        "first page, rows only (no decoding)": lambda: len(
            conn.execute(*_page_sql(store, None)).fetchall()
        ),
        "deep page, rows only (no decoding)": lambda: len(
            conn.execute(*_page_sql(store, deep)).fetchall()
        ),
        "deep page (99%)": page(RunFilters(), deep),
        "offset: deep page by OFFSET": lambda: len(
            conn.execute(
                "SELECT * FROM runs ORDER BY started_at DESC, run_id DESC LIMIT 50 OFFSET ?",
                (deep_at,),
            ).fetchall()
        ),
        "machine": page(RunFilters(machine=MACHINES[1])),
        "machine, deep page": page(
            RunFilters(machine=MACHINES[1]), (machine_deep[0], machine_deep[1])
        ),
        "halt reason max_steps": page(RunFilters(halt_reason=HaltReason.MAX_STEPS)),
        "status halted": page(RunFilters(status="halted")),
        "status interrupted": page(RunFilters(status="interrupted")),
        "time range (1 day)": page(window),
        "task text (common)": page(RunFilters(text="refund")),
        "task text (rare: 1 run)": page(RunFilters(text=f"ticket {runs // 3}:")),
        "machine + halt + text": page(
            RunFilters(machine=MACHINES[2], halt_reason=HaltReason.COMPLETED, text="invoice")
        ),
    }


def measure(run_cases: dict[str, Callable[[], int]], rounds: int) -> dict[str, list[float]]:
    """Each case's ms per round; a warm-up round first, not counted."""
    samples: dict[str, list[float]] = {name: [] for name in run_cases}
    order = list(run_cases)
    rng = random.Random(7)  # noqa: S311 - an order, not a secret
    for name in order:
        run_cases[name]()
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            t0 = time.perf_counter()
            run_cases[name]()
            samples[name].append((time.perf_counter() - t0) * 1000)
    return samples


def report(samples: dict[str, list[float]], runs: int) -> tuple[str, dict[str, Any]]:
    base_name = next(iter(samples))
    base = samples[base_name]
    first = statistics.median(samples["first page"])
    lines = [f"console run list, {runs:,} runs, {len(base)} rounds (ms; ratio to the baseline"
             " of the same round; x first: median over the first page's)",
             f"{'case':<38} {'median':>8} {'max':>8} {'x base':>8} {'x first':>8}"]  # fmt: skip
    data: dict[str, Any] = {"runs": runs, "rounds": len(base), "cases": {}}
    for name, ms in samples.items():
        med = statistics.median(ms)
        ratio = statistics.median(m / b for m, b in zip(ms, base, strict=True))
        lines.append(f"{name:<38} {med:>8.3f} {max(ms):>8.3f} {ratio:>8.1f} {med / first:>8.2f}")
        data["cases"][name] = {"median_ms": med, "max_ms": max(ms), "x_baseline": ratio,
                               "x_first_page": med / first}  # fmt: skip
    return "\n".join(lines), data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.console")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--json", dest="json_path", default=None)
    opts = parser.parse_args(argv)
    runs = opts.runs or (2000 if opts.smoke else 100_000)
    rounds = opts.rounds or (3 if opts.smoke else 15)
    with tempfile.TemporaryDirectory(prefix="fsm-agent-console-bench-", dir=opts.workdir) as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        build(work / "journal.db", runs, work)
        print(f"built {runs:,} runs in {time.perf_counter() - t0:.1f} s", flush=True)
        store = SqliteStore(work / "journal.db", read_only=True)
        try:
            text, data = report(measure(cases(store, runs), rounds), runs)
        finally:
            store.close()
    print(text)
    if opts.json_path:
        Path(opts.json_path).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
