"""How many times a journal stores one declaration: the text of `agent_loop`, after several
runs of it in one journal.

`RUNS` short runs (one model call each) of the same machine go into one fresh SQLite
journal through `fsm_agent.run`; then the file is read with plain SQL, whatever its schema:
every column of every table, counting the cells whose bytes contain the declaration's
whole text (`MachineSpec.text`, the exact bytes its sha256 is taken over, which a journal
must keep to check that hash). Stored once per sha256, the count is 1 whatever `RUNS`
is; stored with each run, it is `RUNS`. 0 means the text is kept in no readable cell
(compressed, or dropped): the check would have to follow such a change, so it reads as a
miss, not a pass.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.bench.runtime import agent_loop, run_loop
from tests.bench.workload import Scratch, Workload

RUNS = 5
METRIC = f"declaration copies, {RUNS} runs"


def _quoted(identifier: str) -> str:
    """An SQL identifier taken from the file's own schema, quoted."""
    return '"' + identifier.replace('"', '""') + '"'


def cells_holding(path: Path, needle: bytes) -> int:
    """Cells of any table in the SQLite file at `path` whose bytes contain `needle`."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        found = 0
        for table in tables:
            columns = [
                r[0] for r in conn.execute("SELECT name FROM pragma_table_info(?)", (table,))
            ]
            for column in columns:
                query = (
                    f"SELECT count(*) FROM {_quoted(table)} "  # noqa: S608 (the file's own names)
                    f"WHERE instr(CAST({_quoted(column)} AS BLOB), ?) > 0"
                )
                found += int(conn.execute(query, (needle,)).fetchone()[0])
    finally:
        conn.close()
    return found


def copies(scratch: Scratch, runs: int = RUNS) -> float:
    """Cells holding the declaration's text after `runs` runs of it in one journal."""
    db = scratch.fresh("declarations.db")
    records = [scratch.fresh(f"declarations-{n}.json") for n in range(runs)]
    try:
        for record in records:
            run_loop(Workload.of(1), db, record)
        return float(cells_holding(db, agent_loop().text.encode("utf-8")))
    finally:
        scratch.discard(db, *records)
