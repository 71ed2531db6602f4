"""The OpenAI-compatible model lane against a real HTTP server on 127.0.0.1 (no mocks).

Every fault fails closed with its named outcome and its raw body in the journal; receipts,
not the model, end a run as done; costs add up; the API key never leaves the request.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner

from fsm_agent import HaltRecord, Lane, load_machine, load_model, load_tools, run
from fsm_agent.adapters.models import ModelAdapter, Prompt, describe_tools
from fsm_agent.adapters.openai import FAULTS, Endpoint, OpenAIChatModel
from fsm_agent.adapters.openai_wire import retry_after_s
from fsm_agent.cli.main import cli
from fsm_agent.errors import AdapterError
from fsm_agent.journal.store import Facts
from fsm_agent.stores.sqlite import SqliteStore
from fsm_agent.testing import assert_replays
from tests import model_server as ms
from tests.model_server import Act, ModelServer, answer, completion, text, tool_call

HIT = {"q": "lab password"}  # the lab's lookup returns a receipted fact for this query
MISS = {"q": "passwords"}  # "refine your query": an observation with no receipts
USAGE = {"prompt_tokens": 1000, "completion_tokens": 100}
KEY = "sk-test-4f1d2c9a7b3e8d6f0a5c"


#: Parsed once: parsing the YAML declaration is most of what a short run costs here.
AGENT_LOOP = load_machine("agent_loop")


def lab_run(tmp_path: Path, model: ModelAdapter, **options: Any) -> HaltRecord:
    """The halt lab's task on agent_loop (or `machine`) with the lab's tools."""
    return run(
        options.pop("machine", AGENT_LOOP),
        task="Find the lab password",
        model=model,
        tools=load_tools("fsm_agent.examples.halt_lab.tools"),
        allow=options.pop("allow", ("lookup", "slow_lookup", "hang")),
        store=tmp_path / "j.db",
        record_path=tmp_path / "r.json",
        **options,
    )


def openai_model(server: ModelServer, **endpoint: Any) -> OpenAIChatModel:
    return OpenAIChatModel("test-model", Endpoint(base_url=server.base_url, **endpoint))


def model_facts(db: Path, run_id: str) -> list[Facts]:
    """The facts of every model call of a run, from the journal."""
    store = SqliteStore(db)
    try:
        events = store.events(run_id)
    finally:
        store.close()
    return [e.facts for e in events if e.facts is not None and e.facts.action == "model"]


# --- every fault has a named outcome ----------------------------------------------------------

TRUNCATED = b'{"choices": [{"message": {"content": "{\\"answer\\": \\"swordfish\\", \\"done\\": tr'


@attrs.frozen
class Fault:
    act: Act
    kind: str
    halt: str
    raw: str | None  # a piece of the raw body the journal keeps (None: no body arrived)
    endpoint: dict[str, Any] = attrs.field(factory=dict)


FAULT_CASES = {
    "truncated_json": Fault(Act(body=TRUNCATED), "invalid_json", "schema_fail", '"done\\": tr'),
    "json_not_an_object": Fault(Act(body=b"[1, 2]"), "invalid_json", "schema_fail", "[1, 2]"),
    "http_500": Fault(
        Act(status=500, body={"error": {"message": "overloaded"}}),
        "http_error",
        "empty_response",
        "overloaded",
    ),
    "http_401": Fault(
        Act(status=401, body={"error": {"message": "no such key"}}),
        "http_error",
        "empty_response",
        "no such key",
    ),
    "http_429": Fault(
        Act(status=429, body={"error": {"message": "slow down"}}, headers=(("Retry-After", "7"),)),
        "rate_limited",
        "empty_response",
        "slow down",
    ),
    "timeout": Fault(
        Act(delay_s=0.5, body=completion({"content": "late"})),
        "timeout",
        "empty_response",
        None,
        {"read_timeout_s": 0.1},
    ),
    "connection_reset": Fault(Act(reset=True), "connection_reset", "empty_response", None),
    "no_choices": Fault(
        Act(body={"choices": [], "usage": USAGE}), "no_choices", "empty_response", '"choices": []'
    ),
    "choice_without_message": Fault(
        Act(body={"choices": [{"index": 0}]}), "no_choices", "empty_response", '"index": 0'
    ),
    "arguments_not_json": Fault(
        tool_call("lookup", '{"q": "lab pass'), "bad_tool_arguments", "schema_fail", "lab pass"
    ),
    "arguments_not_an_object": Fault(
        tool_call("lookup", '["lab password"]'), "bad_tool_arguments", "schema_fail", "lookup"
    ),
    "tool_call_without_name": Fault(
        Act(body=completion({"tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]})),
        "bad_tool_call",
        "schema_fail",
        '"id": "c"',
    ),
    "two_tool_calls": Fault(
        Act(
            body=completion(
                {
                    "tool_calls": [
                        {"id": "a", "function": {"name": "lookup", "arguments": "{}"}},
                        {"id": "b", "function": {"name": "hang", "arguments": "{}"}},
                    ]
                }
            )
        ),
        "several_tool_calls",
        "schema_fail",
        '"hang"',
    ),
    "body_too_large": Fault(
        text("x" * 5000), "body_too_large", "schema_fail", '"choices"', {"max_body_bytes": 1024}
    ),
}


def test_every_fault_kind_has_a_case() -> None:
    assert {case.kind for case in FAULT_CASES.values()} | {"connect_failed"} == set(FAULTS)


@pytest.mark.parametrize("name", sorted(FAULT_CASES))
def test_each_fault_fails_closed_with_its_named_outcome(
    name: str, server: ModelServer, tmp_path: Path
) -> None:
    case = FAULT_CASES[name]
    server.play(case.act)
    model = openai_model(server, **case.endpoint)
    record = lab_run(tmp_path, model, budgets={"max_retries": 0})
    assert record.halt_reason.value == case.halt
    assert record.meters.tool_calls == 0  # nothing ran on a broken reply
    assert f"model call failed: {case.kind}: " in str(record.error)
    [facts] = model_facts(tmp_path / "j.db", record.run_id)
    assert str(facts.error).startswith(f"model call failed: {case.kind}: ")
    if case.raw is None:
        assert facts.reply is None
    else:
        assert case.raw in str(facts.reply)
        assert len(str(facts.reply)) < 2100  # truncated for the journal
    assert_replays(tmp_path / "j.db", record.run_id)


def test_a_server_that_is_not_there_is_connect_failed(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = OpenAIChatModel("m", Endpoint(base_url=f"http://127.0.0.1:{port}/v1"))
    record = lab_run(tmp_path, model, budgets={"max_retries": 0})
    assert record.halt_reason.value == "empty_response"
    assert "model call failed: connect_failed: " in str(record.error)


def test_a_hanging_server_halts_on_the_wall_clock(server: ModelServer, tmp_path: Path) -> None:
    server.play(Act(delay_s=3.0, body=completion({"content": "late"})))
    started = time.monotonic()
    record = lab_run(tmp_path, openai_model(server), budgets={"wall_clock_ms": 200})
    assert record.halt_reason.value == "wall_clock"
    assert record.answer == "cannot: time budget"
    assert time.monotonic() - started < 1.5


def test_a_tool_off_the_allow_list_is_refused_before_anything_runs(
    server: ModelServer, tmp_path: Path
) -> None:
    machine = tmp_path / "lookup_only.yaml"
    declared = (Path(__file__).parent.parent / "machines" / "agent_loop.yaml").read_text()
    machine.write_text(declared.replace("thrash_limit: 0", "tools: [lookup]\nthrash_limit: 0"))
    server.play(tool_call("hang", {"seconds": 30}))
    # the operator grants the one tool the machine lists; the model proposes another
    record = lab_run(tmp_path, openai_model(server), machine=str(machine), allow=("lookup",))
    assert record.halt_reason.value == "tool_refused"
    assert record.meters.tool_calls == 0
    advertised = [t["function"]["name"] for t in server.requests[0]["body"]["tools"]]
    assert advertised == ["lookup"]


# --- a conversation ends done only on receipts -------------------------------------------------


def test_two_tool_calls_and_an_answer_reach_done_on_receipts(
    server: ModelServer, tmp_path: Path
) -> None:
    server.play(tool_call("lookup", MISS), tool_call("lookup", HIT), answer("swordfish"))
    record = lab_run(tmp_path, openai_model(server))
    assert (record.halt_reason.value, record.answer) == ("completed", "swordfish")
    assert (record.steps_used, record.meters.tool_calls) == (3, 2)
    assert [c.args for c in record.tool_calls] == [MISS, HIT]
    assert_replays(tmp_path / "j.db", record.run_id)

    last = server.requests[-1]["body"]
    system, task, *turns = last["messages"]
    assert system["role"] == "system"
    assert "step 3 of 8 (5 more model call(s)" in system["content"]
    assert '{"answer": "<answer>"}' in system["content"]
    assert task == {"role": "user", "content": "Task: Find the lab password"}
    roles = [
        (m["role"], m.get("tool_call_id") or m.get("tool_calls", [{}])[0].get("id")) for m in turns
    ]
    assert roles == [
        ("assistant", "call_0"),
        ("tool", "call_0"),
        ("assistant", "call_2"),
        ("tool", "call_2"),
    ]
    assert json.loads(turns[2]["tool_calls"][0]["function"]["arguments"]) == HIT
    assert json.loads(turns[3]["content"])["receipts_complete"] is True
    lookup = next(t["function"] for t in last["tools"] if t["function"]["name"] == "lookup")
    assert lookup["parameters"]["properties"] == {"q": {"type": "string", "default": ""}}
    assert lookup["description"].startswith("Look a fact up.")
    assert last["parallel_tool_calls"] is False


def test_an_answer_without_receipts_is_never_done(server: ModelServer, tmp_path: Path) -> None:
    confident = text(json.dumps({"answer": "swordfish", "done": True}))
    server.play(tool_call("lookup", MISS), confident, text("I am done. The password is swordfish."))
    record = lab_run(tmp_path, openai_model(server), budgets={"max_retries": 1})
    assert record.halt_reason.value == "schema_fail"
    assert record.answer is None
    assert record.steps_used == 3


# --- costs --------------------------------------------------------------------------------------

PRICED = {"price_in": 2.0, "price_out": 8.0, "worst_case_cost": 0.05}


def test_costs_add_up_from_usage_at_the_configured_prices(
    server: ModelServer, tmp_path: Path
) -> None:
    server.play(
        tool_call("lookup", MISS, usage=USAGE),  # (1000 * 2 + 100 * 8) / 1e6 = 0.0028
        tool_call("lookup", HIT, usage={"prompt_tokens": 1500, "completion_tokens": 50}),  # 0.0034
        answer("swordfish"),  # no usage: the worst case, 0.05
    )
    record = lab_run(tmp_path, openai_model(server, **PRICED))
    assert record.halt_reason.value == "completed"
    costs = [f.reply_cost for f in model_facts(tmp_path / "j.db", record.run_id)]
    assert costs == pytest.approx([0.0028, 0.0034, 0.05])
    assert record.meters.cost == pytest.approx(0.0562)


@pytest.mark.parametrize(
    ("act", "cost"),
    [
        (Act(status=503, body={"error": {"message": "down"}}), 0.0),  # refused: not served
        (Act(body=TRUNCATED), 0.05),  # served, usage unreadable: the worst case
        (Act(body={"choices": [], "usage": USAGE}), 0.0028),  # served, usage reported
        (Act(reset=True), 0.05),  # sent, outcome unknown: the worst case
    ],
    ids=["http_error", "invalid_json", "no_choices", "connection_reset"],
)
def test_a_failed_call_costs_what_the_server_may_have_charged(
    act: Act, cost: float, server: ModelServer, tmp_path: Path
) -> None:
    server.play(act)
    record = lab_run(tmp_path, openai_model(server, **PRICED), budgets={"max_retries": 0})
    assert record.meters.cost == pytest.approx(cost)


def test_without_prices_every_call_is_free(server: ModelServer, tmp_path: Path) -> None:
    server.play(tool_call("lookup", HIT, usage=USAGE), answer("swordfish", usage=USAGE))
    record = lab_run(tmp_path, openai_model(server, tier="local"))
    assert (record.halt_reason.value, record.meters.cost) == ("completed", 0.0)


def test_the_cost_cap_halts_on_reported_costs(server: ModelServer, tmp_path: Path) -> None:
    server.play(*[tool_call("lookup", MISS) for _ in range(4)])  # no usage: 0.05 each
    record = lab_run(tmp_path, openai_model(server, **PRICED), budgets={"max_cost": 0.12})
    assert record.halt_reason.value == "cost_cap"
    assert record.meters.cost == pytest.approx(0.15)
    assert record.answer == "cannot: money budget"


# --- 429: waited out by the next call, which counts as a step -----------------------------------


def test_a_429_is_waited_out_by_the_retry_which_counts_a_step(
    server: ModelServer, tmp_path: Path
) -> None:
    limited = Act(
        status=429, body={"error": {"message": "slow down"}}, headers=(("Retry-After", "0.2"),)
    )
    server.play(limited, tool_call("lookup", HIT), answer("swordfish"))
    record = lab_run(tmp_path, openai_model(server))
    assert record.halt_reason.value == "completed"
    assert (record.steps_used, record.meters.retries_used) == (3, 1)
    first, second = server.requests[0]["at"], server.requests[1]["at"]
    assert second - first >= 0.2


def test_a_retry_after_past_the_wall_clock_is_not_waited(
    server: ModelServer, tmp_path: Path
) -> None:
    server.play(Act(status=429, body={}, headers=(("Retry-After", "30"),)))
    started = time.monotonic()
    record = lab_run(tmp_path, openai_model(server), budgets={"wall_clock_ms": 5000})
    assert time.monotonic() - started < 1.0
    assert record.halt_reason.value == "empty_response"
    assert (record.steps_used, record.meters.retries_used) == (3, 2)  # each re-ask is a step
    assert len(server.requests) == 1  # the re-asks were not sent into the window
    errors = [f.error or "" for f in model_facts(tmp_path / "j.db", record.run_id)]
    assert "Retry-After 30 s" in errors[0]
    assert all("past the run's wall clock: not sent" in e for e in errors[1:])


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("7", 7.0), ("0.5", 0.5), ("-3", 0.0), ("soon", None), (None, None), ("", None)],
)
def test_retry_after_values(header: str | None, seconds: float | None) -> None:
    assert retry_after_s(header) == seconds


def test_retry_after_as_an_http_date() -> None:
    when = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 60))
    seconds = retry_after_s(when)
    assert seconds is not None
    assert 50 < seconds <= 60


# --- the key stays secret -----------------------------------------------------------------------


def test_the_api_key_never_reaches_the_journal_the_record_or_the_logs(
    server: ModelServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FSM_TEST_MODEL_KEY", KEY)
    caplog.set_level(logging.DEBUG)
    # The server echoes the Authorization header into a 401 body, as some gateways do.
    server.play(Act(status=401, echo_auth=True), tool_call("lookup", HIT), answer("swordfish"))
    db, record_path = tmp_path / "j.db", tmp_path / "record.json"
    args = [
        "run", "agent_loop", "--task", "Find the lab password", "--model", "openai:test-model",
        "--base-url", server.base_url, "--api-key-env", "FSM_TEST_MODEL_KEY",
        "--lane-tier", "paid", "--price-in", "2", "--price-out", "8", "--worst-case-cost",
        "0.01", "--tools", "fsm_agent.examples.halt_lab.tools",
        "--allow", "lookup,slow_lookup,hang",
        "--db", str(db), "--record",
        str(record_path),
    ]  # fmt: skip
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert [r["headers"]["Authorization"] for r in server.requests] == [f"Bearer {KEY}"] * 3
    run_id = json.loads(record_path.read_text())["run_id"]
    shown = CliRunner().invoke(cli, ["show", run_id, "--db", str(db), "--json"])
    journal = b"".join(p.read_bytes() for p in tmp_path.glob("j.db*"))
    assert b"[redacted:FSM_TEST_MODEL_KEY]" in journal  # the echoed header, redacted
    captured = capfd.readouterr()
    for where, content in {
        "journal": journal,
        "record": record_path.read_bytes(),
        "run output": (result.output + result.stderr).encode(),
        "show --json": shown.output.encode(),
        "logs": caplog.text.encode(),
        "stdio": (captured.out + captured.err).encode(),
    }.items():
        assert KEY.encode() not in content, f"the API key leaked into the {where}"
        assert KEY[8:].encode() not in content, f"part of the API key leaked into the {where}"


def test_the_key_is_not_in_the_adapters_repr(
    server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FSM_TEST_MODEL_KEY", KEY)
    model = openai_model(server, api_key_env="FSM_TEST_MODEL_KEY")
    assert KEY not in repr(model)
    assert KEY not in str(model.endpoint)


# --- configuration ------------------------------------------------------------------------------


def cli_run(tmp_path: Path, *extra: str) -> Any:
    args = ["run", "agent_loop", "--task", "t", "--db", str(tmp_path / "j.db"), *extra]
    return CliRunner().invoke(cli, args, catch_exceptions=False)


BASE = ["--model", "openai:m", "--base-url", "http://h/v1"]
PRICES = ["--price-in", "1", "--price-out", "2"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--model", "scripted:x.json", "--base-url", "http://h/v1"],
            "--base-url: only for an openai:MODEL model",
        ),
        (["--model", "openai:m"], "openai:m: --base-url is required"),
        (["--model", "openai:m", "--base-url", "ftp://h"], "the base URL must be http(s)://"),
        (["--model", "openai:two words", "--base-url", "http://h/v1"], "without spaces"),
        ([*BASE, *PRICES], "a worst-case cost per call"),
        ([*BASE, "--price-in", "1"], "both prices"),
        ([*BASE, *PRICES, "--worst-case-cost", "0"], "a worst-case cost per call (> 0)"),
        ([*BASE, "--worst-case-cost", "1"], "only with prices"),
        (
            [*BASE, "--api-key-env", "FSM_TEST_UNSET_KEY"],
            "environment variable FSM_TEST_UNSET_KEY (the API key) is not set",
        ),
        (
            [*BASE, "--api-key-env", "sk-live-0123456789"],
            "the NAME of an environment variable, not a key",
        ),
        (
            [*BASE, "--api-key-env", "FSM_TEST_BAD_KEY"],
            "the API key in FSM_TEST_BAD_KEY is not one printable ASCII word",
        ),
    ],
)
def test_a_bad_model_configuration_is_invalid_input(
    extra: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FSM_TEST_UNSET_KEY", raising=False)
    monkeypatch.setenv("FSM_TEST_BAD_KEY", "sk-live-0123456789 pasted twice sk-live-0123456789")
    result = cli_run(tmp_path, *extra)
    assert result.exit_code == 2
    assert message in result.output
    assert "sk-live-0123456789" not in result.output  # a key pasted as a name is not echoed


def test_an_endpoint_is_only_for_openai_models() -> None:
    with pytest.raises(AdapterError, match="only to an openai:MODEL model"):
        load_model("python:tests.model_server:python_model", endpoint=Endpoint("http://h/v1"))
    with pytest.raises(AdapterError, match="needs an endpoint"):
        load_model("openai:m")


def test_the_lane_comes_from_the_configuration(server: ModelServer) -> None:
    assert openai_model(server).lane == Lane("http", "free")  # config silence: most restricted
    assert openai_model(server, tier="paid").lane == Lane("http", "paid")


def test_a_frozen_routing_never_calls_an_http_lane(server: ModelServer, tmp_path: Path) -> None:
    db = tmp_path / "j.db"
    result = CliRunner().invoke(
        cli, ["freeze-routing", "--why", "provider incident", "--db", str(db)]
    )
    assert result.exit_code == 0, result.output
    record = lab_run(tmp_path, openai_model(server, tier="local"))
    assert record.halt_reason.value == "routing_frozen"
    assert server.requests == []


# --- the adapter contract: openai:MODEL and python:module:callable alike ------------------------


@attrs.frozen
class Kind:
    model: ModelAdapter
    play: Callable[..., None]
    prompts: Callable[[], list[dict[str, Any]]]  # what the model was shown: system text, tools


@pytest.fixture(params=["openai", "python"])
def adapter(request: pytest.FixtureRequest, server: ModelServer) -> Iterator[Kind]:
    if request.param == "openai":
        endpoint = Endpoint(
            server.base_url, price_in=ms.PRICE_IN, price_out=ms.PRICE_OUT, worst_case_cost=0.01
        )

        def openai_prompts() -> list[dict[str, Any]]:
            return [
                {
                    "system": r["body"]["messages"][0]["content"],
                    "tools": [t["function"]["name"] for t in r["body"].get("tools", [])],
                }
                for r in server.requests
            ]

        model = load_model("openai:test-model", endpoint=endpoint)
        yield Kind(model, server.play, openai_prompts)
        return

    def python_prompts() -> list[dict[str, Any]]:
        return [
            {"system": f"{p.courtesy} ({p.budget_left})", "tools": [s.name for s in p.tool_specs]}
            for p in ms.SEEN
        ]

    ms.PLAN.clear()
    ms.SEEN.clear()

    def play(*acts: Act) -> None:
        ms.PLAN.extend(acts)

    yield Kind(load_model("python:tests.model_server:python_model"), play, python_prompts)
    ms.PLAN.clear()
    ms.SEEN.clear()


def test_contract_receipts_end_the_run_and_costs_add_up(adapter: Kind, tmp_path: Path) -> None:
    adapter.play(tool_call("lookup", HIT, usage=USAGE), answer("swordfish", usage=USAGE))
    record = lab_run(tmp_path, adapter.model)
    assert (record.halt_reason.value, record.answer, record.steps_used) == (
        "completed",
        "swordfish",
        2,
    )
    assert record.meters.cost == pytest.approx(2 * 0.0028)
    shown = adapter.prompts()
    assert [("step 1 of 8" in p["system"], "step 2 of 8" in p["system"]) for p in shown] == [
        (True, False),
        (False, True),
    ]
    assert all(p["tools"] == ["lookup", "slow_lookup", "hang"] for p in shown)


def test_contract_a_done_flag_or_prose_is_not_a_vote(adapter: Kind, tmp_path: Path) -> None:
    adapter.play(text(json.dumps({"answer": "swordfish", "done": True})), text("All done!"))
    record = lab_run(tmp_path, adapter.model, budgets={"max_retries": 1})
    assert record.halt_reason.value == "schema_fail"
    assert record.answer is None


def test_contract_a_failed_call_is_a_journaled_rejection(adapter: Kind, tmp_path: Path) -> None:
    adapter.play(Act(status=503, body={"error": {"message": "overloaded"}}))
    record = lab_run(tmp_path, adapter.model, budgets={"max_retries": 0})
    assert record.halt_reason.value == "empty_response"
    [facts] = model_facts(tmp_path / "j.db", record.run_id)
    assert str(facts.error).startswith("model call failed: http_error: ")
    assert "overloaded" in str(facts.reply)


def test_contract_bad_tool_arguments_are_a_schema_fail(adapter: Kind, tmp_path: Path) -> None:
    adapter.play(tool_call("lookup", "{'q': 'lab password'}"))
    record = lab_run(tmp_path, adapter.model, budgets={"max_retries": 0})
    assert (record.halt_reason.value, record.meters.tool_calls) == ("schema_fail", 0)
    [facts] = model_facts(tmp_path / "j.db", record.run_id)
    assert "model call failed: bad_tool_arguments: " in str(facts.error)


def test_contract_an_unknown_tool_is_refused(adapter: Kind, tmp_path: Path) -> None:
    adapter.play(tool_call("rm_rf", {"path": "/"}))
    record = lab_run(tmp_path, adapter.model)
    assert (record.halt_reason.value, record.meters.tool_calls) == ("tool_refused", 0)


# --- the prompt ---------------------------------------------------------------------------------


def test_a_prompt_carries_the_budget_left() -> None:
    prompt = Prompt(task="t", step=3, max_steps=8, tools=("lookup",), time_left_s=11.24)
    assert prompt.courtesy == "step 3 of 8"
    assert prompt.budget_left == "5 more model call(s) after this one, 11.2 s of wall clock left"
    assert "step 3 of 8 (5 more model call(s)" in prompt.render()


def test_tool_specs_come_from_the_signature() -> None:
    tools = load_tools("fsm_agent.examples.halt_lab.tools")
    [slow] = describe_tools(tools, ["slow_lookup", "not_registered"])
    assert slow.parameters == {
        "type": "object",
        "properties": {
            "q": {"type": "string", "default": ""},
            "sleep_ms": {"type": "integer", "default": 3000},
        },
        "additionalProperties": False,
    }


def test_an_ollama_model_name_keeps_its_tag(server: ModelServer) -> None:
    model = load_model("openai:qwen2.5:7b", endpoint=Endpoint(server.base_url, tier="local"))
    assert isinstance(model, OpenAIChatModel)
    assert model.model == "qwen2.5:7b"


@pytest.mark.parametrize(
    ("message", "content"),
    [
        (  # some servers send the arguments as an object, not as its JSON text
            {"tool_calls": [{"id": "c", "function": {"name": "lookup", "arguments": HIT}}]},
            {"tool_call": {"name": "lookup", "args": HIT}},
        ),
        (  # a call with no arguments, sent as empty text
            {"tool_calls": [{"id": "c", "function": {"name": "hang", "arguments": ""}}]},
            {"tool_call": {"name": "hang", "args": {}}},
        ),
        (
            {"content": [{"type": "text", "text": '{"answer":'}, {"text": ' "x"}'}]},
            '{"answer": "x"}',
        ),
        ({"content": None, "refusal": "no"}, None),  # nothing to propose: empty_response
    ],
    ids=["object_arguments", "empty_arguments", "text_parts", "no_content"],
)
def test_what_the_parser_gets(message: dict[str, Any], content: Any, server: ModelServer) -> None:
    server.play(Act(body=completion(message)))
    reply = openai_model(server)(Prompt(task="t", step=1, max_steps=2, tools=("lookup",)))
    assert reply.content == content
