"""What an insider with the journal file, `sqlite3` and the chain's documented scheme (but not
the chain key, and not the witness) can do to a run: the edits of the tamper tests."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import attrs

from fsm_agent.journal import serde
from fsm_agent.journal.chain_hash import genesis, link_v3, record_link
from fsm_agent.stores.sqlite import SqliteStore

TRIGGERS = ("events_no_update", "events_no_delete", "declarations_no_update",
            "declarations_no_delete")  # fmt: skip
#: The tester's edit (issue 27): a halted run reopened, as if it had been killed early.
REOPEN = (
    "DELETE FROM events WHERE seq > 0",
    "UPDATE runs SET status = 'running', record = NULL, record_hash = NULL, head_hash = NULL,"
    " head_seq = NULL, halt_reason = NULL, ended_at = NULL, state = 'drafting', steps_used = 0",
)


def insider(db: Path, *statements: str) -> None:
    """Drop the append-only triggers, then run `statements`, committed."""
    conn = sqlite3.connect(db)
    for trigger in TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()


def rechain(db: Path, run_id: str, chain: str | None = None, answer: str | None = None) -> None:
    """Recompute the run's whole chain with sha256 from its genesis, as stored now (with
    `chain` as its chain mode, if given), its head, and its record (with `answer`, if given)
    resealed onto that head: all an insider can do without the key."""
    if chain is not None:
        insider(db, f"UPDATE runs SET chain = '{chain}' WHERE run_id = '{run_id}'")  # noqa: S608
    store = SqliteStore(db, read_only=True)
    try:
        run, links, _ = store.chain(run_id)
    finally:
        store.close()
    prev = genesis(run, None)
    conn = sqlite3.connect(db)
    for trigger in TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    for x in links:
        prev = link_v3(prev, x.columns, None)
        conn.execute(
            "UPDATE events SET digest = ? WHERE run_id = ? AND seq = ?",
            (bytes.fromhex(prev), run_id, x.seq),
        )
    if run.record is not None:
        record = attrs.evolve(run.record, journal_head=prev)
        if answer is not None:
            record = attrs.evolve(record, answer=answer)
        conn.execute(
            "UPDATE runs SET head_hash = ?, record = ?, record_hash = ? WHERE run_id = ?",
            (prev, serde.dumps(record), record_link(prev, record), run_id),
        )
    conn.commit()
    conn.close()
