"""The README's tamper table is this test's output, so it cannot drift from what the code does.

Each row is one edit an insider can make: with `sqlite3` after dropping the append-only
triggers (and, where an edit needs hashes, with the chain's documented scheme and sha256 —
never the key, never the witness), or with an editor on a run file or a record file. Each
cell is what the real `fsm-agent verify` says of the edited journal or file, and the exit
codes of `show` and `replay`, for one way of running: unkeyed; keyed (`--require-keyed`);
keyed with the witness its writer kept (`--witness FILE`, and `FSM_AGENT_WITNESS` for
show and replay); keyed, read by someone without the key.

The table is compared with the README's, between `<!-- tamper-matrix -->` and
`<!-- /tamper-matrix -->`; to write it there instead:

    FSM_AGENT_WRITE_TAMPER_TABLE=1 pytest tests/test_tamper_matrix.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest
from click.testing import CliRunner, Result

from fsm_agent.cli.main import cli
from fsm_agent.journal import serde
from fsm_agent.journal.chain_hash import link_v3, record_link
from fsm_agent.journal.chain_key import KEY_ENV, KEY_FILE_ENV
from fsm_agent.journal.witness import WITNESS_ENV
from fsm_agent.stores.sqlite import SqliteStore
from tests.insider import REOPEN, insider, rechain
from tests.lab import LAB_TOOLS, LOOKUP, lab_run

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
WRITE_ENV = "FSM_AGENT_WRITE_TAMPER_TABLE"
MARK = "tamper-matrix"
ANSWER = {"answer": "swordfish"}
KEY = "m" * 32
Base = Literal["done", "live"]
Surface = Literal["journal", "run file", "record file"]
Mode = Literal["unkeyed", "keyed"]
COLUMNS = ("unkeyed", "keyed", "keyed + witness", "keyed, no key given")


@attrs.frozen
class Case:
    """One copy of a base run, for one edit: its journal, record file and witness."""

    dir: Path
    run_id: str

    @property
    def db(self) -> Path:
        return self.dir / "j.db"

    @property
    def witness(self) -> Path:
        return self.dir / "witness.log"

    @property
    def record(self) -> Path:
        return self.dir / "r.json"

    @property
    def run_file(self) -> Path:
        return self.dir / "run.json"


Edit = Callable[[Case], None]


@attrs.frozen
class Row:
    label: str
    edit: Edit
    base: Base = "done"
    surface: Surface = "journal"
    modes: tuple[Mode, ...] = ("unkeyed", "keyed")


# --- the edits ---------------------------------------------------------------------------------


def sql(*statements: str) -> Edit:
    return lambda c: insider(c.db, *statements)


def _links(c: Case) -> Any:
    store = SqliteStore(c.db, read_only=True)
    try:
        return store.chain(c.run_id)
    finally:
        store.close()


def rehashed_payload(c: Case) -> None:
    """seq 2's note edited, and its hash recomputed with sha256 onto seq 1's."""
    insider(c.db, "UPDATE events SET note = 'all fine' WHERE seq = 2")
    _, links, _ = _links(c)
    digest = link_v3(links[1].hash, links[2].columns, None)
    insider(c.db, f"UPDATE events SET digest = X'{digest}' WHERE seq = 2")  # noqa: S608


def inserted(c: Case) -> None:
    """A copy of seq 1, its note changed, chained onto seq 1 like a real one, as seq 2."""
    _, links, _ = _links(c)
    conn = sqlite3.connect(c.db)
    names = [d[0] for d in conn.execute("SELECT * FROM events").description]
    first = conn.execute("SELECT * FROM events WHERE seq = 1").fetchone()
    row = dict(zip(names, first, strict=True))
    conn.close()
    fake = row | {"seq": 2, "note": "approved by ops"}
    columns = tuple(fake[n] for n in names if n not in ("prev_hash", "hash", "digest"))
    fake["digest"] = bytes.fromhex(link_v3(links[1].hash, columns, None))
    insider(c.db, "UPDATE events SET seq = seq + 100 WHERE seq >= 2",
            "UPDATE events SET seq = seq - 99 WHERE seq >= 100")  # fmt: skip
    conn = sqlite3.connect(c.db)
    marks = ", ".join("?" * len(names))
    conn.execute(f"INSERT INTO events VALUES ({marks})", [fake[n] for n in names])  # noqa: S608
    conn.commit()
    conn.close()


#: The head (seq 4) copied, digest and all, as seq 5 with its halt set to `completed` (issue 27).
HEAD_COPIED = (
    "INSERT INTO events (run_id, seq, kind, at_ms, wall_time, source, dest, trigger, halt,"
    " retry, guards, checks, snapshot, facts, note, prev_hash, hash, control, digest)"
    " SELECT run_id, seq + 1, kind, at_ms, wall_time, source, dest, trigger, 'completed',"
    " retry, guards, checks, snapshot, facts, note, prev_hash, hash, control, digest"
    " FROM events WHERE seq = 4"
)


def resealed(c: Case) -> None:
    """The record's answer edited and resealed onto the head with sha256."""
    run, _, head = _links(c)
    forged = attrs.evolve(run.record, answer="hunter2")
    conn = sqlite3.connect(c.db)
    conn.execute("UPDATE runs SET record = ?, record_hash = ?",
                 (serde.dumps(forged), record_link(head, forged)))  # fmt: skip
    conn.commit()
    conn.close()


def replaced(c: Case) -> None:
    """The journal file replaced by a new, empty journal."""
    for path in c.dir.glob("j.db*"):
        path.unlink()
    SqliteStore(c.db, chain_key=None).close()


def exported(*then: Callable[[dict[str, Any]], None], before: Edit | None = None) -> Edit:
    """Export the run to a file (after `before`, if given), then edit the file's JSON."""

    def edit(c: Case) -> None:
        if before is not None:
            before(c)
        invoke(["export", c.run_id, "--db", str(c.db), "-o", str(c.run_file)], {})
        data = json.loads(c.run_file.read_text(encoding="utf-8"))
        for change in then:
            change(data)
        c.run_file.write_text(json.dumps(data), encoding="utf-8")

    return edit


def _answer(where: str) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        target = data["record"] if where == "$.record" else data["run"]["record"]
        target["answer"] = "hunter2"

    return change


def record_file_answer(c: Case) -> None:
    data = json.loads(c.record.read_text(encoding="utf-8"))
    data["answer"] = "hunter2"
    c.record.write_text(json.dumps(data), encoding="utf-8")


ROWS = (
    Row("(no edit) a completed run, as it halted", lambda c: None),
    Row("(no edit) a run killed mid-way, as it was left", lambda c: None, base="live"),
    Row("an event's payload (`events.note` at seq 2)",
        sql("UPDATE events SET note = 'all fine' WHERE seq = 2")),
    Row("an event's payload, its hash recomputed with sha256", rehashed_payload),
    Row("an event deleted (seq 2)", sql("DELETE FROM events WHERE seq = 2")),
    Row("an event inserted, chained onto the one before like a real one", inserted),
    Row("the sealed head copied after it as seq 5, marked a `completed` halt", sql(HEAD_COPIED)),
    Row("two events swapped (seq 2 and 3)",
        sql("UPDATE events SET seq = 100 WHERE seq = 2", "UPDATE events SET seq = 2 WHERE seq = 3",
            "UPDATE events SET seq = 3 WHERE seq = 100")),
    Row("the tail cut off (seq 3 and 4 deleted)", sql("DELETE FROM events WHERE seq >= 3")),
    Row("the run row's task", sql("UPDATE runs SET task = 'something harmless'")),
    Row("the chain mode nulled (passed off as a run from before seals)",
        sql("UPDATE runs SET chain = NULL, record_hash = NULL")),
    Row("the declaration (`declarations.text`)",
        sql("UPDATE declarations SET text = replace(text, 'max_steps: 8', 'max_steps: 80')")),
    Row("`runs.halt_reason`", sql("UPDATE runs SET halt_reason = 'handoff_requested'")),
    Row("`runs.status` (halted → paused)", sql("UPDATE runs SET status = 'paused'")),
    Row("the record's answer",
        sql("UPDATE runs SET record = json_set(record, '$.answer', 'hunter2')")),
    Row("the record's reason and steps, the columns to match",
        sql("UPDATE runs SET halt_reason = 'max_steps', state = 'budget_exhausted', steps_used = 7,"
            " record = json_set(record, '$.halt_reason', 'max_steps', '$.terminal_state',"
            " 'budget_exhausted', '$.steps_used', 7)")),
    Row("the record's answer, resealed with sha256", resealed),
    Row("the seal removed (`runs.record_hash`)", sql("UPDATE runs SET record_hash = NULL")),
    Row("the record removed (`runs.record`)", sql("UPDATE runs SET record = NULL")),
    Row("the answer edited, then every hash, the head and the seal recomputed with sha256",
        lambda c: rechain(c.db, c.run_id, answer="hunter2")),
    Row("the run rechained as unkeyed (`runs.chain` = `sha256/4`, every hash recomputed)",
        lambda c: rechain(c.db, c.run_id, "sha256/4"), modes=("keyed",)),
    Row("**the halted run reopened**: events after seq 0 deleted, `status` = `running`, record,"
        " seal and head nulled (issue 27)", sql(*REOPEN)),
    Row("a killed run's last two events deleted", sql("DELETE FROM events WHERE seq >= 3"),
        base="live"),
    Row("**the run deleted whole** (its row and its events)",
        sql("DELETE FROM events", "DELETE FROM runs")),
    Row("**the journal replaced** by a new, empty one", replaced),
    Row("a run file's answer (`$.record` and `$.run.record`)",
        exported(_answer("$.record"), _answer("$.run.record")), surface="run file"),
    Row("a run file's `$.record` alone", exported(_answer("$.record")), surface="run file"),
    Row("a run file exported after the run was reopened", exported(before=sql(*REOPEN)),
        surface="run file"),
    Row("a record file's answer (`verify --record FILE`)", record_file_answer,
        surface="record file"),
)  # fmt: skip


# --- the base runs ------------------------------------------------------------------------------


@attrs.frozen
class Bases:
    dirs: dict[tuple[Base, Mode], Case]


def _completed(where: Path, mode: Mode) -> Case:
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(KEY_FILE_ENV, raising=False)
        mp.delenv(WITNESS_ENV, raising=False)
        if mode == "keyed":
            mp.setenv(KEY_ENV, KEY)
            mp.setenv(WITNESS_ENV, str(where / "witness.log"))
        else:
            mp.delenv(KEY_ENV, raising=False)
        record = lab_run(where, [LOOKUP, ANSWER])
    return Case(where, record.run_id)


def _killed(where: Path, mode: Mode) -> Case:
    """A real `fsm-agent run` killed with SIGKILL while its tool call (seq 4) hangs."""
    script = where / "model.json"
    hang = {"tool_call": {"name": "hang", "args": {"seconds": 30}}}
    script.write_text(json.dumps([LOOKUP, hang]), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in (KEY_ENV, KEY_FILE_ENV, WITNESS_ENV)}
    if mode == "keyed":
        env |= {KEY_ENV: KEY, WITNESS_ENV: str(where / "witness.log")}
    cmd = [sys.executable, "-m", "fsm_agent", "run", "agent_loop", "--task", "Find it",
           "--model", f"scripted:{script}", "--tools", LAB_TOOLS, "--allow", "lookup,hang",
           "--db", str(where / "j.db"), "--record", str(where / "r.json"), "--quiet"]  # fmt: skip
    child = subprocess.Popen(cmd, env=env, cwd=where, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while _last_seq(where / "j.db") < 4:
            assert child.poll() is None, "the run ended before its tool call hung"
            assert time.monotonic() < deadline, "the run never reached its tool call"
            time.sleep(0.02)
        if mode == "keyed":  # the witness line follows the commit
            while '"seq":4' not in (where / "witness.log").read_text():
                time.sleep(0.01)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    conn = sqlite3.connect(where / "j.db")
    (run_id,) = conn.execute("SELECT run_id FROM runs").fetchone()
    conn.close()
    return Case(where, run_id)


def _last_seq(db: Path) -> int:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT max(seq) FROM events").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return -1
    return -1 if row is None or row[0] is None else int(row[0])


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> Bases:
    dirs: dict[tuple[Base, Mode], Case] = {}
    for mode in ("unkeyed", "keyed"):
        dirs["done", mode] = _completed(tmp_path_factory.mktemp(f"done-{mode}"), mode)
        dirs["live", mode] = _killed(tmp_path_factory.mktemp(f"live-{mode}"), mode)
    return Bases(dirs)


def _copy(base: Case, where: Path) -> Case:
    shutil.copytree(base.dir, where)
    return Case(where, base.run_id)


# --- the cells ----------------------------------------------------------------------------------


def invoke(args: list[str], env: dict[str, str | None]) -> Result:
    return CliRunner().invoke(cli, args, env=env, catch_exceptions=False)


def _column_env(column: str, c: Case) -> dict[str, str | None]:
    env: dict[str, str | None] = {KEY_ENV: None, KEY_FILE_ENV: None, WITNESS_ENV: None}
    if column in ("keyed", "keyed + witness"):
        env[KEY_ENV] = KEY
    if column == "keyed + witness":
        env[WITNESS_ENV] = str(c.witness)
    return env


def _verify_args(column: str, row: Row, c: Case) -> list[str]:
    if row.surface == "run file":
        args = ["verify", str(c.run_file)]
    elif row.surface == "record file":
        args = ["verify", c.run_id, "--db", str(c.db), "--record", str(c.record)]
    else:
        args = ["verify", "--all", "--db", str(c.db)]
    if column != "unkeyed":
        args.append("--require-keyed")
    if column == "keyed + witness":
        args += ["--witness", str(c.witness)]
    return [*args, "--json"]


def said(result: Result, edited: bool) -> str:
    """What verify said, in a few words: each kind found, at its first seq (and the row or
    record fields), or that a run is not proven or not checked, or nothing found (for an
    edit: not detected)."""
    if result.exit_code not in (0, 1):
        return f"error (exit {result.exit_code})"
    reports = json.loads(result.output)
    if result.exit_code == 0:
        what = "`ok`" if reports else "no run to check"
        return f"**not detected** ({what})" if edited else what
    parts: list[str] = []
    for report in reports:
        kinds: dict[str, tuple[int, list[str]]] = {}
        for f in report["findings"]:
            seq, fields = kinds.setdefault(f["kind"], (f["seq"], []))
            if f["field"] not in (None, "witness") and f["field"] not in fields:
                fields.append(f["field"])
        for kind, (seq, fields) in kinds.items():
            where = f" ({', '.join(f'`{x}`' for x in fields)})" if fields else ""
            parts.append(f"`{kind}` at {seq}{where}")
        if not report["findings"]:
            parts.append("`UNCHECKED`" if not report["checked"] else "`UNPROVEN` (not sealed)")
    return ", ".join(parts)


def cell(column: str, row: Row, c: Case) -> str:
    env = _column_env(column, c)
    edited = not row.label.startswith("(no edit)")
    text = said(invoke(_verify_args(column, row, c), env), edited)
    if row.surface == "journal":
        shown = invoke(["show", c.run_id, "--db", str(c.db)], env).exit_code
        replayed = invoke(["replay", c.run_id, "--db", str(c.db)], env).exit_code
        return f"{text} · show {shown} · replay {replayed}"
    if row.surface == "run file":
        shown = invoke(["show", str(c.run_file)], env).exit_code
        replayed = invoke(["replay", str(c.run_file)], env).exit_code
        return f"{text} · show {shown} · replay {replayed}"
    return text


def table(bases: Bases, scratch: Path) -> str:
    lines = [
        f"| edit | {' | '.join(COLUMNS)} |",
        f"| --- | {' | '.join('---' for _ in COLUMNS)} |",
    ]
    for number, row in enumerate(ROWS):
        cells: dict[str, str] = {}
        for mode in row.modes:
            c = _copy(bases.dirs[row.base, mode], scratch / f"{number}-{mode}")
            row.edit(c)
            columns = COLUMNS[:1] if mode == "unkeyed" else COLUMNS[1:]
            cells |= {column: cell(column, row, c) for column in columns}
        lines.append(f"| {row.label} | {' | '.join(cells.get(x, '—') for x in COLUMNS)} |")
    return "\n".join(lines) + "\n"


def _readme_block(text: str) -> re.Match[str]:
    match = re.search(rf"(<!-- {MARK} -->\n)(.*?)(<!-- /{MARK} -->)", text, re.S)
    assert match, f"README.md has no <!-- {MARK} --> block"
    return match


@pytest.fixture(scope="module")
def computed(bases: Bases, tmp_path_factory: pytest.TempPathFactory) -> str:
    return table(bases, tmp_path_factory.mktemp("cells"))


def test_the_readme_tamper_table_is_what_verify_does(computed: str) -> None:
    text = README.read_text(encoding="utf-8")
    match = _readme_block(text)
    if os.environ.get(WRITE_ENV):
        README.write_text(text[: match.start(2)] + computed + text[match.end(2) :], "utf-8")
        return
    assert match.group(2) == computed, (
        "the README's tamper table is not what the code does; write it with"
        f" {WRITE_ENV}=1 pytest tests/test_tamper_matrix.py and read the difference"
    )


def _cells(computed: str) -> Iterator[tuple[str, dict[str, str]]]:
    for line in computed.splitlines()[2:]:
        label, *cells = [x.strip() for x in line.strip("|").split(" | ")]
        yield label, dict(zip(COLUMNS, cells, strict=True))


def test_with_a_witness_every_edit_is_found_and_keyed_no_unsealed_run_is_ok(
    computed: str,
) -> None:
    for label, cells in _cells(computed):
        if label.startswith("(no edit)"):
            assert cells["keyed + witness"].startswith("`ok`"), label
            continue
        assert "not detected" not in cells["keyed + witness"], label
        if "deleted whole" not in label and "journal replaced" not in label:
            # only a witness can show what is no longer there at all
            assert "not detected" not in cells["keyed"], label
        assert (
            "not detected" not in cells["keyed, no key given"]
            or "deleted" in label
            or ("replaced" in label)
        ), label
    rows = dict(_cells(computed))
    killed = rows["(no edit) a run killed mid-way, as it was left"]
    assert killed["keyed"].startswith("`UNPROVEN`"), killed  # keyed, not sealed: never ok
    reopened = next(v for k, v in rows.items() if "reopened**" in k)
    assert reopened["keyed"].startswith("`UNPROVEN`")
    assert "`reopened` at 4" in reopened["keyed + witness"]


def test_the_reopened_run_through_the_real_command(bases: Bases, tmp_path: Path) -> None:
    """The tester's case (issue 27), by the installed entry point in its own process."""
    c = _copy(bases.dirs["done", "keyed"], tmp_path / "case")
    insider(c.db, *REOPEN)
    env = {k: v for k, v in os.environ.items() if k not in (KEY_FILE_ENV, WITNESS_ENV)}
    env[KEY_ENV] = KEY

    def fsm_agent(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "fsm_agent", *args, "--db", str(c.db)],
                              env=env, capture_output=True, text=True, timeout=120)  # fmt: skip

    plain = fsm_agent("verify", "--all", "--require-keyed")
    assert plain.returncode == 1, plain.stdout
    assert plain.stdout.startswith(f"UNPROVEN  {c.run_id}  1 events  keyed, not sealed:")
    witnessed = fsm_agent("verify", "--all", "--require-keyed", "--witness", str(c.witness))
    assert witnessed.returncode == 1, witnessed.stdout
    assert witnessed.stdout.splitlines()[0].startswith(f"witness: {c.witness} (5 lines")
    assert "seq 4: reopened (witness): the witness saw the run halt at seq 4" in witnessed.stdout
