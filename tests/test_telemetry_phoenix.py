"""Traces against a real backend: Arize Phoenix (the `phoenix` extra), started here on free
ports on 127.0.0.1 with its database in a temporary directory, fed by real `fsm-agent`
processes over OTLP/HTTP, and read back through its REST API
(`GET /v1/projects/<project>/spans/otlpv1`).

Each test sends to its own Phoenix project (`OTEL_RESOURCE_ATTRIBUTES=
openinference.project.name=…`). Phoenix ingests in the background: a test that checks
that something did NOT arrive first waits for a marker run sent after it (one queue, in
order). Skipped when Phoenix is not installed, unless FSM_AGENT_OTEL_BACKEND_TESTS=require
(CI), where that fails.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import model_server as ms
from tests.lab import LAB_ALLOW_ARG
from tests.model_server import ModelServer
from tests.trace_runs import LAB_ACTS, LAB_TOOLS, TASK, reply

pytestmark = [pytest.mark.otel_backend, pytest.mark.slow]

ROOT = Path(__file__).parent.parent
#: root, 7 transitions, 3 model calls, 2 tool calls (tests.trace_runs.LAB_ACTS)
LAB_SPANS = 13
STARTUP_S = 180.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _phoenix_program() -> Path:
    program = Path(sys.executable).parent / "phoenix"
    if program.exists():
        return program
    why = "Arize Phoenix is not installed: pip install -e '.[phoenix]'"
    if os.environ.get("FSM_AGENT_OTEL_BACKEND_TESTS") == "require":
        pytest.fail(f"{why} (FSM_AGENT_OTEL_BACKEND_TESTS=require)")
    pytest.skip(why)


#: The OTLP/gRPC endpoint of the running Phoenix (set by the `phoenix` fixture).
GRPC: dict[str, str] = {}
#: When the `phoenix` fixture gave Phoenix the test model's prices (time.monotonic()).
PRICED: dict[str, float] = {}
#: Phoenix prices a model call itself, from its token counts and a model it knows by
#: `llm.model_name` (built in, or defined in Settings → Models): the test model's are these,
#: the run's `--price-in` / `--price-out`. It loads new models every 5 s (and looks 10 s back).
PRICES = {"input": 1500.0, "output": 5000.0}
MODELS_LOADED_S = 11.0
#: LAB_ACTS at PRICES: (10·1500 + 1·5000 + 20·1500 + 2·5000 + 30·1500 + 3·5000) / 1e6 dollars.
LAB_COST = 0.12


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A running Phoenix; its base URL (OTLP/HTTP at /v1/traces, the REST API at /v1)."""
    program = _phoenix_program()
    home = tmp_path_factory.mktemp("phoenix")
    port, grpc_port = _free_port(), _free_port()
    GRPC["endpoint"] = f"http://127.0.0.1:{grpc_port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))}
    env |= {"PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port),
            "PHOENIX_GRPC_PORT": str(grpc_port), "PHOENIX_WORKING_DIR": str(home),
            "PHOENIX_TELEMETRY_ENABLED": "false"}  # fmt: skip
    log = (home / "phoenix.log").open("wb")
    server = subprocess.Popen([str(program), "serve"], cwd=home, env=env, stdout=log,
                              stderr=subprocess.STDOUT)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            assert server.poll() is None, (home / "phoenix.log").read_text(errors="replace")
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "Phoenix did not come up"
            time.sleep(0.5)
        _price_the_test_model(base)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(20)
        log.close()


def graphql(phoenix: str, query: str, **variables: Any) -> dict[str, Any]:
    got = httpx.post(f"{phoenix}/graphql", json={"query": query, "variables": variables},
                     timeout=30)  # fmt: skip
    got.raise_for_status()
    body: dict[str, Any] = got.json()
    assert not body.get("errors"), body["errors"]
    return body["data"]  # type: ignore[no-any-return]


def _price_the_test_model(phoenix: str) -> None:
    """What an operator does for a model Phoenix has no price for: define it."""
    costs = [{"tokenType": "input", "costPerMillionTokens": PRICES["input"], "kind": "PROMPT"},
             {"tokenType": "output", "costPerMillionTokens": PRICES["output"],
              "kind": "COMPLETION"}]  # fmt: skip
    graphql(phoenix, "mutation($input: CreateModelMutationInput!) {"
            " createModel(input: $input) { model { id } } }",
            input={"name": "test-model", "namePattern": "^test-model", "costs": costs})  # fmt: skip
    PRICED["at"] = time.monotonic()


@pytest.fixture(scope="module")
def model() -> Iterator[ModelServer]:
    with ms.model_server() as s:
        yield s


def project() -> str:
    return f"fsm-{uuid.uuid4().hex[:10]}"


def fsm_agent(*args: str, phoenix: str | None = None, project_name: str = "x",
              **env: str) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """A real `fsm-agent` process; spans (if any) go to `phoenix`, into `project_name`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FSM_AGENT_OTEL"))}
    if phoenix is not None:
        base["OTEL_EXPORTER_OTLP_ENDPOINT"] = phoenix
        base["OTEL_RESOURCE_ATTRIBUTES"] = f"openinference.project.name={project_name}"
    child = subprocess.run([sys.executable, "-m", "fsm_agent", *args], cwd=ROOT,
                           env=base | env, capture_output=True, text=True,
                           timeout=300)  # fmt: skip
    assert child.returncode in (0, 1, 4), child.stderr  # 4: a run handed off
    return child


def lab_run(tmp_path: Path, model: ModelServer, *extra: str, phoenix: str | None = None,
            project_name: str = "x", acts: tuple[ms.Act, ...] = LAB_ACTS) -> None:  # fmt: skip
    """One lab run (3 model calls, 2 tool calls) by `fsm-agent run` on the test server."""
    model.play(*acts)
    n = len(list(tmp_path.glob("r*.json")))
    fsm_agent("run", "agent_loop", "--task", TASK, "--model", "openai:test-model",
              "--base-url", model.base_url, "--tools", LAB_TOOLS, "--allow", LAB_ALLOW_ARG,
              "--db", str(tmp_path / "j.db"), "--record", str(tmp_path / f"r{n}.json"), "--quiet",
              *extra, phoenix=phoenix, project_name=project_name)  # fmt: skip


def spans(phoenix: str, project_name: str) -> list[dict[str, Any]]:
    """Every span Phoenix holds in the project ([] while it does not exist)."""
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 1000} | ({"cursor": cursor} if cursor else {})
        got = httpx.get(f"{phoenix}/v1/projects/{project_name}/spans/otlpv1", params=params,
                        timeout=30)  # fmt: skip
        if got.status_code == 404:
            return []
        got.raise_for_status()
        body = got.json()
        found += [_flat(s) for s in body["data"]]
        cursor = body.get("next_cursor")
        if not cursor:
            return found


def _flat(span: dict[str, Any]) -> dict[str, Any]:
    """A span as Phoenix returns it (OTLP JSON), its attributes as a plain dict."""

    def value(v: dict[str, Any]) -> Any:
        if v.get("array_value") is not None:
            return [value(x) for x in v["array_value"]["values"]]
        return next((x for k, x in v.items() if x is not None), None)

    attributes = {a["key"]: value(a["value"]) for a in span.get("attributes") or []}
    return span | {"attributes": attributes}


def wait_for(phoenix: str, project_name: str, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 60
    while True:
        found = spans(phoenix, project_name)
        if len(found) >= count:
            return found
        assert time.monotonic() < deadline, f"{len(found)} of {count} spans arrived"
        time.sleep(0.5)


def settled(phoenix: str, tmp_path: Path, model: ModelServer) -> None:
    """Wait until Phoenix has ingested everything sent before now: a marker run, sent
    after it, has arrived."""
    marker = project()
    (tmp_path / "marker").mkdir(exist_ok=True)
    lab_run(tmp_path / "marker", model, "--otel", phoenix=phoenix, project_name=marker)
    wait_for(phoenix, marker, LAB_SPANS)


def test_a_live_run_arrives_whole_with_the_conventions_attributes(
    phoenix: str, model: ModelServer, tmp_path: Path
) -> None:
    name = project()
    lab_run(tmp_path, model, "--otel", phoenix=phoenix, project_name=name)
    found = wait_for(phoenix, name, LAB_SPANS)
    assert len(found) == LAB_SPANS
    assert len({s["trace_id"] for s in found}) == 1
    roots = [s for s in found if not s.get("parent_span_id")]
    assert [r["name"] for r in roots] == ["invoke_agent agent_loop"]
    root = roots[0]["attributes"]
    assert root["gen_ai.operation.name"] == "invoke_agent"
    assert root["fsm_agent.halt.reason"] == "completed"
    assert root["fsm_agent.terminal_state"] == "done"
    assert root["gen_ai.usage.input_tokens"] == 60
    chats = [s for s in found if s["name"] == "chat test-model"]
    assert len(chats) == 3
    first = min(chats, key=lambda s: int(s["start_time_unix_nano"]))["attributes"]
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.provider.name"] == "openai"
    assert first["gen_ai.request.model"] == "test-model"
    assert first["gen_ai.response.model"] == "test-model-2026-01"
    assert first["gen_ai.usage.input_tokens"] == 10
    assert first["gen_ai.usage.output_tokens"] == 1
    assert first["gen_ai.response.finish_reasons"] == ["tool_calls"]
    tools = [s for s in found if s["name"] == "execute_tool lookup"]
    assert len(tools) == 2
    assert all(t["attributes"]["gen_ai.tool.name"] == "lookup" for t in tools)
    assert all("gen_ai.input.messages" not in s["attributes"] for s in found)  # no opt-in
    # Exported again from the journal: Phoenix keeps one copy of each span.
    fsm_agent("export-traces", "--all", "--db", str(tmp_path / "j.db"), phoenix=phoenix,
              project_name=name)  # fmt: skip
    settled(phoenix, tmp_path, model)
    again = spans(phoenix, name)
    assert sorted(s["span_id"] for s in again) == sorted(s["span_id"] for s in found)


def test_runs_journaled_without_tracing_are_exported_once_each(
    phoenix: str, model: ModelServer, tmp_path: Path
) -> None:
    for _ in range(2):
        lab_run(tmp_path, model)  # no --otel: nothing sent while they ran
    name = project()
    db = str(tmp_path / "j.db")
    sent = fsm_agent("export-traces", "--all", "--db", db, "--json", phoenix=phoenix,
                     project_name=name)  # fmt: skip
    summary = json.loads(sent.stdout)
    assert summary["sent_spans"] == 2 * LAB_SPANS
    assert "run 2/2" in sent.stderr
    found = wait_for(phoenix, name, 2 * LAB_SPANS)
    assert len({s["trace_id"] for s in found}) == 2
    assert len([s for s in found if not s.get("parent_span_id")]) == 2
    fsm_agent("export-traces", "--all", "--db", db, phoenix=phoenix, project_name=name)
    settled(phoenix, tmp_path, model)
    assert len(spans(phoenix, name)) == 2 * LAB_SPANS  # no duplicates


def test_nothing_arrives_when_tracing_is_not_asked_for(
    phoenix: str, model: ModelServer, tmp_path: Path
) -> None:
    name = project()
    lab_run(tmp_path, model, phoenix=phoenix, project_name=name)  # endpoint set, no --otel
    settled(phoenix, tmp_path, model)
    assert spans(phoenix, name) == []


def test_the_grpc_protocol_sends_the_same_trace(
    phoenix: str, model: ModelServer, tmp_path: Path
) -> None:
    """OTEL_EXPORTER_OTLP_PROTOCOL=grpc, to Phoenix's OTLP/gRPC port (the grpc exporter
    comes with the phoenix extra)."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
    lab_run(tmp_path, model)
    name = project()
    fsm_agent("export-traces", "@latest", "--db", str(tmp_path / "j.db"), phoenix=phoenix,
              project_name=name, OTEL_EXPORTER_OTLP_ENDPOINT=GRPC["endpoint"],
              OTEL_EXPORTER_OTLP_PROTOCOL="grpc")  # fmt: skip
    found = wait_for(phoenix, name, LAB_SPANS)
    assert len(found) == LAB_SPANS
    assert len([s for s in found if s["name"] == "chat test-model"]) == 3


#: What Phoenix shows of a trace: its cost, and its root span's status, input, output and
#: token counts (its own and its descendants').
TRACE = """query($project: String!, $trace: ID!) { getProjectByName(name: $project) {
  trace(traceId: $trace) {
    costSummary { prompt { cost tokens } completion { cost tokens } total { cost tokens } }
    rootSpan { statusCode statusMessage input { value mimeType } output { value mimeType }
      cumulativeTokenCountPrompt cumulativeTokenCountCompletion cumulativeTokenCountTotal } } } }"""


def phoenix_trace(phoenix: str, project_name: str, trace_id: str) -> dict[str, Any]:
    """The trace as Phoenix's own GraphQL API (the one its UI reads) gives it."""
    data = graphql(phoenix, TRACE, project=project_name, trace=trace_id)
    trace: dict[str, Any] = data["getProjectByName"]["trace"]
    return trace


def test_phoenix_shows_the_runs_input_output_tokens_and_cost(
    phoenix: str, model: ModelServer, tmp_path: Path
) -> None:
    # Issue 27: Phoenix showed no input and a total cost of $0 for a run that cost $0.12.
    time.sleep(max(0.0, PRICED["at"] + MODELS_LOADED_S - time.monotonic()))
    name = project()
    prices = ("--price-in", str(PRICES["input"]), "--price-out", str(PRICES["output"]),
              "--worst-case-cost", "1")  # fmt: skip
    lab_run(tmp_path, model, "--otel", "--otel-content", *prices, phoenix=phoenix,
            project_name=name)  # fmt: skip
    record = json.loads((tmp_path / "r0.json").read_text(encoding="utf-8"))
    assert record["meters"]["cost"] == pytest.approx(LAB_COST)
    found = wait_for(phoenix, name, LAB_SPANS)
    root = next(s for s in found if not s.get("parent_span_id"))
    trace = phoenix_trace(phoenix, name, root["trace_id"])
    span = trace["rootSpan"]
    assert span["input"] == {"value": TASK, "mimeType": "text"}
    assert span["output"] == {"value": "swordfish", "mimeType": "text"}
    assert span["statusCode"] == "OK"
    assert (span["cumulativeTokenCountPrompt"], span["cumulativeTokenCountCompletion"],
            span["cumulativeTokenCountTotal"]) == (60, 6, 66)  # fmt: skip
    cost = trace["costSummary"]
    assert cost["total"]["cost"] == pytest.approx(record["meters"]["cost"])
    assert cost["prompt"] == {"cost": pytest.approx(0.09), "tokens": 60}
    assert cost["completion"] == {"cost": pytest.approx(0.03), "tokens": 6}
    chat = next(s for s in found if s["name"] == "chat test-model")["attributes"]
    assert chat["openinference.span.kind"] == "LLM"
    assert chat["input.value"] == chat["gen_ai.input.messages"]


def test_phoenix_shows_a_handoff_as_no_error_and_no_content_without_opt_in(
    phoenix: str, model: ModelServer, tmp_path: Path
) -> None:
    # Issue 27: a handoff the policy asked for was marked ERROR.
    name = project()
    handoff = reply({"content": json.dumps({"handoff": {"why": "need the vault key"}})}, 2)
    lab_run(tmp_path, model, "--otel", phoenix=phoenix, project_name=name,
            acts=(LAB_ACTS[0], handoff))  # fmt: skip
    found = wait_for(phoenix, name, 8)  # root, 4 transitions, 2 model calls, 1 tool call
    root = next(s for s in found if not s.get("parent_span_id"))
    assert root["attributes"]["fsm_agent.halt.reason"] == "handoff_requested"
    span = phoenix_trace(phoenix, name, root["trace_id"])["rootSpan"]
    assert span["statusCode"] == "UNSET"
    assert (span["input"], span["output"]) == (None, None)  # the task is content: opt-in only
