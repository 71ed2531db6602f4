"""The SQLite journal's schema: its migrations (each applied once, in order, under the write
lock) and the statements the store runs. The `events` table is append-only: triggers refuse
UPDATE and DELETE, so nothing journaled is rewritten.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # sqlite-utils is imported only to migrate: a reader never needs it
    import sqlite_utils
    from sqlite_utils.migrations import Migrations

#: The name sqlite-utils records fsm-agent's migrations under (`_sqlite_migrations`).
MIGRATION_SET = "fsm_agent"
#: Every migration this fsm-agent knows, in order: a journal that has applied any other was
#: written by a newer one (sqlite-utils keeps its own list private).
KNOWN_MIGRATIONS: list[str] = []
#: A migration's step (sqlite-utils hands it the database).
Step = Callable[["sqlite_utils.Database"], None]
_STEPS: list[tuple[str, Step]] = []
#: Migrations that only add or replace indexes: a journal without them reads the same (only
#: slower), so a command that only reads reads it as it is; the next writer applies them.
INDEX_ONLY = frozenset({"m008_run_list_indexes"})


def _migration(name: str) -> Callable[[Step], Step]:
    KNOWN_MIGRATIONS.append(name)

    def decorate(step: Step) -> Step:
        _STEPS.append((name, step))
        return step

    return decorate


@functools.cache
def migrations() -> Migrations:
    """The migrations as sqlite-utils applies them (imported on the first call)."""
    from sqlite_utils.migrations import Migrations

    found = Migrations(MIGRATION_SET)
    for name, step in _STEPS:
        found(name=name)(step)
    return found


def applied_migrations(conn: sqlite3.Connection) -> list[str]:
    """The fsm-agent migrations applied to the database, in the order they were applied
    (what sqlite-utils' `Migrations.applied` reads, without loading sqlite-utils)."""
    table = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlite_migrations'"
    ).fetchone()
    if table is None:
        return []
    rows = conn.execute(
        "SELECT name FROM _sqlite_migrations WHERE migration_set = ? ORDER BY rowid",
        (MIGRATION_SET,),
    ).fetchall()
    return [row[0] for row in rows]


@_migration("m001_runs_and_events")
def _m001(db: sqlite_utils.Database) -> None:
    db.execute("""
        CREATE TABLE runs (
            run_id TEXT PRIMARY KEY, machine TEXT NOT NULL, machine_sha256 TEXT NOT NULL,
            machine_text TEXT NOT NULL, task TEXT NOT NULL, budgets TEXT NOT NULL,
            state TEXT NOT NULL, status TEXT NOT NULL, halt_reason TEXT,
            steps_used INTEGER NOT NULL DEFAULT 0, started_at TEXT NOT NULL, ended_at TEXT,
            record TEXT, pid INTEGER)""")
    db.execute("CREATE INDEX runs_started_at ON runs (started_at)")
    db.execute("""
        CREATE TABLE events (
            run_id TEXT NOT NULL REFERENCES runs (run_id), seq INTEGER NOT NULL,
            kind TEXT NOT NULL, at_ms INTEGER NOT NULL, wall_time TEXT NOT NULL,
            source TEXT, dest TEXT NOT NULL, trigger TEXT, halt TEXT,
            retry INTEGER NOT NULL DEFAULT 0, guards TEXT NOT NULL, checks TEXT NOT NULL,
            snapshot TEXT NOT NULL, facts TEXT, note TEXT,
            PRIMARY KEY (run_id, seq))""")
    for op in ("UPDATE", "DELETE"):
        db.execute(f"""
            CREATE TRIGGER events_no_{op.lower()} BEFORE {op} ON events
            BEGIN SELECT RAISE(ABORT, 'the journal is append-only'); END""")


@_migration("m002_controls")
def _m002(db: sqlite_utils.Database) -> None:
    db.execute("""
        CREATE TABLE controls (
            id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT REFERENCES runs (run_id),
            kind TEXT NOT NULL, payload TEXT NOT NULL, who TEXT NOT NULL, why TEXT NOT NULL,
            at TEXT NOT NULL)""")
    db.execute("CREATE INDEX controls_run ON controls (run_id, id)")
    db.execute("CREATE INDEX controls_global ON controls (id) WHERE run_id IS NULL")


@_migration("m003_hash_chain")
def _m003(db: sqlite_utils.Database) -> None:
    """Tamper evidence (see fsm_agent.journal.chain): each event's hash and its predecessor's; each
    run's head, kept by a trigger in the same statement as the INSERT (no second write from
    Python); and the host of the process that owns a live run (with `pid`, for resume)."""
    db.execute("ALTER TABLE events ADD COLUMN prev_hash TEXT")
    db.execute("ALTER TABLE events ADD COLUMN hash TEXT")
    db.execute("ALTER TABLE runs ADD COLUMN head_hash TEXT")
    db.execute("ALTER TABLE runs ADD COLUMN head_seq INTEGER")
    db.execute("ALTER TABLE runs ADD COLUMN host TEXT")
    db.execute("ALTER TABLE events ADD COLUMN control INTEGER")
    db.execute("""
        CREATE TRIGGER events_head AFTER INSERT ON events
        BEGIN
            UPDATE runs SET head_hash = NEW.hash, head_seq = NEW.seq WHERE run_id = NEW.run_id;
        END""")


@_migration("m004_queue")
def _m004(db: sqlite_utils.Database) -> None:
    """The run queue (`fsm-agent submit`, `fsm-agent worker`): one row per submitted run,
    leased by one worker at a time (`owner`, `lease_until` in epoch seconds)."""
    db.execute("""
        CREATE TABLE queue (
            run_id TEXT PRIMARY KEY, machine TEXT NOT NULL, machine_text TEXT NOT NULL,
            task TEXT NOT NULL, budgets TEXT NOT NULL, submitted_at TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'queued', owner TEXT, lease_until REAL,
            attempts INTEGER NOT NULL DEFAULT 0)""")
    db.execute("CREATE INDEX queue_status ON queue (status, submitted_at)")


_EVENT_COLUMNS = """run_id, seq, kind, at_ms, wall_time, source, dest, trigger, halt, retry,
                        guards, checks, snapshot, facts, note, control, prev_hash, hash, digest"""
INSERT_EVENT = f"""
    INSERT INTO events ({_EVENT_COLUMNS})
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""  # noqa: S608
SELECT_CHAIN = f"SELECT {_EVENT_COLUMNS} FROM events WHERE run_id = ? ORDER BY seq"  # noqa: S608
#: The columns an event is decoded from (`fsm_agent.stores.codec.event`), in this order: every event
#: column but the chain's (`prev_hash`, `hash`, `digest`), which only `SELECT_CHAIN` reads.
READ_COLUMNS = (
    "run_id", "seq", "kind", "at_ms", "wall_time", "source", "dest", "trigger", "halt",
    "retry", "guards", "checks", "snapshot", "facts", "note", "control",
)  # fmt: skip
SELECT_EVENTS = f"SELECT {', '.join(READ_COLUMNS)} FROM events WHERE run_id = ?"  # noqa: S608
#: A stored event hash as hex: `hash` (chain versions 1 and 2) or `digest` (version 3).
_HEX = "CASE WHEN digest IS NULL THEN hash ELSE lower(hex(digest)) END"
#: The newest event's hash (hex) of the run whose id is bound as `:run_id`.
NEWEST_HASH = f"""(SELECT {_HEX} FROM events WHERE run_id = :run_id
                   ORDER BY seq DESC LIMIT 1)"""  # noqa: S608 - constants only
#: A run's head hash: a halted run's is stored with its record's seal (`FINISH_RUN`); a
#: live run's is its newest event's. Parameter: `:run_id`.
SELECT_HEAD = f"""
    SELECT CASE WHEN status = 'halted' AND head_hash IS NOT NULL THEN head_hash
                ELSE {NEWEST_HASH} END, chain
    FROM runs WHERE run_id = :run_id"""  # noqa: S608 - constants only
#: What a record is sealed onto: the newest event's hash, the run's chain mode, and the
#: newest event's seq. Parameter: `:run_id`.
SELECT_NEWEST = f"""
    SELECT {NEWEST_HASH}, chain, (SELECT MAX(seq) FROM events WHERE run_id = :run_id)
    FROM runs WHERE run_id = :run_id"""  # noqa: S608 - constants only
#: A run's new owner, only while its row and head are what the claimant read.
CLAIM_RUN = f"""
    UPDATE runs SET status = 'running', pid = :pid, host = :host
    WHERE run_id = :run_id AND status = :status AND status != 'halted' AND pid IS :old_pid
      AND host IS :old_host AND {NEWEST_HASH} = :head"""  # noqa: S608 - constants only
#: A waiting run continued by a person's decision (`Store.reopen_run`): only while its
#: record is still the one sealed `:seal` onto the head `:head`.
REOPEN_RUN = """
    UPDATE runs SET status = :status, halt_reason = NULL, ended_at = NULL, record = NULL,
                    record_hash = NULL, pid = :pid, host = :host
    WHERE run_id = :run_id AND status = 'halted' AND record_hash = :seal AND head_hash = :head"""
#: The live path's INSERT: only onto the run's current head (see `SqliteStore.append`):
#: the row before it (seq - 1) must hold the hash the event is chained onto, and the
#: primary key (run_id, seq) lets only one event follow it. Parameters: the event's 19
#: columns, then run_id, seq - 1 and that hash as stored (text, or 32 bytes in version 3).
APPEND_EVENT = f"""
    INSERT INTO events ({_EVENT_COLUMNS})
    SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?
    WHERE (SELECT COALESCE(digest, hash) FROM events WHERE run_id = ? AND seq = ?) = ?"""  # noqa: S608
#: The most events `append_rows` writes in one statement (19 parameters each, well under
#: the 999 variables of the oldest SQLite builds).
APPEND_ROWS_MAX = 32
_ROW = "(" + ", ".join("?" * 19) + ")"


@functools.cache
def append_rows(count: int) -> str:
    """`APPEND_EVENT` for `count` events (`APPEND_ROWS_MAX` at most) in one statement: it
    inserts every row or none (the head check holds for all or none, and a constraint
    violated by any row aborts the whole statement). Parameters: the events' 19 columns
    each, in order, then run_id, the first's seq - 1 and that hash as stored."""
    if count == 1:
        return APPEND_EVENT
    if not 1 < count <= APPEND_ROWS_MAX:
        raise ValueError(f"append_rows: {count} rows")
    return f"""
    INSERT INTO events ({_EVENT_COLUMNS})
    SELECT * FROM (VALUES {", ".join([_ROW] * count)})
    WHERE (SELECT COALESCE(digest, hash) FROM events WHERE run_id = ? AND seq = ?) = ?"""  # noqa: S608


INSERT_DECLARATION = """
    INSERT INTO declarations (sha256, name, text) VALUES (?, ?, ?)
    ON CONFLICT (sha256) DO NOTHING"""
# A live run's state and steps come from its newest event (one INSERT per transition, no
# second write to `runs`); a halted run's come from its `runs` row. A run row written
# since m007 refers to its declaration (`declarations`) instead of carrying it. A chain
# version 4 snapshot is `[4, {...}]` (`fsm_agent.journal.content`), its meters always written.
SELECT_RUNS = """
    SELECT r.*, e.dest AS live_state,
           CASE WHEN json_valid(e.snapshot)
                THEN COALESCE(json_extract(e.snapshot, '$.meters.steps_used'),
                              json_extract(e.snapshot, '$[1].meters.steps_used')) END
             AS live_steps,
           d.text AS declared_text
    FROM runs AS r
    LEFT JOIN events AS e
      ON e.run_id = r.run_id
     AND e.seq = (SELECT MAX(seq) FROM events WHERE run_id = r.run_id)
    LEFT JOIN declarations AS d ON r.machine_text = '' AND d.sha256 = r.machine_sha256"""
INSERT_RUN = """
    INSERT INTO runs (run_id, machine, machine_sha256, machine_text, task, budgets, state, status,
                      halt_reason, steps_used, started_at, ended_at, record, pid, host, chain,
                      record_hash, head_hash, head_seq)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""
#: A halted run's summary, record, the record's seal and the head it seals, in one
#: statement.
FINISH_RUN = """
    UPDATE runs SET status = 'halted', state = ?, halt_reason = ?, steps_used = ?, ended_at = ?,
                    record = ?, record_hash = ?, head_hash = ?, head_seq = ?
    WHERE run_id = ?"""
# One narrow row per run for statistics: nothing decoded in Python; the record's cost is
# read by SQLite (a corrupt record reads as no cost rather than failing every statistic).
_TOKENS = """(
        SELECT SUM(CASE WHEN json_type(facts, '$.usage.{0}') = 'integer'
                        THEN json_extract(facts, '$.usage.{0}') END)
        FROM events WHERE run_id = runs.run_id AND facts IS NOT NULL AND json_valid(facts)
    ) AS {0}"""
SELECT_SUMMARIES = f"""
    SELECT run_id, machine, status, halt_reason, steps_used,
           json_extract(budgets, '$.max_steps') AS max_steps, started_at, ended_at,
           CASE WHEN json_valid(record) THEN json_extract(record, '$.meters.cost') END AS cost,
           {_TOKENS.format("input_tokens")}, {_TOKENS.format("output_tokens")},
           CASE WHEN json_valid(record) THEN json_extract(record, '$.handoff.awaits') END
               AS awaits
    FROM runs
    WHERE (:machine IS NULL OR machine = :machine) AND (:since IS NULL OR started_at >= :since)
    ORDER BY machine, started_at, run_id"""  # noqa: S608 - constant fragments only


@_migration("m005_queue_note")
def _m005(db: sqlite_utils.Database) -> None:
    """Why a job left the queue by a person's hand (`fsm-agent dequeue`): who, why, when."""
    db.execute("ALTER TABLE queue ADD COLUMN note TEXT")


@_migration("m006_chain_mode_and_record_seal")
def _m006(db: sqlite_utils.Database) -> None:
    """How each run's chain is made (`chain`: NULL for the runs journaled before, `sha256`,
    or `hmac-sha256:<key id>` for a keyed one) and the halt record's seal onto the run's
    head (`record_hash`), written in the same statement as the record
    (fsm_agent.journal.chain_hash).
    Runs already here keep NULL in both: their chains verify exactly as before."""
    db.execute("ALTER TABLE runs ADD COLUMN chain TEXT")
    db.execute("ALTER TABLE runs ADD COLUMN record_hash TEXT")


@_migration("m007_chain_v3_and_declarations")
def _m007(db: sqlite_utils.Database) -> None:
    """Chain version 3 (fsm_agent.journal.chain_hash): an event's hash as 32 bytes (`digest`), no
    copy of the previous one; no trigger rewriting the runs row on every INSERT (a live
    run's head is its newest event; `APPEND_EVENT` chains only onto it); each declaration
    stored once per sha256 (`declarations`), referred to by the run rows written since.
    Nothing journaled is rewritten: rows already here keep their columns, and read and
    verify exactly as before."""
    db.execute("ALTER TABLE events ADD COLUMN digest BLOB")
    db.execute("DROP TRIGGER events_head")
    db.execute("""
        CREATE TABLE declarations (
            sha256 TEXT PRIMARY KEY, name TEXT NOT NULL, text TEXT NOT NULL)""")
    for op in ("UPDATE", "DELETE"):
        db.execute(f"""
            CREATE TRIGGER declarations_no_{op.lower()} BEFORE {op} ON declarations
            BEGIN SELECT RAISE(ABORT, 'the journal is append-only'); END""")


@_migration("m008_run_list_indexes")
def _m008(db: sqlite_utils.Database) -> None:
    """The run list's keyset pages (`fsm_agent.stores.run_lookup`), newest first on
    (started_at, run_id), each filter through an index in that order: a page deep in a
    journal of 100,000 runs reads its rows only, never those before it. The index on
    `started_at` alone is replaced by the one that ends in `run_id`. Indexes only
    (`INDEX_ONLY`): a reader does not need it."""
    db.execute("DROP INDEX IF EXISTS runs_started_at")
    db.execute("CREATE INDEX runs_newest ON runs (started_at, run_id)")
    for column in ("machine", "halt_reason", "status"):
        db.execute(f"CREATE INDEX runs_{column} ON runs ({column}, started_at, run_id)")
