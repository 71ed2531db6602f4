"""Run ids are checked where they enter (`run(run_id=…)`, `submit`, `import`), stay legible
in messages however long, and never put a file outside its directory; a journal holding an
id from before the grammar is still read by every command.

Through the real CLI on real SQLite files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner

from fsm_agent import load_tools, run
from fsm_agent.adapters.models import ScriptedModel
from fsm_agent.cli.main import cli
from fsm_agent.journal.runfile import read_run_file, write_run_file
from fsm_agent.run_ids import BadRunId, is_run_id
from fsm_agent.submission import frozen_job
from tests.lab import LOOKUP, rechained

PROPER = Path(__file__).parent.parent / "examples" / "halt_lab" / "proper.json"
BAD_IDS = ["../../x", "/abs/x", "", ".hidden", "a b", "run/1", "é", "a" * 65, "-x", "x\n"]
LONG = "a" * 5000


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def lab(db: Path, record: Path, **options: Any) -> Any:
    return run(
        "agent_loop",
        task="Find the lab password",
        model=ScriptedModel([LOOKUP, {"answer": "swordfish"}]),
        tools=load_tools("fsm_agent.examples.halt_lab.tools"),
        allow=("lookup", "slow_lookup", "hang"),
        store=db,
        record_path=record,
        **options,
    )


def test_the_grammar() -> None:
    assert all(is_run_id(i) for i in ["a", "0", "A.b_c-1", "a" * 64, "3f2a9c0d1e4b", "x..y"])
    assert not any(is_run_id(i) for i in BAD_IDS)


@pytest.mark.parametrize("bad", BAD_IDS)
def test_run_refuses_a_run_id_outside_the_grammar_before_it_starts(
    bad: str, tmp_path: Path
) -> None:
    with pytest.raises(BadRunId, match=r"run_id .* is not a run id"):
        lab(tmp_path / "j.db", tmp_path / "r.json", run_id=bad)
    assert not (tmp_path / "j.db").exists()
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("bad", ["../../x", "/abs/x", LONG])
def test_submit_refuses_a_run_id_outside_the_grammar(bad: str, tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    result = invoke("submit", "agent_loop", "--task", "t", "--run-id", bad, "--db", str(db))
    assert result.exit_code == 2, result.output
    assert "Error: --run-id" in result.output
    assert "is not a run id" in result.output
    assert len(result.output) < 400  # a long id is cut, its length said
    assert not db.exists()
    with pytest.raises(BadRunId):
        frozen_job("agent_loop", "t", run_id=bad)


def test_a_submitted_run_takes_a_run_id_in_the_grammar() -> None:
    assert frozen_job("agent_loop", "t", run_id="nightly-7.a").run_id == "nightly-7.a"


def test_import_refuses_a_run_file_whose_id_is_outside_the_grammar(tmp_path: Path) -> None:
    record = lab(tmp_path / "a.db", tmp_path / "r.json")
    exported = tmp_path / "run.json"
    assert invoke("export", record.run_id, "-o", str(exported), "--db",
                  str(tmp_path / "a.db")).exit_code == 0  # fmt: skip
    original = read_run_file(exported)
    bad = "../../escaped"
    events = tuple(attrs.evolve(e, run_id=bad) for e in original.events)
    assert original.record is not None
    forged = rechained(
        attrs.evolve(
            original,
            run=attrs.evolve(original.run, run_id=bad),
            events=events,
            record=attrs.evolve(original.record, run_id=bad),
        )
    )
    write_run_file(forged, exported)
    assert invoke("verify", str(exported)).exit_code == 0  # a sound file: only its id is bad
    result = invoke("import", str(exported), "--db", str(tmp_path / "b.db"))
    assert result.exit_code == 2, result.output
    assert "is not a run id" in result.output
    assert "@ $.run.run_id" in result.output


@pytest.mark.parametrize("command", ["verify", "replay", "report", "show", "export", "pause"])
def test_a_5000_character_id_is_a_clear_invalid_input(command: str, tmp_path: Path) -> None:
    db = tmp_path / "j.db"
    lab(db, tmp_path / "r.json")
    extra = {"report": ["-o", str(tmp_path / "x.html")], "export": ["-o", str(tmp_path / "x")],
             "pause": ["--why", "w"]}.get(command, [])  # fmt: skip
    result = invoke(command, LONG, "--db", str(db), *extra)
    assert result.exit_code == 2, result.output
    assert "is not a run id" in result.output
    assert "(5,000 characters)" in result.output
    assert len(result.output) < 500


# --- journals from before the grammar ----------------------------------------------------------


@pytest.fixture
def legacy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A journal with a run whose id an older fsm-agent accepted (`../../legacy run`)."""
    rid = "../../legacy run"
    with monkeypatch.context() as m:
        m.setattr("fsm_agent.runtime.worker.check_run_id", lambda value, **_: value)
        lab(tmp_path / "old.db", tmp_path / "r.json", run_id=rid)
    return tmp_path / "old.db", rid


def test_a_legacy_id_is_still_read_by_every_command(
    legacy: tuple[Path, str], tmp_path: Path
) -> None:
    db, rid = legacy
    for args in (
        ["show", rid],
        ["show", rid, "--json"],
        ["replay", rid],
        ["verify", rid],
        ["export", rid, "-o", str(tmp_path / "legacy.json")],
        ["report", rid, "-o", str(tmp_path / "legacy.html")],
        ["runs"],
        ["stats"],
    ):
        result = invoke(*args, "--db", str(db))
        assert result.exit_code == 0, (args, result.output)
    assert read_run_file(tmp_path / "legacy.json").run.run_id == rid
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("old.db")) == [
        "legacy.html", "legacy.json", "r.json",
    ]  # fmt: skip
