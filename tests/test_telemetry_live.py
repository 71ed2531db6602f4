"""Traces sent live (`run --otel`, `worker --otel`) and from the journal (`export-traces`),
to a real OTLP/HTTP receiver on 127.0.0.1; never on the halt path: an endpoint that hangs
or is not there changes nothing about a run, and nothing is sent unless asked.

Runs are real: the CLI in process (CliRunner) or as a real `fsm-agent` subprocess, the
lab's tools, scripted replies, SQLite journals under tmp_path.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from fsm_agent import ScriptedModel, load_tools, run
from fsm_agent.cli.main import cli
from fsm_agent.errors import RunPaused
from fsm_agent.journal.store import Control
from fsm_agent.runtime.journaling import now_iso
from fsm_agent.runtime.record import read_record
from fsm_agent.stores import open_store
from fsm_agent.telemetry.content import TraceOptions
from fsm_agent.telemetry.live import LiveTracer
from tests.lab import LAB_ALLOW, LAB_ALLOW_ARG
from tests.otlp_receiver import OtlpReceiver, otlp_receiver
from tests.trace_runs import LAB_TOOLS, TASK

ROOT = Path(__file__).parent.parent
LOOKUP = {"tool_call": {"name": "lookup", "args": {"q": "lab password"}}}
REPLIES = [LOOKUP, {"answer": "swordfish"}]
#: root, 4 transitions, 2 model calls, 1 tool call
SPANS = 8


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    with otlp_receiver() as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.endpoint)
        yield rx


@pytest.fixture(autouse=True)
def _no_tracing_from_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("OTEL_", "FSM_AGENT_OTEL")):
            monkeypatch.delenv(name)


def script(tmp_path: Path, replies: list[Any] = REPLIES) -> str:
    path = tmp_path / "replies.json"
    path.write_text(json.dumps(replies), encoding="utf-8")
    return f"scripted:{path}"


def run_args(tmp_path: Path, name: str = "r") -> list[str]:
    return ["run", "agent_loop", "--task", TASK, "--model", script(tmp_path), "--tools",
            LAB_TOOLS, "--allow", LAB_ALLOW_ARG, "--db", str(tmp_path / "j.db"), "--record",
            str(tmp_path / f"{name}.json"), "--quiet"]  # fmt: skip


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def until(check: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_run_otel_sends_the_run_live_and_export_sends_the_same_ids(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    result = invoke(*run_args(tmp_path), "--otel")
    assert result.exit_code == 0, result.output
    assert len(receiver.spans) == SPANS  # flushed before the command returned
    names = sorted(s["name"] for s in receiver.spans)
    assert names == sorted(["invoke_agent agent_loop",
                            "transition drafting -> tool_pending",
                            "transition tool_pending -> awaiting_receipts",
                            "transition awaiting_receipts -> drafting",
                            "transition drafting -> done", "chat", "chat",
                            "execute_tool lookup"])  # fmt: skip
    root = next(s for s in receiver.spans if s["parent_id"] is None)
    assert root["resource"]["service.name"] == "fsm-agent"
    assert root["scope"] == ("fsm_agent", "0.1.0", "https://opentelemetry.io/schemas/1.41.0")
    assert root["attributes"]["fsm_agent.halt.reason"] == "completed"
    assert all(p == "/v1/traces" for p, _ in receiver.requests)
    live = {s["span_id"]: s for s in receiver.spans}
    exported = invoke("export-traces", "@latest", "--db", str(tmp_path / "j.db"), "--json")
    assert exported.exit_code == 0, exported.output
    summary = json.loads(exported.stdout)
    assert summary["sent_spans"] == SPANS
    assert summary["runs"][0]["root"] is True
    again = receiver.spans[SPANS:]
    assert {s["span_id"]: (s["start_ns"], s["end_ns"]) for s in again} == {
        k: (s["start_ns"], s["end_ns"]) for k, s in live.items()
    }


def test_the_resource_follows_otel_service_name_and_resource_attributes(
    tmp_path: Path, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "agents-prod")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=staging")
    assert invoke(*run_args(tmp_path), "--otel").exit_code == 0
    resource = receiver.spans[0]["resource"]
    assert resource["service.name"] == "agents-prod"
    assert resource["deployment.environment"] == "staging"


def test_nothing_is_sent_unless_tracing_is_asked_for(
    tmp_path: Path, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert invoke(*run_args(tmp_path)).exit_code == 0
    child = subprocess.run([sys.executable, "-m", "fsm_agent", *run_args(tmp_path, "r2")],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert child.returncode == 0, child.stderr
    assert receiver.requests == []
    # OTEL_SDK_DISABLED wins over --otel.
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert invoke(*run_args(tmp_path, "r3"), "--otel").exit_code == 0
    assert receiver.requests == []


@pytest.mark.parametrize("where", ["hangs", "nothing listens"])
def test_an_endpoint_that_hangs_or_is_not_there_changes_nothing_about_a_run(
    tmp_path: Path, where: str
) -> None:
    """A 30 s hang (or no server at all) against a real `fsm-agent run` process: the same
    halt, exit code and record as without tracing, in a few seconds."""

    def go(name: str, endpoint: str | None) -> tuple[subprocess.CompletedProcess[str], float]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        extra = []
        if endpoint is not None:
            env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
            extra = ["--otel"]
        began = time.monotonic()
        child = subprocess.run([sys.executable, "-m", "fsm_agent", *run_args(tmp_path, name),
                                *extra], cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=120)  # fmt: skip
        return child, time.monotonic() - began

    plain, plain_s = go("plain", None)
    with otlp_receiver(hang_s=30) as hanging:
        endpoint = hanging.endpoint if where == "hangs" else f"http://127.0.0.1:{free_port()}"
        traced, traced_s = go("traced", endpoint)
    assert traced.returncode == plain.returncode == 0, traced.stderr
    assert traced_s < plain_s + 5, (traced_s, plain_s)  # the flush waits 2 s at most
    a, b = read_record(tmp_path / "plain.json"), read_record(tmp_path / "traced.json")
    assert (a.halt_reason, a.terminal_state, a.steps_used, a.answer, a.meters.tool_calls) == (
        b.halt_reason, b.terminal_state, b.steps_used, b.answer, b.meters.tool_calls
    )  # fmt: skip
    assert "traces to" in traced.stderr  # what was not sent is said, once, on stderr
    assert "Traceback" not in traced.stderr


def test_a_full_queue_drops_events_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with otlp_receiver(hang_s=30) as hanging:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", hanging.endpoint)
        db = tmp_path / "j.db"
        tracer = LiveTracer(lambda: open_store(db, read_only=True), TraceOptions(), queue_size=1)
        record = run("agent_loop", task=TASK, model=ScriptedModel([LOOKUP] * 3 + REPLIES[1:]),
                     tools=load_tools(LAB_TOOLS), allow=LAB_ALLOW, store=db,
                     handle_signals=False, on_transition=tracer.on_transition)  # fmt: skip
        tracer.on_halt(record)
        assert tracer.close(0.5) > 0  # the hanging export still holds the thread
    assert record.halt_reason.value == "completed"
    assert tracer.counts.dropped > 0


def test_export_traces_selects_runs_by_id_time_or_all(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    db = str(tmp_path / "j.db")
    for n in range(3):
        assert invoke(*run_args(tmp_path, f"r{n}")).exit_code == 0
    store = open_store(db, read_only=True)
    ids = store.run_ids()
    store.close()
    everything = CliRunner().invoke(cli, ["export-traces", "--all", "--db", db])
    assert everything.exit_code == 0, everything.output
    assert f"sent {3 * SPANS} span(s) of 3 run(s)" in everything.stdout
    assert [line for line in everything.stderr.splitlines() if line.startswith("run ")] == [
        f"run {n}/3 {run_id}" for n, run_id in enumerate(ids, 1)
    ]
    one = invoke("export-traces", ids[1][:6], "--db", db, "--json")
    assert [r["run_id"] for r in json.loads(one.stdout)["runs"]] == [ids[1]]
    recent = invoke("export-traces", "--since", "1h", "--db", db, "--json")
    assert [r["run_id"] for r in json.loads(recent.stdout)["runs"]] == ids
    none = invoke("export-traces", "--until", "2000-01-01", "--db", db, "--json")
    assert json.loads(none.stdout)["runs"] == []
    assert len({s["span_id"] for s in receiver.spans}) == 3 * SPANS  # resent, same ids


@pytest.mark.parametrize(
    "args",
    [[], ["@latest", "--all"], ["--all", "--since", "1h"], ["--since", "1h", "--until", "2h"]],
)
def test_export_traces_needs_one_selection(tmp_path: Path, args: list[str]) -> None:
    assert invoke(*run_args(tmp_path)).exit_code == 0
    result = invoke("export-traces", *args, "--db", str(tmp_path / "j.db"))
    assert result.exit_code == 2
    assert result.output.startswith("Error: ")


def test_export_traces_to_an_endpoint_that_is_down_is_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(2):
        assert invoke(*run_args(tmp_path, f"r{n}")).exit_code == 0
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    result = invoke("export-traces", "--all", "--db", str(tmp_path / "j.db"), "--json")
    assert result.exit_code == 1
    summary = json.loads(result.stdout)
    assert len(summary["failed"]) == 1
    assert len(summary["not_tried"]) == 1
    why = summary["runs"][0]["error"]  # why it was not taken
    assert why.startswith("nothing listens at 127.0.0.1:"), why
    assert "(connection refused)" in why
    text = invoke("export-traces", "--all", "--db", str(tmp_path / "j.db"))
    assert "(the endpoint did not take its spans: nothing listens at 127.0.0.1:" in text.stdout


@pytest.mark.parametrize(
    ("protocol", "named"),
    [("grpc", "opentelemetry-exporter-otlp-proto-grpc"), ("http/json", "not supported")],
)
def test_a_protocol_that_cannot_be_sent_is_exit_2_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, protocol: str, named: str
) -> None:
    grpc = "opentelemetry.exporter.otlp.proto.grpc"  # hidden, if installed (the phoenix extra)
    for name in [m for m in sys.modules if m == grpc or m.startswith(f"{grpc}.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, grpc, None)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    result = invoke(*run_args(tmp_path), "--otel")
    assert result.exit_code == 2
    assert named in result.output
    assert not (tmp_path / "j.db").exists()  # refused before anything ran


def test_without_the_otel_packages_the_error_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "opentelemetry" or m.startswith("opentelemetry.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    for args in ([*run_args(tmp_path), "--otel"], ["export-traces", "--all", "--db", "x.db"]):
        result = invoke(*args)
        assert result.exit_code == 2
        assert "pip install 'fsm-agent[otel]'" in result.output
        assert "Traceback" not in result.output


class PausingModel:
    """Scripted replies, and a person who pauses the run during its first model call."""

    def __init__(self, db: Path, run_id: str) -> None:
        self.db, self.run_id = db, run_id
        self.replies = ScriptedModel([LOOKUP, {"answer": "swordfish"}])
        self.lane = self.replies.lane

    def __call__(self, prompt: Any) -> Any:
        if prompt.step == 1:
            store = open_store(self.db)
            store.add_control(Control(id=0, run_id=self.run_id, kind="pause", payload={},
                                      who="ops", why="change window", at=now_iso()))  # fmt: skip
            store.close()
        return self.replies(prompt)


def test_resume_otel_takes_over_the_trace_with_the_journal_s_ids(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    """A run traced only from its resume on: the spans sent live are exactly those that
    export-traces makes for the same steps (the tracer read the steps before the resume)."""
    db = tmp_path / "j.db"
    with pytest.raises(RunPaused):
        run("agent_loop", task=TASK, model=PausingModel(db, "paused-run"), run_id="paused-run",
            tools=load_tools(LAB_TOOLS), allow=LAB_ALLOW, store=db,
            handle_signals=False)  # fmt: skip
    resumed = invoke("resume", "paused-run", "--model", script(tmp_path), "--tools", LAB_TOOLS,
                     "--db", str(db), "--record", str(tmp_path / "r.json"), "--otel")  # fmt: skip
    assert resumed.exit_code == 0, resumed.output
    live = {s["span_id"]: s for s in receiver.spans}
    root = next(s for s in live.values() if s["parent_id"] is None)
    assert [e[0] for e in root["events"]] == ["fsm_agent.operator", "fsm_agent.resumed"]
    assert invoke("export-traces", "paused-run", "--db", str(db)).exit_code == 0
    whole = {s["span_id"]: s for s in receiver.spans[len(live) :]}
    assert set(live) < set(whole)  # the steps before the pause were not sent live
    assert all(whole[k]["start_ns"] == s["start_ns"] for k, s in live.items())
    assert all(whole[k]["end_ns"] == s["end_ns"] for k, s in live.items())
