"""A fork server for the crash tests (`tests/test_crash.py`): real processes, real signals.

    python tests/crash_child.py DB RECORDS_DIR

It imports fsm-agent once, then reads commands on stdin, one per line:

    fork NAME SEED [signals]   fork a writer; answer its pid
    quit

A forked writer runs halt-lab agent runs back to back into the journal DB (run ids
`NAME-0`, `NAME-1`, ...), with scripts chosen by SEED, until it is killed. After every
committed transition it writes `RUN_ID SEQ` to the file RECORDS_DIR/NAME.log (unbuffered:
what the parent reads after a SIGKILL is exactly what was committed and reported). With
`signals`, the writer's lookups take 30 ms and it handles SIGTERM/SIGINT like a worker:
a run in flight halts `interrupted` with a record, and the writer exits 128+N. Forking
skips the ~0.3 s start of a fresh interpreter per kill, so the slow suite can afford
hundreds of kills.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

from fsm_agent import ScriptedModel, load_tools, run
from fsm_agent.declaration.load import load_machine
from fsm_agent.stores.sqlite import SqliteStore

#: Parsed once in the fork server: every writer shares it (parsing YAML costs ~75 ms).
MACHINE = load_machine("agent_loop")

LOOKUP = {"tool_call": {"name": "lookup", "args": {"q": "lab password"}}}
MISS = {"tool_call": {"name": "lookup", "args": {"q": "again"}}}
ANSWER = {"answer": "swordfish"}
STOPS = {signal.SIGTERM, signal.SIGINT}
#: Scripts a writer cycles through: success, a retry after a miss, a rejected reply first,
#: and a handoff.
SCRIPTS: tuple[list[Any], ...] = (
    [LOOKUP, ANSWER],
    [MISS, LOOKUP, ANSWER],
    ['{"tool_call": {"name": "lookup", "args": {"q": "lab pa', LOOKUP, ANSWER],
    [{"handoff": {"why": "needs a person"}}],
)


def writer(db: str, records: Path, name: str, seed: int, signals: bool) -> None:
    rng = random.Random(seed)  # noqa: S311 - test data, not secrets
    log = os.open(records / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    stop: list[int] = []

    def report(event: Any) -> None:
        os.write(log, f"{event.run_id} {event.seq}\n".encode())

    def exit_by(signum: int) -> None:
        os.write(log, f"EXIT {128 + signum}\n".encode())
        os._exit(128 + signum)

    if signals:  # between runs (and for a stop that lands as a run halts) the worker's own
        os.environ["LOOKUP_SLEEP_MS"] = "30"  # runs spend most of their time mid-tool
        for sig in STOPS:  # handler notes it; a run's handler replaces it meanwhile
            signal.signal(sig, lambda signum, _: stop.append(signum))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)  # blocked by the server across fork
    store = SqliteStore(db)  # one connection per writer, as a long-lived worker holds
    i = 0
    while True:
        if stop:
            exit_by(stop[0])
        run_id = f"{name}-{i}"
        record = run(
            MACHINE,
            task="Find the lab password",
            model=ScriptedModel(rng.choice(SCRIPTS)),
            tools=load_tools("fsm_agent.examples.halt_lab.tools"),
            allow=("lookup", "slow_lookup", "hang"),
            store=store,
            record_path=records / f"{run_id}.json",
            run_id=run_id,
            on_transition=report,
            handle_signals=signals,
        )
        if record.signal:
            exit_by(record.signal)
        i += 1


def warm_up(db: str, records: Path) -> None:
    """One run before any fork: the journal exists (migrated), and the declaration, its
    compiled machine and every lazy import are cached, so a writer commits within ms."""
    run(
        MACHINE,
        task="warm up",
        model=ScriptedModel(SCRIPTS[0]),
        tools=load_tools("fsm_agent.examples.halt_lab.tools"),
        allow=("lookup", "slow_lookup", "hang"),
        store=db,
        record_path=records / "warm-up.json",
        run_id="warm-up",
        handle_signals=False,
    )


def main() -> None:
    db, records = sys.argv[1], Path(sys.argv[2])
    warm_up(db, records)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # killed writers are reaped at once
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            return
        name, seed = words[1], int(words[2])
        signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)  # none may land before the handlers
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                writer(db, records, name, seed, signals="signals" in words[3:])
            finally:
                os._exit(1)  # a writer only ends by a signal
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
        print(pid, flush=True)


if __name__ == "__main__":
    main()
