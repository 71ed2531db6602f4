"""`sys.exit`, `KeyboardInterrupt` and any other BaseException from user code, through the
real `fsm-agent run`: a run ends with a named halt, its record and its journaled halt, and
the exit code of the README's table; a tools or model module that raises as it is imported
is invalid input (exit 2), and nothing runs.

Once: a guard calling `sys.exit(0)` made `run` exit 0 with no record and the run left open;
`KeyboardInterrupt` from a guard exited 1; a tools module raising `SystemExit(0)` at import
exited 0.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import attrs
import pytest

from fsm_agent import Event, HaltReason, read_record
from fsm_agent.errors import Interrupted
from fsm_agent.halt import exit_code
from fsm_agent.runtime.interrupts import InterruptGate, raised_by_user_code
from fsm_agent.stores.sqlite import SqliteStore
from tests.lab import LOOKUP, lab_run

ROOT = Path(__file__).parent.parent
WAIT_S = 120.0  # generous: every case starts at once on a loaded 2-core machine
X = "tests.fixture_exits"
ACTION_MACHINE = f"""\
name: exits_action
description: a user action that raises
initial: acting
budgets: {{max_steps: 3, wall_clock_ms: 20000, max_cost: 0.5, tool_timeout_ms: 10000,
  max_retries: 1}}
states:
  acting: {{action: '{X}:action'}}
  done: {{terminal: true}}
  budget_exhausted: {{terminal: true}}
  handoff: {{terminal: true}}
transitions:
  - {{trigger: failed, source: acting, dest: handoff, halt: tool_error}}
  - {{trigger: finished, source: acting, dest: done, halt: completed}}
"""


def guard_machine() -> str:
    text = (ROOT / "machines" / "agent_loop.yaml").read_text(encoding="utf-8")
    edge = "- {trigger: tool_call, source: drafting, dest: tool_pending}"
    assert edge in text
    guarded = edge.replace("}", f", guards: [{X}:guard]}}")
    text = text.replace(edge, guarded)
    return text.replace("name: agent_loop", "name: exits_guard")


@attrs.frozen
class Case:
    machine: str  # agent_loop, guard or action
    model: str
    tools: str = X  # registers lookup, the one tool each run is granted (--allow lookup)
    env: dict[str, str] = attrs.field(factory=dict)
    code: int = 70
    halt: str | None = "internal_error"  # None: refused before any run
    says: str = ""  # in the record's error (a run) or on stderr (refused)


ASK = f"python:{X}:asks_for_the_tool"
ON_IMPORT = "tests.fixture_exit_on_import"
KBINT, BASE = {"RAISE": "kbint"}, {"RAISE": "base"}


def failed_call(halt: str, says: str, model: str = ASK, **env: str) -> Case:
    """A tool or adapter call that raised: the call failed (as for any exception)."""
    return Case("agent_loop", model, env=env, code=4, halt=halt, says=says)


def refused(says: str, model: str = ASK, tools: str = X, **env: str) -> Case:
    """Refused before any run: invalid input."""
    return Case("agent_loop", model, tools=tools, env=env, code=2, halt=None, says=says)


CASES = {
    "guard sys.exit(0)": Case("guard", ASK, says=f"guard '{X}:guard' on transition 3: raised"),
    "guard KeyboardInterrupt": Case("guard", ASK, env=KBINT, says="raised KeyboardInterrupt"),
    "guard BaseException": Case("guard", ASK, env=BASE, says="raised Odd: odd"),
    "action sys.exit(0)": Case("action", ASK, code=4, halt="tool_error", says="SystemExit: 0"),
    "tool sys.exit(0) in a thread": failed_call("tool_error", "SystemExit: 0"),
    "tool KeyboardInterrupt inline": failed_call(
        "tool_error", "KeyboardInterrupt", RAISE="kbint", ISOLATION="inline"
    ),
    "tool sys.exit(0) in a process": failed_call(
        "tool_error", "SystemExit: 0", ISOLATION="process"
    ),
    "model sys.exit(0)": failed_call("empty_response", "SystemExit: 0", f"python:{X}:model"),
    "model KeyboardInterrupt inline": failed_call(
        "empty_response", "KeyboardInterrupt", f"python:{X}:inline_model", RAISE="kbint"
    ),
    "tools import sys.exit(0)": refused(
        f"importing module '{ON_IMPORT}' raised SystemExit: 0", tools=ON_IMPORT
    ),
    "tools import KeyboardInterrupt": refused(
        f"importing module '{ON_IMPORT}' raised KeyboardInterrupt", tools=ON_IMPORT, RAISE="kbint"
    ),
    "new_tools() sys.exit(0)": refused("new_tools() raised SystemExit: 0", RAISE_IN="new_tools"),
    "model import sys.exit(0)": refused(
        f"importing module '{ON_IMPORT}' raised SystemExit: 0", model=f"python:{ON_IMPORT}:model"
    ),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, int, str, str]]:
    """Every case at once, each in its own real `fsm-agent run` process and folder."""
    root = tmp_path_factory.mktemp("exits")
    (root / "guard.yaml").write_text(guard_machine(), encoding="utf-8")
    (root / "action.yaml").write_text(ACTION_MACHINE, encoding="utf-8")
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    started = {}
    for n, (name, case) in enumerate(CASES.items()):
        folder = root / f"case{n}"
        folder.mkdir()
        machine = str(root / f"{case.machine}.yaml")
        if case.machine == "agent_loop":
            machine = "agent_loop"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
        env.update({f"FSM_AGENT_TEST_{k}": v for k, v in case.env.items()})
        started[name] = folder, subprocess.Popen(
            [sys.executable, "-m", "fsm_agent", "run", machine, "--task", name, "--model",
             case.model, "--tools", case.tools, "--allow", "lookup", "--db",
             str(folder / "j.db"), "--record", str(folder / "r.json"), "--quiet"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    done = {}
    for name, (folder, proc) in started.items():
        out, err = proc.communicate(timeout=WAIT_S)
        done[name] = folder, proc.returncode, out, err
    return done


@pytest.mark.parametrize("name", list(CASES))
def test_user_code_that_raises_a_base_exception(
    outcomes: dict[str, tuple[Path, int, str, str]], name: str
) -> None:
    case = CASES[name]
    folder, code, out, err = outcomes[name]
    assert code == case.code, (out, err)
    assert "Traceback" not in err, err
    if case.halt is None:  # refused before anything ran
        assert err.startswith("Error: "), err
        assert case.says in err, err
        assert not (folder / "j.db").exists()
        assert not (folder / "r.json").exists()
        return
    record = json.loads((folder / "r.json").read_text(encoding="utf-8"))
    assert record["halt_reason"] == case.halt, record
    assert case.says in (record["error"] or ""), record["error"]
    assert f"halted: {case.halt}" in out
    store = SqliteStore(folder / "j.db")
    try:
        (row,) = store.list_runs()
        events = store.events(row.run_id)
    finally:
        store.close()
    assert row.status == "halted"  # not left open
    assert row.halt_reason is not None
    assert row.halt_reason.value == case.halt
    assert events[-1].halt is row.halt_reason


# --- the library: the worker's last line of defence -------------------------------------------


def _exits_on_first_transition(event: Event) -> None:
    if event.kind == "transition" and event.seq == 1:
        sys.exit(3)


def test_a_base_exception_the_run_does_not_expect_ends_it_internal_error(tmp_path: Path) -> None:
    """User code the run calls outside any call wrapper (here `on_transition`)."""
    record = lab_run(tmp_path, [LOOKUP, {"answer": "swordfish"}],
                     on_transition=_exits_on_first_transition)  # fmt: skip
    assert record.halt_reason is HaltReason.INTERNAL_ERROR
    assert record.error == "SystemExit: 3 (raised by user code)"
    assert exit_code(record.halt_reason) == 70
    store = SqliteStore(tmp_path / "j.db")
    try:
        assert store.get_run(record.run_id).status == "halted"
    finally:
        store.close()


def _ctrl_c(event: Event) -> None:
    if event.kind == "transition" and event.seq == 1:
        raise KeyboardInterrupt


def test_a_ctrl_c_the_caller_handles_halts_the_run_and_reaches_the_caller(
    tmp_path: Path,
) -> None:
    """With `handle_signals=False` in the main thread, Python's own SIGINT handler is in
    place: a KeyboardInterrupt may be a real Ctrl-C, so the run halts `interrupted` (its
    record written) and the caller gets its KeyboardInterrupt."""
    with pytest.raises(KeyboardInterrupt):
        lab_run(tmp_path, [LOOKUP, {"answer": "swordfish"}], on_transition=_ctrl_c,
                handle_signals=False)  # fmt: skip
    record = read_record(tmp_path / "r.json")
    assert (record.halt_reason, record.signal) == (HaltReason.INTERRUPTED, 2)
    assert exit_code(record.halt_reason, record.signal) == 130


def test_raised_by_user_code_tells_a_real_signal_from_user_code() -> None:
    assert not raised_by_user_code(Interrupted(15))
    assert raised_by_user_code(SystemExit(0))
    # In the main thread, with Python's SIGINT handler in place: maybe a real Ctrl-C.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert not raised_by_user_code(KeyboardInterrupt())
    with InterruptGate().installed():  # fsm-agent's handlers: a real one is Interrupted
        assert raised_by_user_code(KeyboardInterrupt())
    seen: list[bool] = []
    worker = threading.Thread(target=lambda: seen.append(raised_by_user_code(KeyboardInterrupt())))
    worker.start()
    worker.join()
    assert seen == [True]  # no signal is ever raised in another thread
