"""The built wheel, installed into a fresh virtual environment next to a user's project that
has packages of its own named `stores`, `machines` and `examples`: everything fsm-agent
installs is under `fsm_agent`, and a machine, the demo and a report all work there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

#: The user's project: its own `stores`, `machines` and `examples` packages (each would
#: shadow fsm-agent's if fsm-agent imported them by those names), and its tools module.
USER_FILES = {
    "stores/__init__.py": "WHOSE = 'the user'\n",
    "machines/__init__.py": "WHOSE = 'the user'\n",
    "examples/__init__.py": "WHOSE = 'the user'\n",
    "examples/lab_tools.py": (
        "from fsm_agent import Receipt, ToolRegistry, ToolResult\n"
        "TOOLS = ToolRegistry()\n\n"
        "@TOOLS.tool(side_effect=False)\n"
        "def lookup(q: str) -> ToolResult:\n"
        "    return ToolResult(receipts=(Receipt(status=200, id='fact:lab'),),\n"
        "                      observation={'fact': 'hunter2'})\n"
    ),
    "reply.json": json.dumps(
        [{"tool_call": {"name": "lookup", "args": {"q": "lab password"}}}, {"answer": "hunter2"}]
    ),
}


def _run(*cmd: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600):
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, ROOT, cwd=out)
    assert done.returncode == 0, done.stderr
    (built,) = out.glob("fsm_agent-*.whl")
    return built


def test_the_wheel_installs_nothing_outside_fsm_agent(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"fsm_agent"}
    for expected in ("fsm_agent/stores/sqlite.py", "fsm_agent/machines/agent_loop.yaml",
                     "fsm_agent/machines/halt-policy.yml", "fsm_agent/machines/machine.schema.json",
                     "fsm_agent/examples/scenarios.py",
                     "fsm_agent/console/static/console.js",
                     "fsm_agent/console/static/console.css",
                     "fsm_agent/console/static/chart.umd.min.js",
                     "fsm_agent/console/static/chart.js-LICENSE.md",
                     "fsm_agent/py.typed"):  # fmt: skip
        assert expected in names


def test_a_user_project_with_its_own_stores_machines_examples(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    assert _run(sys.executable, "-m", "venv", venv, cwd=tmp_path).returncode == 0
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    done = _run(bin_dir / "python", "-m", "pip", "install", "-q", wheel, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    project = tmp_path / "project"
    for rel, text in USER_FILES.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    # The user's packages come first on the path, as they do in their own project.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(project)
    cli = bin_dir / "fsm-agent"

    shadow = _run(bin_dir / "python", "-c",
                  "import stores, machines, examples, fsm_agent.stores.sqlite as s;"
                  "print(stores.WHOSE, machines.WHOSE, examples.WHOSE,"
                  " 'site-packages' in s.__file__)",
                  cwd=project, env=env)  # fmt: skip
    assert shadow.stdout.split() == ["the", "user", "the", "user", "the", "user", "True"]

    ran = _run(cli, "run", "agent_loop", "--task", "Find the lab password",
               "--model", "scripted:reply.json", "--tools", "examples.lab_tools",
               "--allow", "lookup", "--db", "journal.db", "--json",
               cwd=project, env=env)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    record = json.loads(ran.stdout)
    assert record["halt_reason"] == "completed"

    demo = _run(cli, "demo", cwd=project, env=env)
    assert demo.returncode == 0, demo.stdout + demo.stderr

    report = _run(cli, "report", record["run_id"], "--db", "journal.db", "-o", "report.html",
                  cwd=project, env=env)  # fmt: skip
    assert report.returncode == 0, report.stderr
    assert "completed" in (project / "report.html").read_text()

    # the lean install has no web server: the console says which extra brings it
    served = _run(cli, "console", "--db", "journal.db", cwd=project, env=env, timeout=60)
    assert served.returncode == 2, served.stdout + served.stderr
    assert "pip install 'fsm-agent[console]'" in served.stderr
