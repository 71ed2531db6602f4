"""Secrets never leave in any form (issue 27.4): a secret is redacted before anything is
previewed, cut or encoded, as text (any case, percent-encoded, any JSON spelling), as hex
and as base64 (standard or URL-safe, at each alignment inside a longer base64 string).

The proof is a scan: no 16-character piece of the secret, in any of those forms (and as
HTML or JSON would write them), is in what leaves a run — the journal's bytes (the SQLite
file and its WAL), the halt record, the trace copy, the run file (`export`), the report,
what `show`, `replay` and `runs` print, the console's pages and the OTLP bodies sent live and
by `export-traces`. The runs are real: `fsm-agent run` as a subprocess, a tools module, a
`python:` model and a user action the test writes, `--secret-env`.
"""

from __future__ import annotations

import base64
import datetime
import html
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm_agent import LOCAL
from fsm_agent.redaction import Redactor, Secret
from fsm_agent.runtime.outcomes import NOT_KEPT, PREVIEW_CHARS, jsonable
from fsm_agent.runtime.usage import MAX_NAME_CHARS, ModelUsage, call_usage
from tests.console_server import console
from tests.lab import lab_run
from tests.otlp_receiver import otlp_receiver

ROOT = Path(__file__).resolve().parent.parent
KEY_ENV = "FSM_TEST_FORMS_KEY"
MARKER = f"[redacted:{KEY_ENV}]"
#: 128 characters: letters and digits, and the characters that JSON, percent-encoding,
#: HTML and base64 each write differently (`/`, `+`, `"`, `\`, a space, `%`, `&`, `<`,
#: non-ASCII, one outside the BMP).
KEY = (
    'sk-live_DxAcYnb/nMXMUnav+Evbzy6xJJ"4rYLSdW8wo\\WCBr2KZ NHzAfNe6bR%fLw4UKé42Wq8Bx€c9i1n6m'
    "\U0001f60003M6uOSG=ePdTZNULRQ&1vNbjfjy1<SkDESms-gB"
)
#: The length of the pieces the scan looks for.
PIECE = 16


def u_escaped(text: str) -> str:
    """Every character as `\\uXXXX` (upper-case hex), as some servers write it."""
    return "".join(json.dumps(c)[1:-1] if ord(c) > 0xFFFF else f"\\u{ord(c):04X}" for c in text)


def emitted(secret: str) -> dict[str, str]:
    """How a careless tool or model hands a secret back: in every form the runtime must
    catch, the encoded ones inside longer encoded text, as they would be."""
    data = secret.encode()
    forms = {
        "as is": secret,
        "upper case": secret.upper(),
        "lower case": secret.lower(),
        "JSON-escaped": json.dumps(secret),
        "JSON-escaped twice": json.dumps(json.dumps(secret)),
        "\\u-escaped": u_escaped(secret),
        "hex": data.hex(),
        "HEX": data.hex().upper(),
        "percent-encoded": quote(secret, safe=""),
        "percent-encoded, lower-case hex": "".join(f"%{b:02x}" for b in data),
        "form-encoded": quote_plus(secret),
        "upper case, percent-encoded": quote(secret.upper(), safe=""),
    }
    for before in (b"", b"u", b"us", b"user:", b"Bearer:"):  # 0, 1, 2, 2 and 1 bytes past
        for name, encode in (("base64", base64.b64encode), ("URL-safe", base64.urlsafe_b64encode)):
            forms[f"{name} after {before!r}"] = encode(before + data + b":2026").decode()
        std = base64.b64encode(before + data).decode()
        forms[f"base64 after {before!r}, percent-encoded"] = quote(std, safe="")
    return forms


def _stable_base64(data: bytes) -> set[str]:
    """The base64 text only `data`'s bits decide, at each alignment, standard and URL-safe
    (each also percent-encoded): what two encodings with opposite surroundings share."""
    found: set[str] = set()
    for offset in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            low = encode(bytes(offset) + data + bytes(3)).decode()
            high = encode(b"\xff" * offset + data + b"\xff" * 3).decode()
            for a, b in ((low, high), (quote(low, safe=""), quote(high, safe=""))):
                found |= _pieces(a) & _pieces(b)
    return found


def _pieces(text: str) -> set[str]:
    return {text[i : i + PIECE] for i in range(len(text) - PIECE + 1)}


def forbidden(secret: str) -> frozenset[bytes]:
    """Every piece of `secret` no output may hold: each `PIECE`-byte window of each text
    form (as emitted, as HTML escapes it, as JSON writes it, in either way JSON writes
    non-ASCII), and of the base64 only the secret decides; lower-cased, for a scan that
    ignores case."""
    data = secret.encode()
    texts = [f for name, f in emitted(secret).items() if "base64" not in name]
    texts += [secret.upper(), secret.lower(), data.hex()]
    texts += [html.escape(t) for t in texts] + [json.dumps(t) for t in texts]
    texts += [json.dumps(t, ensure_ascii=False) for t in texts]
    windows = {t.encode()[i : i + PIECE] for t in texts for i in range(len(t.encode()) - PIECE + 1)}
    windows |= {w.encode() for w in _stable_base64(data)}
    return frozenset(w.lower() for w in windows if len(w) == PIECE)


FORBIDDEN = forbidden(KEY)


def leaked(content: bytes, pieces: frozenset[bytes] = FORBIDDEN) -> list[str]:
    """The pieces of the secret found in `content` (case ignored)."""
    low = content.lower()
    found = {
        low[i : i + PIECE] for i in range(len(low) - PIECE + 1) if low[i : i + PIECE] in pieces
    }
    return sorted(w.decode(errors="replace") for w in found)


def redactor(secret: str = KEY) -> Redactor:
    return Redactor([Secret(KEY_ENV, secret)])


# --- the scan finds what it looks for ----------------------------------------------------


@pytest.mark.parametrize("form", sorted(emitted(KEY)))
def test_the_scan_finds_each_form_unredacted(form: str) -> None:
    text = emitted(KEY)[form]
    assert leaked(f"before {text} after".encode()), form
    assert leaked(html.escape(json.dumps({"v": text})).encode()), form
    assert leaked(text[PIECE:].encode()), f"{form}: a piece is found, not only the whole"


def test_the_scan_finds_no_piece_in_other_text() -> None:
    assert leaked(b"sk-live_ and some ordinary text, " * 100) == []
    assert leaked(base64.b64encode(os.urandom(4000))) == []


# --- the redactor: every form -----------------------------------------------------------


@pytest.mark.parametrize("form", sorted(emitted(KEY)))
def test_each_form_is_redacted(form: str) -> None:
    text = f"Authorization: {emitted(KEY)[form]}; fetched 2026-12-03"
    redacted = redactor().text(text)
    assert MARKER in redacted
    assert leaked(redacted.encode()) == []
    assert redacted.startswith("Authorization: ")
    assert redacted.endswith("fetched 2026-12-03")


def test_each_form_is_redacted_inside_json_text() -> None:
    text = json.dumps({"forms": emitted(KEY)})
    for spelled in (text, json.dumps(text), json.dumps(text, ensure_ascii=False)):
        redacted = redactor().text(spelled)
        assert redacted.count(MARKER) == len(emitted(KEY)), spelled[:80]
        assert leaked(redacted.encode()) == []


def test_a_secret_in_base64_at_each_alignment_leaves_only_bits_it_shares() -> None:
    data = KEY.encode()
    for before in range(6):
        text = base64.b64encode(os.urandom(before) + data + os.urandom(5)).decode()
        head, marker, tail = redactor().text(text).partition(MARKER)
        assert marker
        assert text.startswith(head)
        assert text.endswith(tail)
        # left: the characters of what surrounds it, and one at each end it shares bits with
        assert len(head) <= -(-4 * before // 3)
        assert len(tail) <= 1 + -(-4 * 5 // 3) + 2  # and the padding


secrets_st = st.text(st.characters(codec="utf-8"), min_size=4, max_size=40).filter(
    lambda s: s.strip() == s and bool(s)
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(secret=secrets_st, form=st.sampled_from(sorted(emitted("abcd"))), pad=st.text(max_size=8))
def test_no_form_of_any_secret_is_left(secret: str, form: str, pad: str) -> None:
    r = redactor(secret)
    text = f"{pad}<{emitted(secret)[form]}>{pad}"
    redacted = r.text(text)
    assert MARKER in redacted, (form, text)
    if len(secret.encode()) >= 2 * PIECE:
        assert leaked(redacted.encode(), forbidden(secret)) == [], (form, text)


def test_redaction_ignores_what_is_not_a_secret() -> None:
    r = redactor()
    text = "Plain text, 0123456789abcdef, SGVsbG8gd29ybGQ=, %41%42 and \\u0041: " * 20
    assert r.text(text) == text
    assert r.value({"n": 12, "t": text, "b": b"\xff"}) == {"n": 12, "t": text, "b": b"\xff"}


def test_a_number_that_spells_a_secret_and_undecodable_bytes_are_redacted() -> None:
    r = Redactor([Secret("PIN", "90210431")])
    assert r.value({"pin": 990210431, "n": 7}) == {"pin": "9[redacted:PIN]", "n": 7}
    assert r.value(b"\xff 90210431") == b"\xff [redacted:PIN]"


# --- redaction before any preview or cut -------------------------------------------------


class Holder:
    """An object whose repr carries the secret (a client, a credentials object)."""

    def __repr__(self) -> str:
        return f"Holder(token={KEY!r}, scope='read')"


PREVIEWED: dict[str, Any] = {
    "a dict with a date": {"auth": KEY, "fetched": datetime.date(2026, 12, 3)},
    "a string over the limit": "x" * 150 + KEY + "y" * 1_000_000,
    "bytes over the limit": b"x" * 150 + KEY.encode() + b"y" * 4_000_000,
    "bytes that are not UTF-8": b"\xff\xfe" + KEY.encode(),
    "a set": {KEY},
    "an object's repr": Holder(),
    "a tuple of objects": (Holder(), datetime.date(2026, 12, 3)),
    "base64 in a dict with a date": {
        "basic": base64.b64encode(b"user:" + KEY.encode()).decode(),
        "at": datetime.date(2026, 12, 3),
    },
    "hex in a set": {KEY.encode().hex().upper()},
    "keys over the size limit": {f"{KEY}{'z' * 120}{i}": i for i in range(8_000)},
}


@pytest.mark.parametrize("what", sorted(PREVIEWED))
def test_a_value_kept_as_a_preview_holds_no_piece_of_a_secret(what: str) -> None:
    kept = jsonable(PREVIEWED[what], redactor())
    assert isinstance(kept, str)
    assert kept.startswith(NOT_KEPT)
    assert len(kept) <= len(NOT_KEPT) + 2 * PREVIEW_CHARS
    assert leaked(json.dumps(kept).encode()) == [], kept
    assert leaked(kept.encode()) == [], kept


def test_a_model_name_is_cut_only_once_it_is_redacted() -> None:
    usage = ModelUsage(response_model="gateway/" + "x" * 150 + KEY, response_id=KEY * 3)
    cut = call_usage(None, usage, 5, redactor())
    assert cut.response_model is not None
    assert cut.response_model.startswith("gateway/xxx")
    assert len(cut.response_model) <= MAX_NAME_CHARS
    assert cut.response_id == MARKER * 3
    assert leaked(json.dumps([cut.response_model, cut.response_id]).encode()) == []


# --- real runs: nothing that leaves holds a piece ----------------------------------------

TOOLS_MODULE = '''\
"""Tools that hand the secret back in every form a careless tool might."""

import base64
import datetime
import os
import time
from pathlib import Path
from urllib.parse import quote

from fsm_agent import Receipt, ToolError, ToolRegistry, ToolResult
from tests.test_secret_forms import Holder, emitted

TOOLS = ToolRegistry()
KEY = os.environ["FSM_TEST_FORMS_KEY"]
DATA = KEY.encode()


@TOOLS.tool(side_effect=False)
def fetch_auth() -> ToolResult:
    """Not JSON data (a date): kept as a preview."""
    return ToolResult(observation={"auth": KEY, "fetched": datetime.date(2026, 12, 3)})


@TOOLS.tool(side_effect=False)
def big_blob() -> ToolResult:
    """Over 1,000,000 characters: kept as a preview."""
    return ToolResult(observation="x" * 150 + KEY + "y" * 1_000_000)


@TOOLS.tool(side_effect=False)
def encodings() -> ToolResult:
    """Every form, as plain JSON data (kept as is, redacted)."""
    return ToolResult(observation={**emitted(KEY), "header": "Basic " + emitted(KEY)["as is"]})


@TOOLS.tool(side_effect=False)
def a_set() -> ToolResult:
    return ToolResult(observation={KEY, "other"})


@TOOLS.tool(side_effect=False)
def an_object() -> ToolResult:
    return ToolResult(observation=Holder())


@TOOLS.tool(side_effect=False)
def raw_bytes() -> ToolResult:
    return ToolResult(observation=b"\\xff\\xfe" + DATA)


@TOOLS.tool(side_effect=False)
def failing() -> ToolResult:
    basic = base64.b64encode(b"user:" + DATA).decode()
    raise ToolError(f"401 for Basic {basic} (key {KEY.upper()})", retryable=True)


@TOOLS.tool(side_effect=False)
def receipted(token: str = "") -> ToolResult:
    return ToolResult(
        receipts=(Receipt(status=200, id=f"tok:{DATA.hex()}", checksum=KEY.lower()),),
        observation={"token": token, "echo": base64.urlsafe_b64encode(DATA).decode()},
        final=f"signed in with {quote(KEY, safe='')}",
    )


@TOOLS.tool(side_effect=False)
def hang() -> ToolResult:
    """Says it has begun, then waits to be killed (so the journal's WAL is left behind)."""
    Path("hanging").write_text("now", encoding="utf-8")
    time.sleep(300)
    return ToolResult(observation="woke up")
'''

MODEL_MODULE = '''\
"""A model adapter that replies with what is not JSON data, each holding the secret."""

import datetime
import os

from tests.test_secret_forms import Holder

KEY = os.environ["FSM_TEST_FORMS_KEY"]
REPLIES = [
    {"auth": KEY, "fetched": datetime.date(2026, 12, 3)},
    {KEY},
    Holder(),
    b"\\xff" + KEY.encode(),
    "z" * 150 + KEY + "z" * 1_000_000,
]


def reply(prompt):
    return REPLIES[min(prompt.step, len(REPLIES)) - 1]
'''

ACTION_MODULE = '''\
"""A user action whose result is not JSON data, and a guard that raises quoting the secret."""

import datetime
import os

from fsm_agent import ToolResult
from fsm_agent.runtime.actions import ActionResult

KEY = os.environ["FSM_TEST_FORMS_KEY"]


def fetch(snapshot):
    observation = {"auth": KEY.upper(), "at": datetime.date(2026, 12, 3)}
    return ActionResult("fetched", ToolResult(observation=observation))


def boom(snapshot):
    raise RuntimeError(f"cannot decide with token {KEY.encode().hex()}")
'''

ACTION_MACHINE = """\
name: leaky_action
description: a user action that returns the secret, and a guard that raises quoting it
initial: fetching
budgets: {max_steps: 2, wall_clock_ms: 30000, max_cost: 0.5, tool_timeout_ms: 10000,
          max_retries: 0}
states:
  fetching: {action: "leaky_actions:fetch", outcomes: [fetched]}
  done: {terminal: true}
  budget_exhausted: {terminal: true}
  handoff: {terminal: true}
transitions:
  - {trigger: fetched, source: fetching, dest: handoff, guards: ["leaky_actions:boom"],
     halt: handoff_requested}
  - {trigger: fetched, source: fetching, dest: done, halt: completed}
  - {trigger: failed, source: fetching, dest: handoff, halt: tool_error}
  - {trigger: timed_out, source: fetching, dest: budget_exhausted, halt: tool_timeout}
"""


def _call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_call": {"name": name, "args": args}}


#: The scripted model: each leaky tool, then replies that hold the secret (a reply over
#: 1,000,000 characters, an answer in hex and URL-safe base64), then the receipted call
#: that ends the run done.
REPLIES: list[Any] = [
    _call("fetch_auth"),
    _call("big_blob"),
    _call("encodings"),
    _call("a_set"),
    _call("an_object"),
    _call("raw_bytes"),
    _call("failing"),
    "z" * 150 + KEY + "z" * 1_000_000,
    {"answer": f"{KEY.encode().hex()} / {base64.urlsafe_b64encode(KEY.encode()).decode()}"},
    _call("receipted", token=quote(KEY, safe="")),
]
TOOL_NAMES = "fetch_auth,big_blob,encodings,a_set,an_object,raw_bytes,failing,receipted"


def fsm(cwd: Path, *args: str, env: dict[str, str], ok: tuple[int, ...] = (0,)) -> bytes:
    """`fsm-agent ARGS…` as a subprocess in `cwd`; what it printed (stdout and stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "fsm_agent", *args], cwd=cwd, env=env, capture_output=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode in ok, (args, done.returncode, done.stderr.decode()[-2000:])
    return done.stdout + done.stderr


def journal_bytes(tmp_path: Path, name: str = "j.db") -> bytes:
    """The journal as a reader of the disk finds it: the SQLite file, its WAL (and shm)."""
    return b"".join(p.read_bytes() for p in sorted(tmp_path.glob(f"{name}*")))


def killed_midway(tmp_path: Path, env: dict[str, str]) -> dict[str, bytes]:
    """A run killed (SIGKILL) while a tool runs, after leaky tools and a failing one: the
    journal it leaves, its WAL not checkpointed into the file."""
    replies = [_call("fetch_auth"), _call("encodings"), _call("failing"), _call("big_blob"),
               _call("hang")]  # fmt: skip
    (tmp_path / "killed.json").write_text(json.dumps(replies), encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, "-m", "fsm_agent", "run", "agent_loop", "--task", KEY, "--model",
         "scripted:killed.json", "--tools", "leaky_tools", "--allow",
         "fetch_auth,encodings,failing,big_blob,hang", "--secret-env", KEY_ENV, "--db", "k.db",
         "--record", "k.json", "--tool-timeout-ms", "600000", "--wall-clock-ms", "600000"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "hanging").exists():
            assert process.poll() is None, "the run ended before its last tool"
            assert time.monotonic() < deadline, "the run never reached its last tool"
            time.sleep(0.05)
    finally:
        process.kill()
        process.wait(30)
    wal = tmp_path / "k.db-wal"
    assert wal.exists(), "a killed writer leaves its WAL"
    assert wal.stat().st_size > 0
    assert MARKER.encode() in wal.read_bytes()  # its frames hold the redacted steps
    return {"journal of a killed run (file, WAL)": journal_bytes(tmp_path, "k.db")}


def console_pages(db: Path, run_ids: list[str]) -> dict[str, bytes]:
    """Every page the console serves of the runs: the list, the charts and their data, each
    run's page, each step's detail and the live stream (to its end)."""
    found: dict[str, bytes] = {}
    with console(db) as c, httpx.Client(base_url=c.url, timeout=60) as client:
        for path in ("/", "/charts", "/api/charts", "/?q=sk-live"):
            found[f"console {path}"] = client.get(path).content
        for run_id in run_ids:
            page = client.get(f"/runs/{run_id}")
            assert page.status_code == 200
            found[f"console run {run_id}"] = page.content
            seq = 0
            while (step := client.get(f"/api/runs/{run_id}/events/{seq}")).status_code == 200:
                found[f"console step {run_id}/{seq}"] = step.content
                seq += 1
            assert seq > 1, f"no steps of {run_id}"
            found[f"console live {run_id}"] = client.get(f"/api/runs/{run_id}/live").content
    return found


def test_no_piece_of_a_secret_leaves_a_run_in_any_form(tmp_path: Path) -> None:
    (tmp_path / "leaky_tools.py").write_text(TOOLS_MODULE, encoding="utf-8")
    (tmp_path / "leaky_model.py").write_text(MODEL_MODULE, encoding="utf-8")
    (tmp_path / "leaky_actions.py").write_text(ACTION_MODULE, encoding="utf-8")
    (tmp_path / "leaky_action.yaml").write_text(ACTION_MACHINE, encoding="utf-8")
    (tmp_path / "replies.json").write_text(json.dumps(REPLIES), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FSM_AGENT_"))}
    env |= {KEY_ENV: KEY, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    task = f"Sign in: the key is {base64.b64encode(KEY.encode()).decode()}"
    common = ("--secret-env", KEY_ENV, "--db", "j.db", "--otel", "--otel-content")
    found: dict[str, bytes] = {}
    with otlp_receiver() as receiver:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
        found["run (scripted, tools)"] = fsm(
            tmp_path, "run", "agent_loop", "--task", task, "--model", "scripted:replies.json",
            "--tools", "leaky_tools", "--allow", TOOL_NAMES, "--record", "a.json",
            "--trace-copy", "a-trace.json", "--max-steps", "12", "--max-retries", "4",
            "--wall-clock-ms", "120000", *common, env=env,
        )  # fmt: skip
        found["run (python model)"] = fsm(
            tmp_path, "run", "agent_loop", "--task", KEY.lower(), "--model",
            "python:leaky_model:reply", "--record", "b.json", "--max-steps", "8",
            "--max-retries", "4", "--wall-clock-ms", "120000", *common, env=env, ok=(3, 4),
        )  # fmt: skip
        found["run (user action, raising guard)"] = fsm(
            tmp_path, "run", "leaky_action.yaml", "--task", "t", "--model",
            "scripted:replies.json", "--record", "c.json", *common, env=env, ok=(70,),
        )  # fmt: skip
        found["journal, after the runs"] = journal_bytes(tmp_path)
        run_ids = [json.loads((tmp_path / f"{n}.json").read_bytes())["run_id"] for n in "abc"]
        fsm(tmp_path, "export-traces", "--all", "--content", "--db", "j.db", env=env)
        found |= {f"OTLP body {i}": body for i, body in enumerate(receiver.bodies)}
        assert len(receiver.spans) > 40  # live and exported: every step of the three runs
    found |= {f"{n}.json": (tmp_path / f"{n}.json").read_bytes() for n in ("a", "b", "c")}
    found["trace copy"] = (tmp_path / "a-trace.json").read_bytes()
    for i, run_id in enumerate(run_ids):
        exported, report = tmp_path / f"run-{i}.json", tmp_path / f"report-{i}.html"
        fsm(tmp_path, "export", run_id, "-o", exported.name, "--db", "j.db", env=env)
        fsm(tmp_path, "report", run_id, "-o", report.name, "--db", "j.db", env=env)
        found[f"run file {i}"], found[f"report {i}"] = exported.read_bytes(), report.read_bytes()
        for how in (("--json",), ()):
            found[f"show {i} {how}"] = fsm(tmp_path, "show", run_id, *how, "--db", "j.db", env=env)
        found[f"replay {i}"] = fsm(tmp_path, "replay", run_id, "--db", "j.db", env=env, ok=(0, 3))
    found["runs"] = fsm(tmp_path, "runs", "--db", "j.db", env=env)
    found |= console_pages(tmp_path / "j.db", run_ids)
    found["journal, at the end"] = journal_bytes(tmp_path)
    found |= killed_midway(tmp_path, env)

    # Every leak path was taken, and redacted: the record of each run says so.
    a, b, c = (json.loads(found[f"{n}.json"]) for n in "abc")
    assert a["halt_reason"] == "completed"
    assert [t["name"] for t in a["tool_calls"]] == TOOL_NAMES.split(",")
    assert b["halt_reason"] == "schema_fail"
    assert c["halt_reason"] == "internal_error"
    assert MARKER in c["error"]
    journal = found["journal, at the end"]
    assert journal.count(MARKER.encode()) > 20
    # a preview of each value not kept as is: 5 tool results, 6 replies, 1 action's result
    assert journal.count(NOT_KEPT.encode()) >= 12
    leaks = {where: pieces for where, content in found.items() if (pieces := leaked(content))}
    assert leaks == {}


def test_a_submitted_task_is_redacted_before_it_leaves_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job `submit` starts on Temporal carries the task with every form of the secret
    redacted (`frozen_job`); a secret variable that is not set is refused before anything."""
    from fsm_agent.submission import frozen_job

    monkeypatch.setenv(KEY_ENV, KEY)
    task = "Sign in with " + " or ".join(emitted(KEY).values())
    job = frozen_job("agent_loop", task, secret_env=[KEY_ENV])
    assert job.task.count(MARKER) >= len(emitted(KEY))
    assert leaked(job.task.encode()) == []
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    fsm(tmp_path, "submit", "agent_loop", "--task", "t", "--secret-env", KEY_ENV, "--db",
        "r.db", env={**env, "PYTHONPATH": str(ROOT)}, ok=(2,))  # fmt: skip
    assert not (tmp_path / "r.db").exists()


class LeakyVoter:
    """A local repair voter whose rewrite carries the secret: first in a value that is not
    JSON data (kept as a preview), then base64 in an answer (kept, and parsed)."""

    lane = LOCAL

    def __init__(self) -> None:
        self.votes = 0

    def __call__(self, raw: Any) -> Any:
        self.votes += 1
        if self.votes == 1:
            return {"answer": KEY, "at": datetime.date(2026, 12, 3), "pad": "p" * 300}
        return {"answer": base64.b64encode(b"user:" + KEY.encode()).decode()}


def test_a_repair_vote_is_redacted_before_it_is_previewed_or_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    voter = LeakyVoter()
    record = lab_run(tmp_path, ["prose", "more prose"], repair=voter, secret_env=[KEY_ENV])
    assert voter.votes == 2
    journal = journal_bytes(tmp_path)
    assert NOT_KEPT.encode() in journal  # the first rewrite, as a preview
    assert MARKER.encode() in journal
    assert leaked(journal) == []
    assert leaked((tmp_path / "r.json").read_bytes()) == []
    assert record.answer is None or MARKER in record.answer
