"""The conventions every `fsm-agent` command keeps: `-V`, run ids by prefix or `@latest`,
`runs` filters, one `--json`, shell completion, every exit code of `run` in its help, and
help texts that speak of the project's own concepts.

Through the real CLI on real SQLite files (and a real `fsm-agent` subprocess for completion).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from fsm_agent.cli.group import all_commands
from fsm_agent.cli.main import cli
from fsm_agent.halt import HaltReason, exit_code
from tests.lab import LOOKUP, lab_run

ROOT = Path(__file__).parent.parent
IDS = ("3f2a9c0d1e4b", "3f88e1a0b2c4", "77aa00bb11cc")  # started in this order


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def journal(tmp_path: Path) -> str:
    """A journal with three finished lab runs (the last one started last)."""
    for n, run_id in enumerate(IDS):
        replies: list[Any] = [LOOKUP, {"answer": "swordfish"}] if n != 1 else [LOOKUP] * 9
        lab_run(tmp_path, replies, run_id=run_id, store=tmp_path / "j.db")
    return str(tmp_path / "j.db")


def test_dash_capital_v_is_the_version() -> None:
    runner = CliRunner()
    short, long = (
        runner.invoke(cli, [flag], prog_name="fsm-agent") for flag in ("-V", "--version")
    )
    assert short.exit_code == long.exit_code == 0
    assert short.output == long.output
    assert re.fullmatch(r"fsm-agent, version \S+\n", short.output)


# --- run ids ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["show"],
        ["show", "--json"],
        ["replay"],
        ["verify"],
        ["export", "-o", "{tmp}/out.json"],
        ["report", "-o", "{tmp}/out.html"],
    ],
)
def test_every_run_id_argument_takes_a_unique_prefix_and_latest(
    journal: str, tmp_path: Path, command: list[str]
) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    for given, meant in [("3f88", IDS[1]), ("77", IDS[2]), ("@latest", IDS[2]), (IDS[0], IDS[0])]:
        result = invoke(args[0], given, *args[1:], "--db", journal)
        assert result.exit_code in (0, 1), result.output  # 1: replay/verify verdicts
        assert meant in result.stdout
        others = set(IDS) - {meant}
        assert not any(o in result.stdout for o in others)


def test_diagram_run_takes_a_prefix(journal: str) -> None:
    result = invoke("diagram", "agent_loop", "--run", "3f2", "--db", journal)
    assert result.exit_code == 0, result.output
    assert "halt" in result.stdout
    result = invoke("diagram", "agent_loop", "--run", "3f", "--db", journal)
    assert result.exit_code == 2
    assert "ambiguous" in result.stderr


def test_an_ambiguous_prefix_is_exit_2_listing_the_runs(journal: str) -> None:
    for command in (["show"], ["replay"], ["verify"], ["pause", "--why", "x"]):
        result = invoke(command[0], "3f", *command[1:], "--db", journal)
        assert result.exit_code == 2
        assert result.stdout == ""
        assert "Error: run id prefix '3f' is ambiguous in " in result.stderr
        assert f"it starts 2 runs' ids ({IDS[0]}, {IDS[1]}); give more of the id" in result.stderr


def test_a_prefix_that_starts_no_id_is_exit_2(journal: str) -> None:
    result = invoke("show", "3f3", "--db", journal, "--json")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "Error: no run '3f3' in " in result.stderr


def test_latest_on_an_empty_journal_says_there_is_none(tmp_path: Path) -> None:
    assert invoke("migrate", "--db", str(tmp_path / "e.db")).exit_code == 0
    result = invoke("show", "@latest", "--db", str(tmp_path / "e.db"))
    assert result.exit_code == 2
    assert "Error: @latest: no run in " in result.stderr


def test_a_prefix_is_a_run_not_a_file_unless_the_file_is_there(
    journal: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("@latest").write_text("not a run file", encoding="utf-8")  # never read as one
    Path("notes.txt").write_text("x", encoding="utf-8")
    for given in ("@latest", "77aa", "3f88"):
        result = invoke("replay", given, "--db", journal, "--json")
        assert result.exit_code == 0, result.output
    exported = invoke("export", "77", "-o", "77aa.json", "--db", journal)
    assert exported.exit_code == 0
    assert json.loads(invoke("verify", "77aa.json", "--json").stdout)[0]["run_id"] == IDS[2]


def test_resume_and_raise_budget_resolve_before_they_refuse(journal: str) -> None:
    result = invoke("raise-budget", "77", "--max-steps", "99", "--why", "x", "--db", journal)
    assert result.exit_code == 2
    assert f"run {IDS[2]} has halted" in result.stderr
    result = invoke("resume", "@latest", "--model", "scripted:/dev/null", "--db", journal)
    assert result.exit_code == 2


# --- runs filters -----------------------------------------------------------------------------


def listed(*args: str) -> list[str]:
    result = invoke("runs", *args, "--json")
    assert result.exit_code == 0, result.output
    return [r["run_id"] for r in json.loads(result.stdout)]


def test_runs_filters_combine_and_the_limit_comes_after_them(journal: str) -> None:
    assert listed("--db", journal) == list(reversed(IDS))
    assert listed("--db", journal, "--halt-reason", "completed") == [IDS[2], IDS[0]]
    assert listed("--db", journal, "--halt-reason", "completed", "--limit", "1") == [IDS[2]]
    assert listed("--db", journal, "--halt-reason", "max_steps") == [IDS[1]]
    assert listed("--db", journal, "--machine", "agent_loop", "--status", "halted") == list(
        reversed(IDS)
    )
    assert listed("--db", journal, "--machine", "payments_retry") == []
    assert listed("--db", journal, "--status", "running") == []
    assert listed("--db", journal, "--status", "interrupted") == []
    assert listed("--db", journal, "--since", "1h", "--until", "2099-01-01") == list(reversed(IDS))
    assert listed("--db", journal, "--until", "1h") == []
    assert listed("--db", journal, "--since", "2099-01-01") == []
    text = invoke("runs", "--db", journal, "--since", "2099-01-01")
    assert text.output == f"no runs in {journal} match\n"


def test_running_and_interrupted_are_told_apart_by_the_process(tmp_path: Path) -> None:
    import socket

    import attrs

    from fsm_agent.stores.sqlite import SqliteStore
    from tests.test_store_contract import run_row, started

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    db = tmp_path / "j.db"
    store = SqliteStore(db)
    try:
        here = socket.gethostname()
        for run_id, pid, at in [("live", os.getpid(), "01"), ("dead", int(gone.stdout), "02"),
                                ("dead2", int(gone.stdout), "03")]:  # fmt: skip
            row = attrs.evolve(run_row(run_id, f"2026-01-{at}"), pid=pid, host=here)
            store.start_run(row, started(run_id))
    finally:
        store.close()
    assert listed("--db", str(db), "--status", "running") == ["live"]
    assert listed("--db", str(db), "--status", "interrupted") == ["dead2", "dead"]
    assert listed("--db", str(db), "--status", "interrupted", "--limit", "1") == ["dead2"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--halt-reason", "done"], "Invalid value for '--halt-reason': 'done' is not one of"),
        (["--status", "dead"], "Invalid value for '--status': 'dead' is not one of"),
        (["--since", "yesterday"], "--since 'yesterday': not an ISO date or timestamp"),
        (["--until", "3 days"], "--until '3 days': not an ISO date or timestamp"),
        (["--since", "999999999w"], "--since '999999999w': before the year 1"),
        (["--since", "1h", "--until", "2h"], "--since 1h is after --until 2h"),
    ],
)
def test_a_bad_runs_filter_is_exit_2_naming_it(journal: str, args: list[str], message: str) -> None:
    result = invoke("runs", "--db", journal, *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_halt_reason_choices_are_the_enum() -> None:
    option = next(p for p in all_commands()["runs"].params if p.name == "halt_reason")
    assert isinstance(option.type, click.Choice)
    assert list(option.type.choices) == [r.value for r in HaltReason]


# --- --json -----------------------------------------------------------------------------------

#: Commands whose output is not a result: the worker serves, the console serves pages, diagram
#: prints the diagram, and
#: schema prints a JSON Schema (a JSON document already).
NO_JSON = {"worker", "diagram", "schema", "console"}


@pytest.mark.parametrize("name", sorted(all_commands()))
def test_every_command_that_prints_a_result_has_one_json_flag(name: str) -> None:
    command = all_commands()[name]
    flags = [o for p in command.params for o in getattr(p, "opts", []) if "json" in o]
    if name in NO_JSON:
        assert flags == []
    else:
        assert "--json" in flags, f"`fsm-agent {name}` has no --json"
        assert set(flags) <= {"--json"}, flags


def as_json(*args: str) -> Any:
    result = invoke(*args, "--json")
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_json_shapes_of_the_commands_that_had_none(journal: str, tmp_path: Path) -> None:
    db = ["--db", journal]
    assert set(as_json("validate", "agent_loop")) == {
        "ok", "machine", "states", "transitions", "sha256", "source"
    }  # fmt: skip
    assert as_json("lint", "agent_loop") == []
    lint = as_json("lint", str(ROOT / "tests" / "lint_fixtures" / "HP001-fail.yaml"))
    assert [f["code"] for f in lint] == ["CK002", "HP001", "CK005"]  # with check
    assert set(as_json("export", "@latest", "-o", str(tmp_path / "x.json"), *db)) == {
        "run_id", "events", "output", "chain", "chain_ok"
    }  # fmt: skip
    imported = as_json("import", str(tmp_path / "x.json"), "--db", str(tmp_path / "k.db"))
    assert imported["run_id"] == IDS[2]
    report = as_json("report", "77", "-o", str(tmp_path / "r.html"), *db)
    assert report == {
        "run_id": IDS[2], "output": str(tmp_path / "r.html"), "chain_ok": True,
        "replay": report["replay"],
    }  # fmt: skip
    assert report["replay"].startswith("replay matches:")
    assert as_json("migrate", *db) == {"journal": journal, "up_to_date": True}
    assert as_json("freeze-routing", "--why", "t", *db)["routing"] == "frozen"
    assert as_json("unfreeze-routing", "--why", "t", *db)["routing"] == "unfrozen"


def test_demo_json(tmp_path: Path) -> None:
    data = as_json("demo", "--db", str(tmp_path / "d.db"))
    assert data["ok"] is True
    assert {s["halt_reason"] for s in data["scenarios"]} >= {"completed", "max_steps"}
    assert all(s["ok"] and s["halt_reason"] == s["expected"] for s in data["scenarios"])


def test_lint_format_json_is_kept_and_the_same_as_json() -> None:
    fixture = str(ROOT / "tests" / "lint_fixtures" / "HP004-fail.yaml")
    old = invoke("lint", fixture, "--format", "json")
    new = invoke("lint", fixture, "--json")
    assert old.exit_code == new.exit_code == 1
    assert old.stdout == new.stdout
    assert json.loads(new.stdout)


def test_an_error_under_json_is_a_message_on_stderr_and_the_code(tmp_path: Path) -> None:
    for args in (["validate", "no_such_machine"], ["show", "x", "--db", str(tmp_path / "no.db")]):
        result = invoke(*args, "--json")
        assert result.exit_code == 2
        assert result.stdout == ""
        assert result.stderr.startswith("Error: ")


# --- shell completion -------------------------------------------------------------------------


@pytest.mark.parametrize(("shell", "marker"), [("bash", "complete -o"), ("zsh", "compdef"),
                                               ("fish", "complete --no-files")])  # fmt: skip
def test_the_completion_script_comes_from_the_entry_point(shell: str, marker: str) -> None:
    env = os.environ | {"_FSM_AGENT_COMPLETE": f"{shell}_source"}
    done = subprocess.run([sys.executable, "-m", "fsm_agent"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert marker in done.stdout
    assert "_FSM_AGENT_COMPLETE" in done.stdout


def test_completion_completes_commands_and_choices() -> None:
    def complete(words: str) -> list[str]:
        cword = len(words.split()) - (not words.endswith(" "))
        env = os.environ | {"_FSM_AGENT_COMPLETE": "bash_complete", "COMP_WORDS": words,
                            "COMP_CWORD": str(cword)}  # fmt: skip
        done = subprocess.run([sys.executable, "-m", "fsm_agent"], env=env,
                              capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
        return [line.split(",", 1)[1] for line in done.stdout.splitlines()]

    assert complete("fsm-agent ru") == ["run", "runs"]
    assert complete("fsm-agent runs --status ") == [
        "running",
        "interrupted",
        "paused",
        "waiting",
        "halted",
    ]


# --- run --help and its exit codes ------------------------------------------------------------


def help_exit_codes(name: str) -> dict[str, str]:
    text = CliRunner().invoke(cli, [name, "--help"], terminal_width=200).output
    block = text.split("Exit codes:\n", 1)[1].split("\n\n", 1)[0]
    entries: dict[str, str] = {}
    for line in block.splitlines():
        match = re.match(r"\s+(\d+|128\+N)\s+(.*)", line)
        if match:
            code, entries[code] = match.group(1), match.group(2)
        else:
            entries[code] += " " + line.strip()
    return entries


def test_run_help_lists_every_exit_code_the_command_returns() -> None:
    entries = help_exit_codes("run")
    from_halts = {str(exit_code(r)) for r in HaltReason}
    assert set(entries) == from_halts | {"2", "70", "75", "128+N"}
    for reason in HaltReason:  # each halt is named where its code is
        assert reason.value in entries[str(exit_code(reason))], reason
    assert str(exit_code(HaltReason.INTERRUPTED, 15)) == "143"
    assert "143 SIGTERM" in entries["128+N"]


# --- the project's own words ------------------------------------------------------------------

#: "seed" as the name of a source document (`seed 000`, "the seeds"); a random `--seed` is fine.
SOURCE_DOCUMENT = re.compile(r"(?i)(?<!-)(?<!random )\bseeds?\b")


def every_help() -> list[tuple[str, str]]:
    texts = [("fsm-agent", invoke("--help").output)]
    for name in sorted(all_commands()):
        texts.append((name, invoke(name, "--help").output))
    return texts


def test_no_help_text_names_a_source_document() -> None:
    for name, text in every_help():
        assert "seed 0" not in text.lower(), name
        assert not SOURCE_DOCUMENT.search(text), (name, SOURCE_DOCUMENT.search(text))


def test_no_lint_text_names_a_source_document() -> None:
    from fsm_agent.declaration.lint import CHECKLIST, COVERAGE, RULES, lint_paths
    from fsm_agent.declaration.policy import default_policy_path

    texts = [*CHECKLIST.values(), *COVERAGE.values(), *RULES.values()]
    for fixture in sorted((ROOT / "tests" / "lint_fixtures").glob("*-fail*.yaml")):
        texts += [str(f) for f in lint_paths(str(fixture), str(default_policy_path()))]
    assert len(texts) > 40
    for text in texts:
        assert not SOURCE_DOCUMENT.search(text), text


def test_no_public_docstring_or_shipped_file_names_a_source_document() -> None:
    import importlib
    import inspect
    import pkgutil

    import fsm_agent

    for info in pkgutil.iter_modules(fsm_agent.__path__):
        if info.name == "__main__":  # importing it runs the command
            continue
        module = importlib.import_module(f"fsm_agent.{info.name}")
        docs = [(info.name, module.__doc__ or "")]
        for name, member in vars(module).items():
            if not name.startswith("_") and (inspect.isfunction(member) or inspect.isclass(member)):
                docs.append((f"{info.name}.{name}", inspect.getdoc(member) or ""))
        for where, doc in docs:
            assert not SOURCE_DOCUMENT.search(doc), where
    shipped = [*ROOT.joinpath("machines").glob("*.y*ml"), *ROOT.joinpath("examples").rglob("*")]
    for path in shipped:
        if path.is_file() and path.suffix in {".py", ".yaml", ".yml", ".json"}:
            assert not SOURCE_DOCUMENT.search(path.read_text(encoding="utf-8")), path


def test_relative_times_count_back_from_now_and_stats_takes_them(journal: str) -> None:
    import datetime

    from fsm_agent.review.stats import time_key

    now = datetime.datetime(2026, 1, 10, 12, tzinfo=datetime.UTC)
    assert time_key("90m", now=now) == "2026-01-10T10:30:00.000+00:00"
    assert time_key("2d", now=now) == "2026-01-08T12:00:00.000+00:00"
    assert time_key("1w", now=now) == "2026-01-03T12:00:00.000+00:00"
    assert time_key("45s", now=now) == "2026-01-10T11:59:15.000+00:00"
    assert time_key("2026-01-31T12:00:00+02:00") == "2026-01-31T10:00:00.000+00:00"
    counted = json.loads(invoke("stats", "--db", journal, "--since", "1h", "--json").stdout)
    assert sum(m["runs"] for m in counted["machines"]) == len(IDS)
    none = json.loads(invoke("stats", "--db", journal, "--since", "0s", "--json").stdout)
    assert none["machines"] == []
