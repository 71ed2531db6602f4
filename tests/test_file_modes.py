"""The mode of every file fsm-agent writes, under the umask the user runs it with.

What holds a whole run (the journal and its -wal/-shm files, run files, trace copies) is
private, 0600, whatever the umask; what is made to be read (halt records, the HTML report,
diagrams) is 0666 less the umask. Each command runs as a real
`python -m fsm_agent` subprocess started with the umask (`subprocess.run(umask=...)`): the
test process's own umask is never touched.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

LAB = Path(__file__).parent.parent / "examples" / "halt_lab"
PROPER = f"scripted:{LAB / 'proper.json'}"
TOOLS = "fsm_agent.examples.halt_lab.tools"


def cli(folder: Path, umask: int, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "fsm_agent", *args],
        cwd=folder,
        umask=umask,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def run_everything(folder: Path, umask: int) -> None:
    """A run with its record and trace copy, then its export, report and two diagrams."""
    cli(
        folder, umask, "run", "agent_loop", "--task", "Find the lab password", "--model", PROPER,
        "--tools", TOOLS,
        "--allow", "lookup,slow_lookup,hang",
        "--db", "j.db", "--record", "r.json", "--trace-copy", "trace.json",
        "--quiet",
    )  # fmt: skip
    run_id = json.loads((folder / "r.json").read_text())["run_id"]
    cli(folder, umask, "export", run_id, "-o", "run.json", "--db", "j.db")
    cli(folder, umask, "report", run_id, "-o", "report.html", "--db", "j.db")
    cli(folder, umask, "diagram", "agent_loop", "-o", "d.md")
    cli(folder, umask, "diagram", "agent_loop", "--format", "svg", "-o", "d.svg")


#: what holds a whole run
PRIVATE = ("j.db", "trace.json", "run.json")
#: what is made to be read
REVIEW = ("r.json", "report.html", "d.md", "d.svg")


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077, 0o027])
def test_private_files_are_0600_and_what_is_made_to_be_read_follows_the_umask(
    umask: int, tmp_path: Path
) -> None:
    run_everything(tmp_path, umask)
    for name in PRIVATE:
        assert mode(tmp_path / name) == 0o600, name
    for name in REVIEW:
        assert mode(tmp_path / name) == 0o666 & ~umask, name
    leftovers = sorted(p.name for p in tmp_path.iterdir())  # no temporary file is left behind
    assert leftovers == sorted({*PRIVATE, *REVIEW} | {n for n in leftovers if "j.db-" in n})


@pytest.mark.parametrize("umask", [0o002, 0o077])
def test_the_journals_wal_and_shm_files_are_private(umask: int, tmp_path: Path) -> None:
    """SQLite makes -wal and -shm with the journal's own mode; they exist while it is open."""
    script = (
        "import os, stat, sys\n"
        "from fsm_agent.stores.sqlite import SqliteStore\n"
        "store = SqliteStore('j.db')\n"
        "store.list_runs()\n"
        "print(' '.join(oct(stat.S_IMODE(os.stat(n).st_mode)) for n in"
        " ('j.db', 'j.db-wal', 'j.db-shm')))\n"
        "store.close()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, umask=umask, capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0o600", "0o600", "0o600"]


def test_an_existing_journal_keeps_its_mode(tmp_path: Path) -> None:
    db = tmp_path / "j.db"
    db.touch(mode=0o640)
    db.chmod(0o640)
    cli(
        tmp_path, 0o022, "run", "agent_loop", "--task", "t", "--model", PROPER, "--tools",
        TOOLS,
        "--allow", "lookup,slow_lookup,hang",
        "--db", "j.db", "--record", "r.json", "--quiet",
    )  # fmt: skip
    assert mode(db) == 0o640
