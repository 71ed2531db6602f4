"""The incident tools are total over what a live run can store, and a hostile string does not
change how a live run ends.

Live runs are driven through the real CLI (click's CliRunner, in process, so the hostile
model and tools of `tests.fixture_hostile` can hand it any Python value) into a real SQLite
file, with a trace copy; then every incident tool runs on the journal and on an exported
file, and each must succeed or refuse with a named reason (exit 2 and an `Error:` line):
never exit 70, never a traceback. The reported cases run as real subprocesses too, so the
process's own stdout and stderr encoding is what is tested; the OpenAI-compatible lane runs
against the real HTTP test server.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import click
import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm_agent import Receipt, ToolError, ToolResult, load_machine
from fsm_agent.cli.main import cli
from fsm_agent.encoding import harden_streams, hash_bytes, joined, text_sha256, unencodable
from fsm_agent.journal.runfile import read_run_file, write_run_file
from fsm_agent.runtime.proposals import MAX_REPLY_CHARS, MAX_REPLY_DEPTH
from fsm_agent.runtime.record import atomic_write_text
from tests import fixture_hostile
from tests import model_server as ms
from tests.fixture_hostile import Unprintable
from tests.lab import rechained

ROOT = Path(__file__).parent.parent
HOSTILE_MODEL = "python:tests.fixture_hostile:model"
HOSTILE_TOOLS = "tests.fixture_hostile"

#: Strings built to break an encoder, a terminal or a page.
SPECIAL = [
    "\ud800",  # a lone high surrogate (valid JSON as "\\ud800")
    "x\udfff",  # a lone low one
    "\udcff",  # what Python makes of a byte that is not UTF-8
    "\ud83d\ude00",  # a surrogate pair as two code points (one emoji once through JSON)
    "\x00nul",
    "\x1b[2J\x1b]0;owned\x07",  # clear the screen, retitle the terminal
    "ok\rhalted: completed",  # a carriage return that overwrites what a reviewer reads
    "\u202etxt.exe",  # a bidi override
    "\ufeff\uffff\U0010ffff",
    "\u2028\u2029\x85",
    "<script>alert(1)</script>",
    "]]></pre>--!>",
    "%s%n{0}",
]
any_char = st.characters(exclude_categories=())
hostile_text = st.one_of(
    st.sampled_from(SPECIAL),
    st.text(any_char, max_size=24),
    st.lists(st.sampled_from(SPECIAL) | st.text(any_char, max_size=4), max_size=5).map("".join),
)
nonempty_text = hostile_text.filter(str.strip)


def nested(depth: int, leaf: Any = "x") -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


class Opaque:
    """A Python value that is not JSON."""


hostile_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | hostile_text,  # NaN, infinities
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile_text, inner, max_size=3),
    max_leaves=8,
)
deep_values = st.integers(MAX_REPLY_DEPTH - 4, MAX_REPLY_DEPTH + 4).map(nested)
#: Long text under the journal's limit, and over it (kept as a marker); built lazily, so the
#: strategy's repr stays short.
huge_text = st.builds(lambda n: "\ud800" + "y" * n, st.just(50_000)) | st.builds(
    lambda n: "z" * n, st.just(MAX_REPLY_CHARS + 1)
)
not_json = st.sampled_from([{1, 2}, b"\xff\xfe", Opaque(), 10**5000])
observations = hostile_values | deep_values | huge_text | not_json

json_replies = st.one_of(
    st.builds(lambda t: {"answer": t}, hostile_text),
    st.builds(lambda t, why: {"handoff": {"why": t, "tried": [why]}}, nonempty_text, hostile_text),
    st.builds(
        lambda name, q: {"tool_call": {"name": name, "args": {"q": q}}},
        st.sampled_from(["probe", "write"]) | nonempty_text,
        hostile_values | deep_values,
    ),
    st.builds(lambda k: {"tool_call": {"name": "probe", "args": {k: 1}}}, nonempty_text),
    hostile_values,
    huge_text,
)
replies = (
    json_replies
    | st.binary(max_size=16)
    | st.builds(Unprintable)
    | st.builds(RuntimeError, hostile_text)  # the model call fails
)
receipts = st.builds(
    Receipt,
    status=st.sampled_from([200, 206]),
    id=hostile_text,
    idempotency_key=st.none() | hostile_text,
    checksum=st.none() | hostile_text,
)
results = st.one_of(
    st.builds(
        lambda r, obs, final: ToolResult(receipts=r, observation=obs, final=final),
        st.lists(receipts, max_size=2).map(tuple),
        observations,
        st.none() | nonempty_text,
    ),
    st.builds(lambda t, retry: ToolError(t, retryable=retry), hostile_text, st.booleans()),
    st.builds(RuntimeError, hostile_text),
    st.builds(Unprintable),
    st.builds(
        lambda i, obs: {"receipts": [{"status": 200, "id": i}], "observation": obs, "final": i},
        nonempty_text,
        hostile_values,
    ),
    hostile_values,  # a malformed result
)


# --- the tools, on one journal --------------------------------------------------------------------


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=True)


def assert_named(result: Result, args: tuple[str, ...], allowed: tuple[int, ...] = (0, 2)) -> None:
    """The command succeeded, or refused with a named reason; never 70, never a traceback."""
    what = f"fsm-agent {' '.join(args)} exited {result.exit_code}:\n{result.output}"
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        what,
        result.exc_info,
    )
    assert result.exit_code in allowed, what
    assert "Traceback" not in result.output, what
    if result.exit_code == 2:
        assert "Error: " in result.output, what


def rows(db: Path) -> list[tuple[Any, ...]]:
    """Every journaled row, to show that reading the journal rewrote nothing."""
    with sqlite3.connect(db) as con:
        return [
            *con.execute("SELECT * FROM runs ORDER BY run_id"),
            *con.execute("SELECT * FROM events ORDER BY run_id, seq"),
        ]


def run_ids(db: Path) -> list[str]:
    with sqlite3.connect(db) as con:
        return [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY started_at")]


def check_incident_tools(folder: Path, db: Path, run_id: str) -> None:
    """Every incident tool on the journal and on an exported run file: each succeeds or
    refuses with a named reason, and the journal is byte for byte what it was."""
    before = rows(db)
    exported = folder / f"{run_id}.json"
    imported = folder / f"imported-{run_id}.db"
    on_db = ("--db", str(db))
    for args in (
        ("show", run_id, *on_db),
        ("show", "--json", run_id, *on_db),
        ("runs", *on_db),
        ("runs", "--json", *on_db),
        ("stats", *on_db),
        ("stats", "--json", *on_db),
        ("verify", run_id, *on_db),
        ("verify", "--all", *on_db),
        ("report", run_id, "-o", str(folder / "report.html"), *on_db),
    ):
        assert_named(invoke(*args), args)
    for args in (
        ("replay", run_id, *on_db),
        ("replay", "--json", run_id, *on_db),
        ("export", run_id, "-o", str(exported), *on_db),
    ):
        assert_named(invoke(*args), args, allowed=(0,))  # a live run replays and exports
    for args in (
        ("verify", str(exported)),
        ("replay", str(exported)),
        ("report", str(exported), "-o", str(folder / "file.html")),
        ("import", str(exported), "--db", str(imported)),
        ("verify", "--all", "--db", str(imported)),
    ):
        assert_named(invoke(*args), args, allowed=(0,))
    assert rows(db) == before
    assert rows(imported) == [r for r in before if run_id in r]  # the same bytes, every column


def live_run(folder: Path, replies: list[Any], results: list[Any], *extra: str) -> Result:
    fixture_hostile.play(replies, results)
    args = (
        "run", "agent_loop", "--task", "Find the lab password", "--model", HOSTILE_MODEL,
        "--tools", HOSTILE_TOOLS, "--allow", "probe,write", "--db", str(folder / "j.db"),
        "--record", str(folder / "r.json"), "--max-steps", "4", *extra,
    )  # fmt: skip
    result = invoke(*args)
    assert_named(result, args, allowed=(0, 3, 4))  # done, budget_exhausted, handoff
    return result


def check_live(replies: list[Any], results: list[Any], trace: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        extra = ("--trace-copy", str(folder / "trace.json")) if trace else ()
        result = live_run(folder, replies, results, *extra)
        record = json.loads((folder / "r.json").read_text(encoding="utf-8"))
        assert record["halt_reason"] != "internal_error", record["error"]
        assert str(result.exit_code) in {"0", "3", "4"}
        (run_id,) = run_ids(folder / "j.db")
        check_incident_tools(folder, folder / "j.db", run_id)
        if trace:
            copy = ("verify", str(folder / "trace.json"))
            assert_named(invoke(*copy), copy, allowed=(0,))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    replies=st.lists(replies, min_size=1, max_size=4),
    results=st.lists(results, max_size=3),
    trace=st.booleans(),
)
def test_fuzz_every_incident_tool_is_total_over_a_hostile_run(
    replies: list[Any], results: list[Any], trace: bool
) -> None:
    check_live(replies, results, trace)


@pytest.mark.slow
@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    replies=st.lists(replies, min_size=1, max_size=4),
    results=st.lists(results, max_size=3),
    trace=st.booleans(),
)
def test_fuzz_every_incident_tool_is_total_over_many_hostile_runs(
    replies: list[Any], results: list[Any], trace: bool
) -> None:
    check_live(replies, results, trace)


# --- the OpenAI-compatible lane, against the real HTTP test server -------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[ms.ModelServer]:
    with ms.model_server() as s:
        yield s


def _content_parts(text: str) -> ms.Act:
    return ms.Act(body=ms.completion({"content": [{"type": "text", "text": text}]}))


acts = st.one_of(
    st.builds(ms.text, hostile_text | huge_text),
    st.builds(ms.answer, hostile_text),
    st.builds(lambda v: ms.text(json.dumps(v)), json_replies),
    st.builds(lambda q: ms.tool_call("probe", {"q": q}), hostile_values | deep_values),
    st.builds(lambda name: ms.tool_call(name, {}), nonempty_text),
    st.builds(lambda raw: ms.tool_call("probe", raw), hostile_text),  # arguments as raw text
    st.builds(_content_parts, hostile_text),
    st.builds(lambda b: ms.Act(body=b), st.binary(max_size=24)),
    st.builds(lambda t: ms.Act(status=500, body={"error": t}), hostile_text),
)


def check_openai_lane(server: ms.ModelServer, plan: list[ms.Act], results: list[Any]) -> None:
    server.reset()
    server.play(*plan)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = ("--model", "openai:test-model", "--base-url", server.base_url)
        fixture_hostile.play([], results)
        args = (
            "run", "agent_loop", "--task", "Find the lab password", *model,
            "--tools", HOSTILE_TOOLS,
            "--allow", "probe,write",
            "--db", str(folder / "j.db"), "--record",
            str(folder / "r.json"), "--max-steps", "4", "--trace-copy", str(folder / "t.json"),
        )  # fmt: skip
        assert_named(invoke(*args), args, allowed=(0, 3, 4))
        record = json.loads((folder / "r.json").read_text(encoding="utf-8"))
        assert record["halt_reason"] != "internal_error", record["error"]
        (run_id,) = run_ids(folder / "j.db")
        check_incident_tools(folder, folder / "j.db", run_id)
    for request in server.requests:  # strict JSON: no lone surrogate, not even escaped
        assert all(unencodable(s) is None for s in strings(request["body"])), request


def strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included, and in the JSON text it carries (a tool
    call's arguments, a tool result: a server may parse those too)."""
    if isinstance(value, str):
        yield value
        if value.startswith(("{", "[")):
            try:
                inner = json.loads(value)
            except ValueError:
                return
            yield from strings(inner)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(plan=st.lists(acts, min_size=1, max_size=4), results=st.lists(results, max_size=2))
def test_fuzz_the_openai_lane_on_hostile_replies_is_total(
    server: ms.ModelServer, plan: list[ms.Act], results: list[Any]
) -> None:
    check_openai_lane(server, plan, results)


@pytest.mark.slow
@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(plan=st.lists(acts, min_size=1, max_size=4), results=st.lists(results, max_size=2))
def test_fuzz_the_openai_lane_on_many_hostile_replies_is_total(
    server: ms.ModelServer, plan: list[ms.Act], results: list[Any]
) -> None:
    check_openai_lane(server, plan, results)


# --- the reported cases, one by one -------------------------------------------------------------

LOOKUP = {"tool_call": {"name": "lookup", "args": {"q": "lab password"}}}
LAB = ("--tools", "fsm_agent.examples.halt_lab.tools", "--allow", "lookup,slow_lookup,hang")


def fsm_agent(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command in a real process: its own stdout and stderr, UTF-8 as on a laptop."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "LC_ALL": "C.UTF-8"}
    env.pop("FSM_AGENT_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "fsm_agent", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        errors="strict",  # what a terminal gets must be valid UTF-8
        timeout=60,
        check=False,
    )


def scripted(tmp_path: Path, text: str) -> str:
    """A scripted:PATH model whose file is `text`, the JSON as written (escapes and all)."""
    path = tmp_path / "script.json"
    path.write_text(text, encoding="utf-8")
    return f"scripted:{path}"


def run_lab(tmp_path: Path, script: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return fsm_agent(
        tmp_path, "run", "agent_loop", "--task", "Find the lab password", "--model", script,
        *LAB, "--db", "j.db", "--record", "r.json", *extra,
    )  # fmt: skip


def check_printed_tools(tmp_path: Path, run_id: str) -> None:
    """The tools that print journal text, as real processes; then every tool, in process."""
    for args in (("show", run_id), ("replay", run_id)):
        done = fsm_agent(tmp_path, *args, "--db", "j.db")
        assert done.returncode == 0, done.stderr
        assert "\\ud800" in done.stdout  # shown as its escape
    check_incident_tools(tmp_path, tmp_path / "j.db", run_id)


ANSWER_SCRIPT = "[" + json.dumps(LOOKUP) + ', {"answer": "swordfish x\\ud800"}]'


def test_a_lone_surrogate_in_an_answer_completes_and_every_tool_reads_the_run(
    tmp_path: Path,
) -> None:
    """Once: the run printed its summary and exited 70; replay, export, report exited 70."""
    done = run_lab(tmp_path, scripted(tmp_path, ANSWER_SCRIPT))
    assert done.returncode == 0, done.stderr
    assert "answer: swordfish x\\ud800\n" in done.stdout
    record = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert (record["halt_reason"], record["answer"]) == ("completed", "swordfish x\ud800")
    (run_id,) = run_ids(tmp_path / "j.db")
    check_printed_tools(tmp_path, run_id)
    exported = json.loads((tmp_path / f"{run_id}.json").read_text(encoding="utf-8"))
    assert exported["record"]["answer"] == "swordfish x\ud800"  # the very text, read back
    assert "swordfish x\\ud800" in (tmp_path / "report.html").read_text(encoding="utf-8")


def test_a_lone_surrogate_in_a_handoff_why_is_a_handoff_not_an_internal_error(
    tmp_path: Path,
) -> None:
    """Once: the record said handoff_requested, and the process exited 70."""
    done = run_lab(tmp_path, scripted(tmp_path, '[{"handoff": {"why": "\\ud800"}}]'))
    assert done.returncode == 4, done.stderr
    assert "why: \\ud800\n" in done.stdout
    record = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert record["halt_reason"] == "handoff_requested"
    assert record["handoff"]["why"] == "\ud800"
    as_json = run_lab(tmp_path, scripted(tmp_path, '[{"handoff": {"why": "\\ud800"}}]'), "--json")
    assert as_json.returncode == 4, as_json.stderr
    assert json.loads(as_json.stdout)["handoff"]["why"] == "\ud800"
    check_printed_tools(tmp_path, run_ids(tmp_path / "j.db")[0])


def test_a_trace_copy_of_a_lone_surrogate_keeps_the_run_completed(tmp_path: Path) -> None:
    """Once: the copy failed to encode, and a completed run became internal_error."""
    done = run_lab(tmp_path, scripted(tmp_path, ANSWER_SCRIPT), "--trace-copy", "trace.json")
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert record["halt_reason"] == "completed", record["error"]
    for args in (("verify", "trace.json"), ("replay", "trace.json")):
        assert fsm_agent(tmp_path, *args).returncode == 0
    copy = json.loads((tmp_path / "trace.json").read_text(encoding="utf-8"))
    assert copy["record"]["answer"] == "swordfish x\ud800"


def test_the_openai_lane_on_lone_surrogates_completes_and_sends_strict_json(
    server: ms.ModelServer, tmp_path: Path
) -> None:
    """Once: on the OpenAI-compatible lane such a reply ended the run internal_error (with a
    trace copy); and a lone surrogate in a tool call's arguments went back to the server, in
    every later request, as an escape strict JSON parsers refuse."""
    server.reset()
    server.play(
        ms.tool_call("lookup", {"q": "lab \ud800"}),
        ms.tool_call("lookup", {"q": "lab password"}),
        ms.answer("swordfish \ud800"),
    )
    model = ("--model", "openai:test-model", "--base-url", server.base_url)
    args = ("run", "agent_loop", "--task", "Find the lab password", *model, *LAB,
            "--db", str(tmp_path / "j.db"), "--record", str(tmp_path / "r.json"),
            "--trace-copy", str(tmp_path / "trace.json"))  # fmt: skip
    result = invoke(*args)
    assert_named(result, args, allowed=(0,))
    assert "answer: swordfish \\ud800" in result.output
    record = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert (record["halt_reason"], record["answer"]) == ("completed", "swordfish \ud800")
    assert len(server.requests) == 3
    for request in server.requests:
        assert all(unencodable(s) is None for s in strings(request["body"])), request
    calls = [m for m in server.requests[2]["body"]["messages"] if m.get("tool_calls")]
    arguments = calls[0]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments) == {"q": "lab \\ud800"}  # what was there, as text
    check_incident_tools(tmp_path, tmp_path / "j.db", run_ids(tmp_path / "j.db")[0])


# --- input the journal cannot store, and files too deep to read: refused, with why ---------------


def test_a_task_that_is_not_utf8_is_refused_before_the_run(tmp_path: Path) -> None:
    """Once: a journal error, exit 70 (a lone surrogate cannot be stored as SQLite text)."""
    done = subprocess.run(
        [sys.executable, "-m", "fsm_agent", "run", "agent_loop", "--task", b"caf\xe9",
         "--model", scripted(tmp_path, ANSWER_SCRIPT), *LAB, "--db", "j.db"],
        cwd=tmp_path, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode("utf-8").startswith(
        "Error: the task cannot be journaled: it holds '\\udce9' at position 3"
    )
    assert not (tmp_path / "j.db").exists() or run_ids(tmp_path / "j.db") == []


def test_a_run_file_with_text_no_journal_stores_is_refused_naming_the_key(
    tmp_path: Path,
) -> None:
    done = run_lab(tmp_path, scripted(tmp_path, ANSWER_SCRIPT))
    assert done.returncode == 0
    (run_id,) = run_ids(tmp_path / "j.db")
    assert invoke("export", run_id, "-o", str(tmp_path / "a.json"), "--db",
                  str(tmp_path / "j.db")).exit_code == 0  # fmt: skip
    original = read_run_file(tmp_path / "a.json")
    forged = rechained(attrs.evolve(original, run=attrs.evolve(original.run, task="t\ud800")))
    write_run_file(forged, tmp_path / "b.json")
    result = invoke("import", str(tmp_path / "b.json"), "--db", str(tmp_path / "other.db"))
    assert result.exit_code == 2, result.output
    assert "a journal cannot store this text: it holds '\\ud800' at position 1" in result.output
    assert result.output.rstrip().endswith("@ $.run.task")


@pytest.mark.parametrize("command", ["import", "verify", "replay", "report"])
def test_a_run_file_nested_too_deeply_is_refused(tmp_path: Path, command: str) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"format": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    extra = ("-o", str(tmp_path / "r.html")) if command == "report" else ()
    args = (command, str(path), "--db", str(tmp_path / "j.db"), *extra)
    result = invoke(*args)
    assert_named(result, args, allowed=(2,))
    assert "nested too deeply" in result.output


def test_a_script_nested_too_deeply_is_refused(tmp_path: Path) -> None:
    script = scripted(tmp_path, "[" * 100_000 + "]" * 100_000)
    args = ("run", "agent_loop", "--task", "t", "--model", script, "--db", str(tmp_path / "j"))
    result = invoke(*args)
    assert_named(result, args, allowed=(2,))
    assert "script is nested too deeply to read" in result.output


# --- the encoding policy itself -----------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(value=hostile_values.filter(lambda v: v == v))  # NaN: not equal to itself
def test_a_file_reads_back_as_the_journal_reads_back(tmp_path_factory: Any, value: Any) -> None:
    """Any JSON a run holds, written as fsm-agent writes files, reads back to what the
    journal's own (ASCII) JSON reads back to; valid text is written as plain UTF-8."""
    path = tmp_path_factory.mktemp("f") / "v.json"
    text = json.dumps(value, ensure_ascii=False)
    atomic_write_text(path, text)
    assert json.loads(path.read_text(encoding="utf-8")) == json.loads(json.dumps(value))
    if unencodable(text) is None:
        assert path.read_bytes() == text.encode("utf-8")


@settings(max_examples=100, deadline=None)
@given(text=st.text())  # valid text: no lone surrogates
def test_hashes_of_valid_text_are_what_they_always_were(text: str) -> None:
    assert hash_bytes(text) == text.encode("utf-8")
    assert text_sha256(text) == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_hashes_tell_every_text_apart() -> None:
    texts = ["\ud800", "\\ud800", "\ufffd", "\ud83d\ude00", "\U0001f600", ""]
    assert len({text_sha256(t) for t in texts}) == len(texts)
    agent_loop = load_machine("agent_loop")
    assert agent_loop.sha256 == hashlib.sha256(agent_loop.text.encode("utf-8")).hexdigest()


class Terminal(io.TextIOWrapper):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_control_characters_are_shown_as_escapes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out, err = io.BytesIO(), io.BytesIO()
    monkeypatch.setattr(sys, "stdout", Terminal(out, encoding="utf-8", write_through=True))
    monkeypatch.setattr(sys, "stderr", Terminal(err, encoding="utf-8", write_through=True))
    harden_streams()
    harden_streams()  # idempotent: wrapped once
    click.echo("ok\r\x1b[2J\u202e\x85\x7f\ud800\tdone")
    click.echo("\x07", err=True)
    assert out.getvalue() == b"ok\\x0d\\x1b[2J\\u202e\\x85\\x7f\\ud800\tdone\n"
    assert err.getvalue() == b"\\x07\n"


def test_off_a_terminal_text_is_written_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(out, encoding="utf-8", write_through=True))
    harden_streams()
    click.echo("ok\r\x07 é \ud800")  # (click itself drops ANSI sequences off a terminal)
    assert out.getvalue() == "ok\r\x07 é \\ud800\n".encode()


def test_show_on_a_real_terminal_cannot_be_redrawn_by_a_reply(tmp_path: Path) -> None:
    """`fsm-agent show` under a pseudo-terminal: the reply's escape sequences arrive as text."""
    import pty

    hostile = '[{"handoff": {"why": "\\u001b]0;owned\\u0007\\r\\u001b[2Khalted: completed"}}]'
    done = run_lab(tmp_path, scripted(tmp_path, hostile))
    assert done.returncode == 4, done.stderr
    (run_id,) = run_ids(tmp_path / "j.db")
    leader, follower = pty.openpty()
    try:
        show = subprocess.Popen(
            [sys.executable, "-m", "fsm_agent", "show", run_id, "--db", "j.db"],
            cwd=tmp_path, stdin=follower, stdout=follower, stderr=follower,
        )  # fmt: skip
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        assert show.wait(timeout=60) == 0, seen
    finally:
        os.close(leader)
    assert b"why: \\x1b]0;owned\\x07\\x0d\\x1b[2Khalted: completed" in seen
    assert b"\x1b" not in seen


def test_an_exception_whose_message_cannot_be_made_is_a_named_failure(tmp_path: Path) -> None:
    """Once: formatting the failed call raised again, and the run ended internal_error."""
    probe = {"tool_call": {"name": "probe", "args": {}}}
    live_run(tmp_path, [probe], [Unprintable()])
    record = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert record["halt_reason"] == "tool_error"
    assert record["error"] == "Unprintable: <its message cannot be read: RuntimeError>"
    (tmp_path / "m").mkdir()
    live_run(tmp_path / "m", [Unprintable(), Unprintable(), Unprintable()], [])
    record = json.loads((tmp_path / "m" / "r.json").read_text(encoding="utf-8"))
    assert record["halt_reason"] == "empty_response"
    assert "model call failed: Unprintable: <its message cannot be read" in record["error"]


#: Found by the fuzz above: keys that hold a surrogate pair as two code points (a Python
#: value can; JSON text cannot) sorted differently once journaled, so the record's seal
#: did not verify. Values that enter a run are joined first (`encoding.joined`).
SPLIT_PAIRS = {"q": {"\ud83d\ude00": None, "\ufeff\uffff\U0010ffff": None}}


def test_a_split_surrogate_pair_in_a_reply_still_verifies() -> None:
    check_live([{"tool_call": {"name": "probe", "args": SPLIT_PAIRS}}], [], trace=False)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("\ud83d\ude00", "\U0001f600"),
        ({"\ud83d\ude00": ["a\udbff\udfffb"]}, {"\U0001f600": ["a\U0010ffffb"]}),
        (("\ud800", "\udc00x"), ("\ud800", "\udc00x")),  # lone ones stay lone
        ("plain", "plain"),
    ],
)
def test_joined_joins_split_pairs_at_any_depth(value: Any, expected: Any) -> None:
    assert joined(value) == expected
    plain = {"a": ["b", 1]}
    assert joined(plain) is plain  # nothing to join: the very value


def test_joined_walks_a_cycle_or_a_shared_part_once() -> None:
    looped: list[Any] = []
    looped.extend([looped, looped])  # 2**depth paths, one list
    assert joined(looped) is looped
    shared = ["\ud83d\ude00"]
    both = joined({"a": shared, "b": shared})
    assert both == {"a": ["\U0001f600"], "b": ["\U0001f600"]}
    assert both["a"] is both["b"]
