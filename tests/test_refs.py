"""Where `package.module:function` references are found: a guard module next to its machine
file, a `--tools` or `--model python:` module in the working directory, without
`PYTHONPATH` and without changing `sys.path`; and the errors that say where they looked.

Real files in tmp directories; real `fsm-agent` and `python -m fsm_agent` subprocesses run
with `cwd` set and no `PYTHONPATH`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsm_agent import load_machine, load_tools, run
from fsm_agent.adapters.loading import load_model
from fsm_agent.declaration.refs import BadReference, import_module, resolve_callable
from fsm_agent.errors import AdapterError, MachineSpecError
from tests.lab import granted

AGENT_LOOP = (Path(__file__).parent.parent / "machines" / "agent_loop.yaml").read_text()
#: the goal edge, guarded by a user guard too
GOAL = "guards: [goal_satisfied, judge_agrees]"
CONSOLE = Path(sys.executable).parent / "fsm-agent"

TOOLS_PY = """
from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.tools import ToolRegistry, ToolResult

TOOLS = ToolRegistry()


@TOOLS.tool(side_effect=False)
def lookup(q: str = "") -> ToolResult:
    return ToolResult(receipts=(Receipt(status=200, id="r1"),), observation={"hit": q},
                      final="found " + q)


@TOOLS.tool(side_effect=False, isolation="process")
def far_lookup(q: str = "") -> ToolResult:
    return ToolResult(receipts=(Receipt(status=200, id="r2"),), observation={"hit": q},
                      final="far " + q)
"""

GUARDS_PY = """
def vetted(snapshot):
    return True


def never(snapshot):
    return False
"""

MODEL_PY = """
from fsm_agent.adapters.models import ModelReply


def model(prompt):
    return ModelReply(content={"tool_call": {"name": "lookup", "args": {"q": "x"}}})
"""


def unique(stem: str) -> str:
    """A module name no other test (nor this process) has imported."""
    return f"{stem}_{uuid.uuid4().hex[:8]}"


def machine_with_guard(folder: Path, guard: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "loop.yaml"
    text = AGENT_LOOP.replace(GOAL, f"guards: [goal_satisfied, judge_agrees, {guard}]", 1)
    assert text != AGENT_LOOP
    path.write_text(text.replace("name: agent_loop", "name: local_loop", 1))
    return path


def script(folder: Path, tool: str) -> Path:
    path = folder / "replies.json"
    path.write_text(json.dumps([{"tool_call": {"name": tool, "args": {"q": "x"}}}]))
    return path


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, str, str]]:
    """project/ (the working directory) holds a tools module; project/flows/ a machine and,
    next to it, the guard module it names."""
    tools, guards = unique("labtools"), unique("vetting")
    root = tmp_path / "project"
    machine = machine_with_guard(root / "flows", f"{guards}:vetted")
    (root / f"{tools}.py").write_text(TOOLS_PY)
    (machine.parent / f"{guards}.py").write_text(GUARDS_PY)
    before = set(sys.modules)
    yield root, tools, guards
    for name in set(sys.modules) - before:  # the modules this test imported
        if name.startswith((tools, guards)):
            del sys.modules[name]


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def fsm(cwd: Path, *args: str, console: bool = True) -> subprocess.CompletedProcess[str]:
    command = [str(CONSOLE)] if console else [sys.executable, "-m", "fsm_agent"]
    return subprocess.run(
        [*command, *args], cwd=cwd, env=clean_env(), capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("console", [True, False], ids=["fsm-agent", "python -m"])
@pytest.mark.parametrize("tool", ["lookup", "far_lookup"])
def test_a_run_finds_the_guard_next_to_its_machine_and_the_tools_in_the_cwd(
    project: tuple[Path, str, str], console: bool, tool: str
) -> None:
    root, tools, _ = project
    replies = script(root, tool)
    done = fsm(
        root, "run", "flows/loop.yaml", "--task", "look x up", "--model", f"scripted:{replies}",
        "--tools", tools, "--allow", "lookup,far_lookup", "--db", "j.db", "--record", "r.json",
        "--quiet", console=console,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = json.loads((root / "r.json").read_text())
    assert record["halt_reason"] == "completed"
    assert record["answer"] == ("found x" if tool == "lookup" else "far x")


def test_the_machines_directory_is_searched_from_any_working_directory(
    project: tuple[Path, str, str], tmp_path: Path
) -> None:
    root, _, guards = project
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = fsm(elsewhere, "validate", str(root / "flows" / "loop.yaml"))
    assert done.returncode == 0, done.stderr
    # and a tools module is looked for in the working directory, not next to the machine
    replies = script(elsewhere, "lookup")
    (root / "flows" / "flowtools.py").write_text(TOOLS_PY)
    refused = fsm(
        elsewhere, "run", str(root / "flows" / "loop.yaml"), "--task", "t", "--model",
        f"scripted:{replies}", "--tools", "flowtools", "--db", "j.db", "--quiet",
    )  # fmt: skip
    assert refused.returncode == 2
    assert "no module named 'flowtools'" in refused.stderr
    assert str(elsewhere) in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not (elsewhere / "j.db").exists()
    assert guards  # the guard module itself was found: the refusal is the tools module's


def test_a_missing_guard_module_names_the_file_the_line_and_where_it_looked(
    tmp_path: Path,
) -> None:
    missing = unique("nowhere")
    machine = machine_with_guard(tmp_path / "flows", f"{missing}:vetted")
    done = fsm(tmp_path, "validate", "flows/loop.yaml")
    assert done.returncode == 2
    err = done.stderr
    assert "loop.yaml:" in err
    assert f"no module named {missing!r}" in err
    assert str(machine.parent) in err
    assert str(tmp_path) in err
    assert "sys.path" in err
    assert "Traceback" not in err


def test_not_found_raised_on_import_and_no_such_attribute_are_three_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    names = {k: unique(k) for k in ("raises", "imports", "fine")}
    (tmp_path / f"{names['raises']}.py").write_text("raise RuntimeError('no config')\n")
    (tmp_path / f"{names['imports']}.py").write_text("import not_a_module_anywhere_x\n")
    (tmp_path / f"{names['fine']}.py").write_text("x = 1\n")
    here = (tmp_path,)
    with pytest.raises(BadReference, match=r"no module named .*looked on the import path"):
        import_module(unique("absent"), here)
    with pytest.raises(BadReference, match=r"raised RuntimeError: no config"):
        import_module(names["raises"], here)
    with pytest.raises(BadReference, match=r"failed: No module named 'not_a_module_anywhere_x'"):
        import_module(names["imports"], here)
    with pytest.raises(BadReference, match=rf"{names['fine']}.py\) has no callable 'y'"):
        resolve_callable(f"{names['fine']}:y", here)
    with pytest.raises(BadReference, match="has no callable 'x'"):
        resolve_callable(f"{names['fine']}:x", here)  # there, but not callable
    assert names["raises"] not in sys.modules  # a module that failed is not half-imported


def test_a_search_leaves_sys_path_as_it_was(tmp_path: Path) -> None:
    name = unique("plain")
    (tmp_path / f"{name}.py").write_text("def f():\n    return 7\n")
    before = list(sys.path)
    assert resolve_callable(f"{name}:f", (tmp_path,))() == 7
    assert sys.path == before
    assert str(tmp_path) not in sys.path


def test_a_package_in_a_search_directory_imports_its_own_submodules(tmp_path: Path) -> None:
    name = unique("pkg")
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text("def value():\n    return 3\n")
    (pkg / "guards.py").write_text(
        "from . import helpers\n\ndef g(s):\n    return helpers.value()\n"
    )
    assert resolve_callable(f"{name}.guards:g", (tmp_path,))(None) == 3


def test_the_import_path_wins_over_a_local_file_of_the_same_name(tmp_path: Path) -> None:
    """A file named like an importable module (here `json`) never shadows it: the module
    the process imports stays the real one, and the error says which file it used."""
    (tmp_path / "json.py").write_text("def dumps(x):\n    return 'local'\n")
    (tmp_path / "csv.py").write_text("def vetted(s):\n    return True\n")
    import json as real

    assert resolve_callable("json:dumps", (tmp_path,)) is real.dumps
    with pytest.raises(BadReference, match=r"module 'csv' \(.*csv.py\) has no callable 'vetted'"):
        resolve_callable("csv:vetted", (tmp_path,))
    assert "local" not in real.dumps({})


def test_two_files_of_one_module_name_are_refused(tmp_path: Path) -> None:
    name = unique("twin")
    for folder, value in (("a", 1), ("b", 2)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"{name}.py").write_text(f"def f():\n    return {value}\n")
    assert resolve_callable(f"{name}:f", (tmp_path / "a",))() == 1
    assert resolve_callable(f"{name}:f", (tmp_path / "a", tmp_path / "b"))() == 1
    for search in ((tmp_path / "b",), (tmp_path / "b", tmp_path / "a")):
        with pytest.raises(BadReference, match=r"already imported from .*another module"):
            resolve_callable(f"{name}:f", search)


def test_the_library_finds_a_machines_guards_next_to_it_and_tools_where_it_is_told(
    project: tuple[Path, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, tools, guards = project
    monkeypatch.chdir(tmp_path)  # not the project: the machine's own directory is searched
    spec = load_machine(str(root / "flows" / "loop.yaml"))
    with pytest.raises(AdapterError, match=f"no module named '{tools}'"):
        load_tools(tools)  # a library call searches only sys.path unless told
    registry = load_tools(tools, (root,))
    model = load_model(f"scripted:{script(tmp_path, 'lookup')}")
    record = run(spec, task="t", model=model, **granted(registry), store=tmp_path / "j.db")
    assert record.halt_reason == "completed"
    assert guards in sys.modules


def test_a_python_model_in_the_cwd_is_found_by_the_cli(tmp_path: Path) -> None:
    name = unique("mymodel")
    (tmp_path / f"{name}.py").write_text(MODEL_PY)
    done = fsm(
        tmp_path, "run", "agent_loop", "--task", "t", "--model", f"python:{name}:model",
        "--tools", "fsm_agent.examples.halt_lab.tools",
        "--allow", "lookup,slow_lookup,hang",
        "--db", "j.db", "--record", "r.json",
        "--quiet",
        "--max-steps", "1",
    )  # fmt: skip
    assert done.returncode != 2, done.stderr  # the model loaded and was asked
    assert json.loads((tmp_path / "r.json").read_text())["steps_used"] == 1


def test_a_machine_spec_error_for_a_guard_is_a_machine_spec_error(tmp_path: Path) -> None:
    machine = machine_with_guard(tmp_path / "m", f"{unique('gone')}:vetted")
    with pytest.raises(MachineSpecError, match=re.escape(str(machine.parent))):
        load_machine(str(machine))


@settings(max_examples=25, deadline=None)
@given(
    parts=st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), min_size=1, max_size=3),
    dirs=st.integers(min_value=0, max_value=3),
)
def test_any_absent_module_is_not_found_naming_every_place_searched(
    parts: list[str], dirs: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    name = ".".join([f"zz_absent_{parts[0]}", *parts[1:]])
    search = tuple(tmp_path_factory.mktemp("search") for _ in range(dirs))
    with pytest.raises(BadReference) as raised:
        resolve_callable(f"{name}:f", search)
    message = str(raised.value)
    assert message.startswith(f"no module named {name.split('.')[0]!r}")
    assert "sys.path" in message
    for d in search:
        assert str(d) in message
        assert str(d) not in sys.path
