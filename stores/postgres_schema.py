"""The PostgreSQL journal's schema: its migrations (applied by `fsm_agent.stores.postgres_open`) and
the statements the store runs.

The tables and their meaning are SQLite's (`fsm_agent.stores.sqlite_schema`): `runs`, `events`
(append-only: triggers refuse UPDATE, DELETE and TRUNCATE), `controls` and `queue`. Values
round-trip exactly: JSON columns are TEXT (the chain hashes their bytes), integers BIGINT,
`retry` an integer 0/1. Text that is sorted or compared (ids, times, machine names) uses
the "C" collation, so order is byte order, as in SQLite, whatever the database's locale.
"""

from __future__ import annotations

import functools
from typing import Final

import attrs


@attrs.frozen
class Migration:
    """One schema change: its name (recorded once applied) and its statements."""

    name: str
    statements: tuple[str, ...]
    #: it only adds or replaces indexes: a journal without it reads the same (only slower),
    #: so a command that only reads reads it as it is; the next writer applies it
    index_only: bool = False


_APPEND_ONLY = """
    CREATE FUNCTION fsm_agent_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'the journal is append-only'
            USING ERRCODE = 'integrity_constraint_violation';
    END $$"""
#: The run's head moves in the same statement as the INSERT (no second write from Python).
#: `search_path` is pinned to the schema the function was created in, so a session with
#: another search path still moves the head of this schema's run.
_HEAD = """
    CREATE FUNCTION fsm_agent_events_head() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
    BEGIN
        UPDATE runs SET head_hash = NEW.hash, head_seq = NEW.seq WHERE run_id = NEW.run_id;
        RETURN NULL;
    END $$"""
#: A column's JSON, or NULL when it does not parse (PostgreSQL 15 has no `IS JSON`): a
#: corrupt row reads as "no value" in the live view and statistics, as in SQLite.
_JSONB = """
    CREATE FUNCTION fsm_agent_jsonb(value TEXT) RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        RETURN value::jsonb;
    EXCEPTION WHEN others THEN
        RETURN NULL;
    END $$"""

#: The queue's clock: the server's, in epoch seconds (leases outlive any one worker's clock).
_NOW = """
    CREATE FUNCTION fsm_agent_now() RETURNS double precision LANGUAGE sql VOLATILE AS $$
        SELECT extract(epoch FROM clock_timestamp())::double precision
    $$"""

MIGRATIONS: Final = (
    Migration(
        "m001_journal",
        (
            """CREATE TABLE runs (
                run_id TEXT COLLATE "C" PRIMARY KEY, machine TEXT COLLATE "C" NOT NULL,
                machine_sha256 TEXT NOT NULL, machine_text TEXT NOT NULL, task TEXT NOT NULL,
                budgets TEXT NOT NULL, state TEXT NOT NULL, status TEXT NOT NULL,
                halt_reason TEXT, steps_used BIGINT NOT NULL DEFAULT 0,
                started_at TEXT COLLATE "C" NOT NULL, ended_at TEXT, record TEXT, pid BIGINT,
                host TEXT, head_hash TEXT, head_seq BIGINT)""",
            "CREATE INDEX runs_started_at ON runs (started_at, run_id)",
            "CREATE INDEX runs_machine ON runs (machine, started_at)",
            """CREATE TABLE events (
                run_id TEXT COLLATE "C" NOT NULL REFERENCES runs (run_id), seq BIGINT NOT NULL,
                kind TEXT NOT NULL, at_ms BIGINT NOT NULL, wall_time TEXT NOT NULL,
                source TEXT, dest TEXT NOT NULL, trigger TEXT, halt TEXT,
                retry INTEGER NOT NULL DEFAULT 0, guards TEXT NOT NULL, checks TEXT NOT NULL,
                snapshot TEXT NOT NULL, facts TEXT, note TEXT, control BIGINT,
                prev_hash TEXT, hash TEXT,
                PRIMARY KEY (run_id, seq))""",
            _APPEND_ONLY,
            """CREATE TRIGGER events_no_update BEFORE UPDATE ON events
               FOR EACH ROW EXECUTE FUNCTION fsm_agent_append_only()""",
            """CREATE TRIGGER events_no_delete BEFORE DELETE ON events
               FOR EACH ROW EXECUTE FUNCTION fsm_agent_append_only()""",
            """CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
               FOR EACH STATEMENT EXECUTE FUNCTION fsm_agent_append_only()""",
            _HEAD,
            """CREATE TRIGGER events_head AFTER INSERT ON events
               FOR EACH ROW EXECUTE FUNCTION fsm_agent_events_head()""",
            """CREATE TABLE controls (
                id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                run_id TEXT COLLATE "C" REFERENCES runs (run_id), kind TEXT NOT NULL,
                payload TEXT NOT NULL, who TEXT NOT NULL, why TEXT NOT NULL, at TEXT NOT NULL)""",
            "CREATE INDEX controls_run ON controls (run_id, id)",
            "CREATE INDEX controls_global ON controls (id) WHERE run_id IS NULL",
            _JSONB,
        ),
    ),
    Migration(
        "m002_queue",
        (
            """CREATE TABLE queue (
                run_id TEXT COLLATE "C" PRIMARY KEY, machine TEXT NOT NULL,
                machine_text TEXT NOT NULL, task TEXT NOT NULL, budgets TEXT NOT NULL,
                submitted_at TEXT COLLATE "C" NOT NULL, status TEXT NOT NULL DEFAULT 'queued',
                owner TEXT, lease_until DOUBLE PRECISION,
                attempts INTEGER NOT NULL DEFAULT 0)""",
            "CREATE INDEX queue_status ON queue (status, submitted_at)",
            # The lease's scan: open jobs oldest first, however many are done.
            """CREATE INDEX queue_open ON queue (submitted_at, run_id)
               WHERE status <> 'done'""",
            _NOW,
        ),
    ),
    Migration(
        "m003_queue_note",
        (
            # Why a job left the queue by a person's hand (`fsm-agent dequeue`).
            "ALTER TABLE queue ADD COLUMN note TEXT",
        ),
    ),
    Migration(
        "m004_chain_mode_and_record_seal",
        (
            # How each run's chain is made (NULL: journaled before; `sha256`;
            # `hmac-sha256:<key id>`), and the halt record's seal onto the run's head, written
            # with the record (see fsm_agent.stores.sqlite_schema m006).
            "ALTER TABLE runs ADD COLUMN chain TEXT",
            "ALTER TABLE runs ADD COLUMN record_hash TEXT",
        ),
    ),
    Migration(
        "m005_chain_v3_and_declarations",
        (
            # Chain version 3 (see fsm_agent.stores.sqlite_schema m007): an event's hash as 32
            # bytes,
            # no copy of the previous one, no trigger moving the runs row on every INSERT,
            # and each declaration stored once per sha256. Rows already here are kept.
            "ALTER TABLE events ADD COLUMN digest BYTEA",
            "DROP TRIGGER events_head ON events",
            "DROP FUNCTION fsm_agent_events_head()",
            """CREATE TABLE declarations (
                sha256 TEXT COLLATE "C" PRIMARY KEY, name TEXT NOT NULL, text TEXT NOT NULL)""",
            """CREATE TRIGGER declarations_no_update BEFORE UPDATE ON declarations
               FOR EACH ROW EXECUTE FUNCTION fsm_agent_append_only()""",
            """CREATE TRIGGER declarations_no_delete BEFORE DELETE ON declarations
               FOR EACH ROW EXECUTE FUNCTION fsm_agent_append_only()""",
        ),
    ),
    Migration(
        "m006_run_list_indexes",
        (
            # The run list's keyset pages (see fsm_agent.stores.sqlite_schema m008): each
            # filter through an index on it then (started_at, run_id), newest first.
            "DROP INDEX runs_machine",
            "CREATE INDEX runs_machine ON runs (machine, started_at, run_id)",
            "CREATE INDEX runs_halt_reason ON runs (halt_reason, started_at, run_id)",
            "CREATE INDEX runs_status ON runs (status, started_at, run_id)",
        ),
        index_only=True,
    ),
)

_EVENT_COLUMNS = """run_id, seq, kind, at_ms, wall_time, source, dest, trigger, halt, retry,
                        guards, checks, snapshot, facts, note, control, prev_hash, hash, digest"""
INSERT_EVENT = f"""
    INSERT INTO events ({_EVENT_COLUMNS})
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"""  # noqa: S608
#: The live path's INSERT: only onto the run's current head (see `PostgresStore.append`):
#: the event before it (seq - 1) must hold the hash it chains onto, and the primary key
#: (run_id, seq) lets one event only follow it (a second writer waits for the first's
#: commit, then fails on the key). Parameters: the event's 19 columns, then run id, seq - 1,
#: and that hash as text (versions 1, 2) and as bytes (version 3), one of them None.
APPEND_EVENT = f"""
    INSERT INTO events ({_EVENT_COLUMNS})
    SELECT %s::text, %s::bigint, %s::text, %s::bigint, %s::text, %s::text, %s::text,
           %s::text, %s::text, %s::integer, %s::text, %s::text, %s::text, %s::text,
           %s::text, %s::bigint, %s::text, %s::text, %s::bytea
    WHERE EXISTS (SELECT 1 FROM events WHERE run_id = %s AND seq = %s
                  AND (hash = %s::text OR digest = %s::bytea))"""  # noqa: S608
_ROW = """(%s::text, %s::bigint, %s::text, %s::bigint, %s::text, %s::text, %s::text,
            %s::text, %s::text, %s::integer, %s::text, %s::text, %s::text, %s::text,
            %s::text, %s::bigint, %s::text, %s::text, %s::bytea)"""
#: The most events `append_rows` writes in one statement.
APPEND_ROWS_MAX = 32


@functools.cache
def append_rows(count: int) -> str:
    """`APPEND_EVENT` for `count` events (`APPEND_ROWS_MAX` at most) in one statement: it
    inserts every row or none (the head check holds for all or none, and a key violated by
    any row aborts the statement). Parameters: the events' 19 columns each, in order, then
    as `APPEND_EVENT`'s last four, for the first event."""
    if count == 1:
        return APPEND_EVENT
    if not 1 < count <= APPEND_ROWS_MAX:
        raise ValueError(f"append_rows: {count} rows")
    return f"""
    INSERT INTO events ({_EVENT_COLUMNS})
    SELECT * FROM (VALUES {", ".join([_ROW] * count)}) AS batch
    WHERE EXISTS (SELECT 1 FROM events WHERE run_id = %s AND seq = %s
                  AND (hash = %s::text OR digest = %s::bytea))"""  # noqa: S608


SELECT_CHAIN = f"SELECT {_EVENT_COLUMNS} FROM events WHERE run_id = %s ORDER BY seq"  # noqa: S608
_HEX = "COALESCE(hash, encode(digest, 'hex'))"
#: The newest event's hash (hex) and seq of the run whose id is bound as `%(run_id)s`.
NEWEST = f"""(SELECT {_HEX} FROM events WHERE run_id = %(run_id)s
              ORDER BY seq DESC LIMIT 1)"""  # noqa: S608
#: A run's head hash: a halted run's is stored with its record's seal; a live run's is its
#: newest event's.
SELECT_HEAD = f"""
    SELECT CASE WHEN status = 'halted' AND head_hash IS NOT NULL THEN head_hash
                ELSE {NEWEST} END
    FROM runs WHERE run_id = %(run_id)s"""  # noqa: S608
INSERT_DECLARATION = """
    INSERT INTO declarations (sha256, name, text) VALUES (%s, %s, %s)
    ON CONFLICT (sha256) DO NOTHING"""
#: The columns an event is decoded from (`fsm_agent.stores.codec.event`): all but the chain's.
SELECT_EVENTS = """
    SELECT run_id, seq, kind, at_ms, wall_time, source, dest, trigger, halt, retry, guards,
           checks, snapshot, facts, note, control
    FROM events WHERE run_id = %s ORDER BY seq"""
INSERT_RUN = """
    INSERT INTO runs (run_id, machine, machine_sha256, machine_text, task, budgets, state, status,
                      halt_reason, steps_used, started_at, ended_at, record, pid, host, chain,
                      record_hash, head_hash, head_seq)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"""
#: A halted run's summary, record, the record's seal and the head it seals, in one
#: statement.
FINISH_RUN = """
    UPDATE runs SET status = 'halted', state = %s, halt_reason = %s, steps_used = %s,
                    ended_at = %s, record = %s, record_hash = %s, head_hash = %s, head_seq = %s
    WHERE run_id = %s"""
#: The run's chain mode (its row locked until the transaction ends), and its newest
#: event's hash and seq: what the record is sealed onto.
LOCK_HEAD = f"""
    SELECT {NEWEST}, chain,
           (SELECT max(seq) FROM events WHERE run_id = %(run_id)s)
    FROM runs WHERE run_id = %(run_id)s FOR UPDATE"""  # noqa: S608
#: A waiting run continued by a person's decision (`Store.reopen_run`): only while its
#: record is still the one sealed `%(seal)s` onto the head `%(head)s`.
REOPEN_RUN = """
    UPDATE runs SET status = %(status)s::text, halt_reason = NULL, ended_at = NULL,
                    record = NULL, record_hash = NULL, pid = %(pid)s, host = %(host)s
    WHERE run_id = %(run_id)s AND status = 'halted' AND record_hash = %(seal)s::text
      AND head_hash = %(head)s::text"""
#: A run's new owner, only while its row and head are what the claimant read.
CLAIM_RUN = f"""
    UPDATE runs SET status = 'running', pid = %(pid)s, host = %(host)s
    WHERE run_id = %(run_id)s AND status = %(status)s AND status <> 'halted'
      AND pid IS NOT DISTINCT FROM %(old_pid)s::bigint
      AND host IS NOT DISTINCT FROM %(old_host)s::text AND {NEWEST} = %(head)s::text"""  # noqa: S608
# A live run's state and steps come from its newest event (one INSERT per transition, no
# second write to `runs`); a halted run's come from its `runs` row. A chain version 4
# snapshot is `[4, {...}]` (`fsm_agent.journal.content`), its meters always written.
SELECT_RUNS = """
    SELECT r.*, e.dest AS live_state,
           COALESCE(fsm_agent_jsonb(e.snapshot) #> '{meters,steps_used}',
                    fsm_agent_jsonb(e.snapshot) #> '{1,meters,steps_used}') AS live_steps,
           d.text AS declared_text
    FROM runs AS r
    LEFT JOIN LATERAL (
        SELECT dest, snapshot FROM events
        WHERE run_id = r.run_id AND r.status <> 'halted' ORDER BY seq DESC LIMIT 1
    ) AS e ON TRUE
    LEFT JOIN declarations AS d ON r.machine_text = '' AND d.sha256 = r.machine_sha256"""
# One narrow row per run for statistics, nothing decoded in Python but the two numbers; a
# corrupt record reads as no cost rather than failing every statistic.
_TOKENS = """(
        SELECT SUM(CASE WHEN jsonb_typeof(f #> '{{usage,{0}}}') = 'number'
                        THEN (f #>> '{{usage,{0}}}')::numeric END)::bigint
        FROM events, LATERAL fsm_agent_jsonb(facts) AS f
        WHERE run_id = runs.run_id AND facts IS NOT NULL
    ) AS {0}"""
SELECT_SUMMARIES = f"""
    SELECT run_id, machine, status, halt_reason, steps_used,
           fsm_agent_jsonb(budgets) -> 'max_steps' AS max_steps, started_at, ended_at,
           fsm_agent_jsonb(record) #> '{{meters,cost}}' AS cost,
           {_TOKENS.format("input_tokens")}, {_TOKENS.format("output_tokens")},
           fsm_agent_jsonb(record) #>> '{{handoff,awaits}}' AS awaits
    FROM runs
    WHERE (%(machine)s::text IS NULL OR machine = %(machine)s::text)
      AND (%(since)s::text IS NULL OR started_at >= %(since)s::text)
    ORDER BY machine, started_at, run_id"""  # noqa: S608 - constant fragments only
