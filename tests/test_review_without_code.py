"""Review needs only the journal (issue 27.1).

A run of a machine with a user guard (`refund_guards:over_limit`, a module beside the
author's declaration) is reviewed from another directory, where that module does not
import, through the real CLI in real processes: `show`, `export`, `stats`, `diagram --run`
and the console render everything recorded; `report` writes the whole report; only
re-deciding needs the author's code, so `replay` and the report's verdict say "replay not
run" and why, and exit 3. From the author's directory the same commands prove the halt.
"""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from fsm_agent.declaration.load import machine_path
from tests.console_server import console
from tests.lab import LAB_ALLOW_ARG, LAB_TOOLS

REPO = Path(__file__).resolve().parent.parent
GUARD = "refund_guards:over_limit"
PLAIN = "{trigger: tool_call, source: drafting, dest: tool_pending}"
#: a user guard that sends a tool call to a person first (it never fires in this run)
GUARDED = (
    f'{{trigger: tool_call, source: drafting, dest: handoff, guards: ["{GUARD}"],'
    f" halt: handoff_requested}}\n  - {PLAIN}"
)
NOT_RUN = "replay not run"
MISSING = "no module named 'refund_guards'"


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # the author's directory is not on it
    return subprocess.run([sys.executable, "-m", "fsm_agent", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.fixture(scope="module")
def journaled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """(the author's directory, a reviewer's directory, the run id): the run is in
    `review/j.db`, journaled from `author/`, where its guard module lives."""
    root = tmp_path_factory.mktemp("review")
    author, reviewer = root / "author", root / "review"
    author.mkdir()
    reviewer.mkdir()
    (author / "refund_guards.py").write_text(
        "def over_limit(snapshot):\n    return False\n", encoding="utf-8"
    )
    text = machine_path("agent_loop").read_text(encoding="utf-8")
    assert PLAIN in text
    (author / "m.yaml").write_text(text.replace(PLAIN, GUARDED, 1), encoding="utf-8")
    script = REPO / "examples" / "halt_lab" / "looping.json"
    done = cli(author, "run", "m.yaml", "--task", "Find the lab password", "--model",
               f"scripted:{script}", "--tools", LAB_TOOLS, "--allow", LAB_ALLOW_ARG,
               "--db", str(reviewer / "j.db"), "--json", "--quiet")  # fmt: skip
    assert done.returncode == 3, done.stderr  # max_steps
    return author, reviewer, json.loads(done.stdout)["run_id"]


def test_the_reviewer_has_everything_but_the_replay(journaled: tuple[Path, Path, str]) -> None:
    _, here, run_id = journaled
    shown = cli(here, "show", run_id, "--db", "j.db")
    assert shown.returncode == 0, shown.stderr
    assert "max_steps" in shown.stdout
    assert "chain: ok" in shown.stdout

    replay = cli(here, "replay", run_id, "--db", "j.db")
    assert replay.returncode == 3, replay.stderr
    assert NOT_RUN in replay.stdout
    assert MISSING in replay.stdout
    assert GUARD in replay.stdout  # which reference, and where in the declaration
    assert "Traceback" not in replay.stderr

    report = cli(here, "report", run_id, "--db", "j.db", "-o", "r.html")
    assert report.returncode == 3, report.stderr
    page = html.unescape((here / "r.html").read_text(encoding="utf-8"))
    assert "replay: not run" in page
    assert MISSING in page
    assert 'id="timeline"' in page
    assert "<svg" in page
    assert 'id="usage"' in page
    assert page.count("<tr") > 20  # every transition is on the timeline

    exported = cli(here, "export", run_id, "--db", "j.db", "-o", "run.json")
    assert exported.returncode == 0, exported.stderr
    from_file = cli(here, "report", "run.json", "-o", "f.html")
    assert from_file.returncode == 3, from_file.stderr
    assert cli(here, "replay", "run.json").returncode == 3

    stats = cli(here, "stats", "--db", "j.db")
    assert stats.returncode == 0, stats.stderr
    diagram = cli(here, "diagram", "agent_loop", "--run", run_id, "--db", "j.db",
                  "--format", "mermaid")  # fmt: skip
    assert diagram.returncode == 0, diagram.stderr
    assert "handoff" in diagram.stdout


def test_the_console_draws_the_run_and_says_why_there_is_no_replay(
    journaled: tuple[Path, Path, str],
) -> None:
    _, here, run_id = journaled
    with console(here / "j.db") as c:
        page = html.unescape(httpx.get(f"{c.url}/runs/{run_id}", timeout=30).text)
    assert "the report cannot be drawn" not in page
    assert "replay: not run" in page
    assert "refund_guards" in page
    assert 'id="timeline"' in page


def test_where_the_modules_import_the_halt_is_proven(journaled: tuple[Path, Path, str]) -> None:
    author, here, run_id = journaled
    db = str(here / "j.db")
    replay = cli(author, "replay", run_id, "--db", db)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "halt max_steps proven" in replay.stdout
    report = cli(author, "report", run_id, "--db", db, "-o", str(here / "proven.html"))
    assert report.returncode == 0, report.stderr
    assert "replay: proven from the journal" in (here / "proven.html").read_text("utf-8")
