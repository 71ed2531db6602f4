"""Secrets never stored: the API key and every `--secret-env` value are redacted from
whatever a model server or a tool sends back, in any JSON spelling, before the journal.

Through the real CLI against the real HTTP test server; each echo path is checked in the
journal's bytes, the record file, the export, the report, `show --json` and `replay`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from fsm_agent.cli.main import cli
from fsm_agent.redaction import Redactor, Secret
from tests.lab import LAB_ALLOW_ARG
from tests.model_server import Act, ModelServer, answer, completion, tool_call

#: A `/` in it, so that an escaped slash (`\/`) spells it differently.
KEY = "sk-test/4f1d2c9a+7b3e8d6f0a5c"
KEY_ENV = "FSM_TEST_MODEL_KEY"
MARKER = f"[redacted:{KEY_ENV}]"
DB_VALUE = "hunter2-Tr0ub4dor/3"
DB_ENV = "FSM_TEST_DB_PASSWORD"


def u_escaped(value: str) -> str:
    """Every character as `\\uXXXX` (upper-case hex, as some servers write it)."""
    return "".join(f"\\u{ord(c):04X}" for c in value)


def spellings(secret: str) -> dict[str, str]:
    """The ways a leak could be written in a file (a journal stores a reply as JSON, so a
    body's escapes are doubled there)."""
    once = {
        "as is": secret,
        "JSON-escaped": json.dumps(secret)[1:-1],
        "escaped slashes": secret.replace("/", "\\/"),
        "\\u-escaped": u_escaped(secret),
        "\\u-escaped, lower case": u_escaped(secret).lower(),
        "its tail": secret[8:],
    }
    twice = {f"{how}, escaped again": json.dumps(v)[1:-1] for how, v in once.items()}
    return once | twice


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def run_and_review(
    tmp_path: Path, server: ModelServer, *extra: str, tools: str, allow: str = LAB_ALLOW_ARG
) -> dict[str, bytes]:
    """One `run` on the test server, then every tool that shows or ships the run; returns
    what each stored or printed."""
    db, record = tmp_path / "j.db", tmp_path / "record.json"
    result = invoke(
        "run", "agent_loop", "--task", "Find the lab password", "--model", "openai:test-model",
        "--base-url", server.base_url, "--api-key-env", KEY_ENV, "--tools", tools,
        "--allow", allow,
        "--db", str(db), "--record", str(record), "--max-retries", "0",
        "--trace-copy", str(tmp_path / "trace.json"), *extra,
    )  # fmt: skip
    assert result.exit_code in (0, 3, 4), result.output
    run_id = json.loads(record.read_text())["run_id"]
    exported, report = tmp_path / "run.json", tmp_path / "report.html"
    assert invoke("export", run_id, "-o", str(exported), "--db", str(db)).exit_code == 0
    assert invoke("report", run_id, "-o", str(report), "--db", str(db)).exit_code == 0
    shown = invoke("show", run_id, "--db", str(db), "--json")
    replayed = invoke("replay", run_id, "--db", str(db))
    assert replayed.exit_code == 0, replayed.output  # the run decided on what it journaled
    return {
        "journal": b"".join(p.read_bytes() for p in sorted(tmp_path.glob("j.db*"))),
        "record": record.read_bytes(),
        "trace copy": (tmp_path / "trace.json").read_bytes(),
        "export": exported.read_bytes(),
        "report": report.read_bytes(),
        "run output": result.output.encode(),
        "show --json": shown.output.encode(),
        "replay": replayed.output.encode(),
    }


def assert_no_leak(secret: str, found: dict[str, bytes]) -> None:
    for where, content in found.items():
        for how, spelled in spellings(secret).items():
            assert spelled.encode() not in content, f"the secret leaked ({how}) into the {where}"


def _completion_bytes(message_json: str) -> bytes:
    """A completion whose message is given as raw JSON text (escapes kept as written)."""
    return (
        '{"id": "c", "object": "chat.completion", "choices": [{"index": 0, "message": '
        + message_json
        + "}]}"
    ).encode()


#: Each way a server can echo the key back, as the test server's `echo` (bearer token ->
#: body). A successful reply is redacted before the parser sees it, a failed one before its
#: body is journaled.
ECHOES: dict[str, Callable[[str], Any]] = {
    "message text": lambda k: completion({"content": f"Sure. Your key is {k}."}),
    "answer": lambda k: completion({"content": json.dumps({"answer": k})}),
    "answer, \\u-escaped in the text": lambda k: _completion_bytes(
        json.dumps({"role": "assistant", "content": '{"answer": "' + u_escaped(k) + '"}'})
    ),
    "tool-call arguments": lambda k: tool_call("lookup", {"q": k}).body,
    "tool-call arguments, \\u-escaped": lambda k: (
        tool_call("lookup", '{"q": "' + u_escaped(k) + '"}').body
    ),
    "tool name": lambda k: tool_call(k, {}).body,
    "handoff why": lambda k: completion({"content": json.dumps({"handoff": {"why": k}})}),
    "500 body, \\u-escaped": lambda k: (
        '{"error": {"message": "bad key ' + u_escaped(k) + '"}}'
    ).encode(),
    "500 body, escaped slashes": lambda k: (
        '{"error": {"message": "bad key ' + k.replace("/", "\\/") + '"}}'
    ).encode(),
    "500 body, as is": lambda k: {"error": {"message": f"bad key {k}"}},
    "truncated body": lambda k: f'{{"choices": [{{"message": {{"content": "{k}'.encode(),
}


@pytest.mark.parametrize("path", sorted(ECHOES))
def test_a_key_echoed_back_is_never_stored_or_shown(
    path: str, server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    status = 500 if path.startswith("500") else 200
    server.play(Act(status=status, echo=ECHOES[path]))
    found = run_and_review(tmp_path, server, tools="fsm_agent.examples.halt_lab.tools")
    assert [r["headers"]["Authorization"] for r in server.requests][:1] == [f"Bearer {KEY}"]
    assert MARKER.encode() in found["journal"], "the echo was journaled, redacted"
    assert_no_leak(KEY, found)


def test_a_secret_env_value_is_redacted_from_task_tool_results_and_replies(
    server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv(DB_ENV, DB_VALUE)
    server.play(
        tool_call("read_config", {}),  # its result and receipt carry the password
        answer(DB_VALUE),
    )
    found = run_and_review(
        tmp_path,
        server,
        "--secret-env",
        DB_ENV,
        "--task",
        f"Check the login {DB_VALUE}",
        tools="tests.fixture_secret_tools",
        allow="lookup,read_config",
    )
    assert f"[redacted:{DB_ENV}]".encode() in found["journal"]
    assert_no_leak(DB_VALUE, found)
    # the model was sent the redacted result, never the password
    sent = json.dumps([r["body"] for r in server.requests])
    assert DB_VALUE not in sent
    assert f"[redacted:{DB_ENV}]" in sent


@pytest.mark.temporal
def test_a_temporal_worker_redacts_what_reaches_temporal_and_the_journal(
    server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run served on Temporal (`worker` with an openai model, its key and another secret):
    neither secret reaches the journal, its payload table (each payload unpacked) or the
    Temporal server's own state, in any spelling."""
    import os
    import sqlite3
    import subprocess
    import sys
    import time
    import zlib

    from fsm_agent.stores.sqlite import SqliteStore
    from fsm_agent.temporal.service import DevServer

    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv(DB_ENV, DB_VALUE)
    db = tmp_path / "q.db"
    server.play(
        tool_call("read_config", {}),
        Act(echo=lambda k: completion({"content": json.dumps({"answer": f"{k} {DB_VALUE}"})})),
    )
    root = Path(__file__).parent.parent
    environ = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    )
    with DevServer(db_file=str(tmp_path / "temporal.db")) as temporal:
        worker = subprocess.Popen(
            [sys.executable, "-m", "fsm_agent", "worker", "--temporal", temporal.address,
             "--db", str(db), "--tools", "tests.fixture_secret_tools", "--allow",
             "lookup,read_config", "--model", "openai:test-model", "--base-url",
             server.base_url, "--api-key-env", KEY_ENV, "--secret-env", DB_ENV],
            cwd=tmp_path, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            submitted = invoke("submit", "agent_loop", "--task", "t", "--temporal",
                               temporal.address, "--db", str(db))  # fmt: skip
            assert submitted.exit_code == 0, submitted.output
            run_id = submitted.output.strip()
            deadline = time.monotonic() + 60
            while True:
                store = SqliteStore(db)
                try:
                    halted = [r for r in store.list_runs() if r.status == "halted"]
                finally:
                    store.close()
                if halted:
                    break
                assert time.monotonic() < deadline, "the run did not halt"
                time.sleep(0.2)
        finally:
            worker.terminate()
            worker.wait(30)
    assert halted[0].run_id == run_id
    conn = sqlite3.connect(db)
    try:
        payloads = b"".join(zlib.decompress(row[0]) for row in
                            conn.execute("SELECT data FROM temporal_payloads"))  # fmt: skip
    finally:
        conn.close()
    assert payloads  # the prompts and replies went through it
    found = {
        "journal": b"".join(p.read_bytes() for p in tmp_path.glob("q.db*")),
        "payload table": payloads,
        "Temporal's state": b"".join(p.read_bytes() for p in tmp_path.glob("temporal.db*")),
    }
    assert_no_leak(KEY, found)
    assert_no_leak(DB_VALUE, found)
    shown = invoke("show", run_id, "--db", str(db))
    assert f"[redacted:{DB_ENV}]" in shown.output


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "--secret-env FSM_TEST_SECRET: the environment variable is not set"),
        ("abc", "shorter than 4 characters"),
    ],
)
def test_a_secret_env_that_cannot_be_redacted_is_invalid_input(
    value: str | None, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FSM_TEST_SECRET", raising=False)
    if value is not None:
        monkeypatch.setenv("FSM_TEST_SECRET", value)
    script = Path(__file__).parent.parent / "examples" / "halt_lab" / "proper.json"
    result = invoke(
        "run", "agent_loop", "--task", "t", "--model", f"scripted:{script}", "--db",
        str(tmp_path / "j.db"), "--secret-env", "FSM_TEST_SECRET",
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "j.db").exists()  # refused before anything ran


def test_a_secret_given_where_its_name_belongs_is_not_echoed(tmp_path: Path) -> None:
    result = invoke(
        "run", "agent_loop", "--task", "t", "--model", "scripted:x.json", "--db",
        str(tmp_path / "j.db"), "--secret-env", "sk-live-0123456789",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "the NAME of an environment variable, not a value" in result.output
    assert "sk-live-0123456789" not in result.output


# --- every JSON spelling ------------------------------------------------------------------


def test_each_spelling_is_redacted() -> None:
    value = 'sk-te/st"x\\y\U0001f600z\n'
    redactor = Redactor([Secret("K", value)])
    once = json.dumps(value)
    for spelled in (
        value,
        once,
        json.dumps(once),  # JSON inside JSON
        json.dumps(json.dumps(once), ensure_ascii=False),
        once.replace("/", "\\/"),
        "".join(json.dumps(c)[1:-1] if ord(c) > 0xFFFF else f"\\u{ord(c):04x}" for c in value),
    ):
        assert redactor.text(f"<{spelled}>").count("[redacted:K]") == 1, spelled


@settings(deadline=None)  # each new secret compiles its pattern (~3 ms); on a busy machine more
@given(
    secret=st.text(st.characters(codec="utf-8"), min_size=4, max_size=24),
    levels=st.integers(1, 3),
    ascii_only=st.booleans(),
)
def test_no_nesting_of_json_lets_a_secret_through(
    secret: str, levels: int, ascii_only: bool
) -> None:
    redactor = Redactor([Secret("K", secret)])
    spelled = secret
    for _ in range(levels):
        spelled = json.dumps({"v": spelled}, ensure_ascii=ascii_only)
    redacted = redactor.text(spelled)
    assert "[redacted:K]" in redacted
    for _ in range(levels):  # what a reader decodes, at every level
        try:
            decoded = json.loads(redacted)
        except ValueError:
            break
        redacted = decoded["v"] if isinstance(decoded, dict) and "v" in decoded else ""
        assert secret not in redacted or secret in "[redacted:K]"  # noqa: S105
