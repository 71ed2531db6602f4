"""A process-isolated tool dies with its run, whatever kills the run: real processes, real
SIGKILLs (2 here, 20 in the slow suite), and the fallback for systems without prctl.

Once: in 8 of 8 SIGKILLs of the run's process, the tool's child finished its side effect
after its parent had died, then printed a BrokenPipeError traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixture_process_tool import DIR_ENV, SLEEP_S
from tests.fixture_tools import process_alive

ROOT = Path(__file__).parent.parent
WAIT_S = 60.0  # generous: an import-heavy child on a loaded 2-core machine
GONE_S = 10.0


def _env(**extra: str) -> dict[str, str]:
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths), **extra)


def _wait_for(path: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until `path` holds something (it is written, not renamed, into place)."""
    deadline = time.monotonic() + WAIT_S
    while not (path.exists() and path.read_bytes().strip()):
        assert proc.poll() is None, f"exited {proc.returncode} before {path.name} appeared"
        assert time.monotonic() < deadline, f"{path} did not appear within {WAIT_S} s"
        time.sleep(0.005)  # polling a handshake file, not a timing assumption


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + GONE_S
    while process_alive(pid):
        assert time.monotonic() < deadline, f"process {pid} outlived its parent by {GONE_S} s"
        time.sleep(0.005)


def _after_the_side_effect_would_have_happened(started: float, done: Path) -> None:
    """The tool would have written `done` SLEEP_S after it started: wait past that, so an
    absent file means it never happened (not that it has not happened yet)."""
    time.sleep(max(0.0, started + 2 * SLEEP_S - time.monotonic()))
    assert not done.exists(), "the tool's side effect happened after its run was killed"


def kill_the_run_mid_tool(folder: Path) -> None:
    """`fsm-agent run` with a process-isolated tool; SIGKILL the run's process while the
    tool's child sleeps before its side effect."""
    folder.mkdir()
    pid_file, done = folder / "pid", folder / "done"
    with (folder / "stderr").open("wb") as stderr:  # the tool's child inherits it
        proc = subprocess.Popen(
            [sys.executable, "-m", "fsm_agent", "run", "agent_loop", "--task", "write late",
             "--tools", "tests.fixture_process_tool", "--allow", "pid_sleep_write", "--model",
             "python:tests.fixture_process_tool:model", "--db", str(folder / "j.db"),
             "--record", str(folder / "r.json"), "--wall-clock-ms", "120000",
             "--tool-timeout-ms", "60000", "--quiet"],
            cwd=ROOT, env=_env(**{DIR_ENV: str(folder)}), stdout=subprocess.DEVNULL,
            stderr=stderr,
        )  # fmt: skip
        try:
            _wait_for(pid_file, proc)
            started = time.monotonic()
            proc.kill()
            proc.wait(timeout=WAIT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    tool = int(pid_file.read_text(encoding="utf-8"))
    assert tool != proc.pid
    _wait_gone(tool)
    _after_the_side_effect_would_have_happened(started, done)
    err = (folder / "stderr").read_text(encoding="utf-8", errors="replace")
    assert "Traceback" not in err, err


def test_a_process_isolated_tool_dies_with_its_killed_run(tmp_path: Path) -> None:
    for n in range(2):
        kill_the_run_mid_tool(tmp_path / f"kill{n}")


@pytest.mark.slow
def test_a_process_isolated_tool_dies_with_its_killed_run_20_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kills = 20
    for n in range(kills):
        kill_the_run_mid_tool(tmp_path / f"kill{n}")
    with capsys.disabled():
        print(f"\n{kills} SIGKILLs of a run mid-tool: 0 side effects after, 0 tracebacks")


# A parent whose child binds itself to it the way a tool's child does, by hand.
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
time.sleep(60)
"""
WATCHING_CHILD = """
import os, sys, threading, time
from pathlib import Path
from fsm_agent.runtime.deadline import watch_parent
threading.Thread(target=watch_parent, args=(os.getppid(),), daemon=True).start()
Path(sys.argv[1], "pid").write_text(str(os.getpid()))
time.sleep(%s)
Path(sys.argv[1], "done").write_text("side effect happened")
"""


def test_without_prctl_the_child_sees_its_parent_die_and_stops(tmp_path: Path) -> None:
    """The fallback where prctl does not exist (macOS): a thread that watches the parent,
    with no death signal armed (this child never calls prctl)."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, WATCHING_CHILD % SLEEP_S, str(tmp_path)],
        cwd=ROOT, env=_env(), stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        _wait_for(tmp_path / "pid", parent)
        started = time.monotonic()
        parent.kill()
        parent.wait(timeout=WAIT_S)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    _wait_gone(int((tmp_path / "pid").read_text()))
    _after_the_side_effect_would_have_happened(started, tmp_path / "done")
    assert parent.stderr is not None
    assert b"Traceback" not in parent.stderr.read()


def test_a_child_whose_parent_died_before_it_was_bound_stops_at_once() -> None:
    """Between the spawn and prctl the parent may already be gone: the child is then not
    the original parent's any more, and ends before running anything of the user's."""
    code = (
        "from fsm_agent.runtime.deadline import _die_with_parent;"
        " _die_with_parent(-1); print('ran')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, timeout=WAIT_S
    )
    assert (done.returncode, done.stdout, done.stderr) == (70, b"", b"")
