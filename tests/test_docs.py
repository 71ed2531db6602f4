"""The README stays true: its tables match the code, its example runs, every command is in it."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from fsm_agent.cli.group import all_commands
from fsm_agent.halt import TERMINAL_STATE, HaltReason
from fsm_agent.runtime.guards import BUILTIN_GUARDS

README = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")


def _block(marker: str) -> str:
    match = re.search(rf"<!-- {marker} -->\n(.*?)<!-- /{marker} -->", README, re.S)
    assert match, f"README has no <!-- {marker} --> block"
    return match.group(1)


def _table_rows(marker: str) -> list[list[str]]:
    rows = []
    for line in _block(marker).splitlines():
        if line.startswith("| `"):
            rows.append([cell.strip().strip("`") for cell in line.strip("|").split("|")])
    return rows


def test_halt_table_is_the_enum_and_its_terminal_states() -> None:
    rows = {r[0]: r[1] for r in _table_rows("halt-table")}
    assert rows == {reason.value: state for reason, state in TERMINAL_STATE.items()}
    assert set(rows) == {r.value for r in HaltReason}


def test_guard_table_lists_every_builtin_guard() -> None:
    assert [r[0] for r in _table_rows("guard-table")] == list(BUILTIN_GUARDS)


def test_library_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = re.search(r"```python\n(.*?)```", _block("library-example"), re.S)
    assert code
    monkeypatch.chdir(tmp_path)
    exec(compile(code.group(1), "README.md", "exec"), {"__name__": "readme_example"})  # noqa: S102
    assert (tmp_path / "halt-contract.json").is_file()
    assert (tmp_path / "fsm-agent.db").is_file()


def _commands() -> dict[str, click.Command]:
    return all_commands()


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_command_has_help_and_a_readme_section(name: str) -> None:
    command = _commands()[name]
    assert command.help, f"`fsm-agent {name}` has no help text"
    section = re.search(rf"### fsm-agent {name}\n(.*?)(?=\n### |\n## |\Z)", README, re.S)
    assert section, f"README has no '### fsm-agent {name}' section"
    for param in command.params:
        if isinstance(param, click.Option):
            flag = max(param.opts, key=len)
            assert flag in section.group(1), f"README section for {name} misses {flag}"


def test_quick_start_is_exactly_the_two_commands() -> None:
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```\n(pip install[^\n]*)\n```", quick)
    assert commands == [
        "pip install -e . && fsm-agent demo",
        "pip install -e '.[test]' && pytest",
    ]
