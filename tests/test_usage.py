"""Usage is journaled per call: each model call's tokens, the model asked and the model that
answered, the finish reason and the latency; each tool call's latency and outcome. `show`,
the report and `stats` surface them, and journals written before usage was kept still
open, replay and verify.

The OpenAI-compatible lane is tested against a real HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fsm_agent import ModelReply, Prompt
from fsm_agent.adapters.openai import Endpoint, OpenAIChatModel
from fsm_agent.cli.main import cli
from fsm_agent.journal.chain import verify_run
from fsm_agent.journal.store import Facts
from fsm_agent.review.replay import replay_events
from fsm_agent.review.stats import halt_stats
from fsm_agent.review.usage import run_usage
from fsm_agent.runtime.usage import MAX_NAME_CHARS, ModelUsage, total
from fsm_agent.stores.sqlite import SqliteStore
from tests.lab import LOOKUP, MISS, lab_run
from tests.model_server import Act, ModelServer

PRE_USAGE = Path(__file__).parent / "recorded_pre_usage" / "journal.db"
HIT = {"q": "lab password"}


def model(server: ModelServer, **endpoint: Any) -> OpenAIChatModel:
    return OpenAIChatModel("test-model", Endpoint(base_url=server.base_url, **endpoint))


def body(message: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A chat completion with one choice, and whatever top-level and choice fields given."""
    choice = {"index": 0, "message": {"role": "assistant", **message}}
    if "finish_reason" in fields:
        choice["finish_reason"] = fields.pop("finish_reason")
    return {"object": "chat.completion", "choices": [choice], **fields}


def answer_call(value: str) -> dict[str, Any]:
    return {"content": json.dumps({"answer": value})}


def lookup_call(args: dict[str, Any]) -> dict[str, Any]:
    function = {"name": "lookup", "arguments": json.dumps(args)}
    return {"content": None, "tool_calls": [{"id": "c1", "type": "function", "function": function}]}


def journal(db: Path, run_id: str) -> list[Any]:
    store = SqliteStore(db)
    try:
        return store.events(run_id)
    finally:
        store.close()


def model_facts(db: Path, run_id: str) -> list[Facts]:
    events = journal(db, run_id)
    return [e.facts for e in events if e.facts is not None and e.facts.action == "model"]


# --- the OpenAI-compatible lane -----------------------------------------------------------------


def test_each_model_call_journals_its_tokens_models_finish_reason_and_latency(
    server: ModelServer, tmp_path: Path
) -> None:
    usage = {"prompt_tokens": 1000, "completion_tokens": 100}
    server.play(
        Act(body=body(lookup_call(HIT), id="r-1", model="test-model-2026", usage=usage,
                      finish_reason="tool_calls")),
        Act(body=body(answer_call("swordfish"), id="r-2", model="test-model-2026",
                      finish_reason="stop"), delay_s=0.08),
    )  # fmt: skip
    record = lab_run(tmp_path, model(server))
    assert record.halt_reason.value == "completed"
    first, second = (f.usage for f in model_facts(tmp_path / "j.db", record.run_id))
    assert first is not None
    assert second is not None
    assert (first.input_tokens, first.output_tokens) == (1000, 100)
    assert (first.request_model, first.response_model) == ("test-model", "test-model-2026")
    assert (first.response_id, first.finish_reason, first.provider) == ("r-1", "tool_calls",
                                                                        "openai")  # fmt: skip
    # the second reply reported no usage: its counts are unknown, not zero
    assert (second.input_tokens, second.output_tokens) == (None, None)
    assert (second.response_id, second.finish_reason) == ("r-2", "stop")
    assert second.latency_ms >= 80  # the server waited 80 ms: the run measured it


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        ({"prompt_tokens": -1, "completion_tokens": 3}, (None, 3)),
        ({"prompt_tokens": True, "completion_tokens": "12"}, (None, None)),
        ({"prompt_tokens": 1.5, "completion_tokens": None}, (None, None)),
        ("lots", (None, None)),
        ({"prompt_tokens": 10**12, "completion_tokens": 0}, (10**12, 0)),
    ],
    ids=["negative", "bool-and-text", "float-and-null", "not-an-object", "huge-and-zero"],
)
def test_token_counts_a_server_sends_are_kept_only_when_they_are_counts(
    sent: Any, kept: tuple[int | None, int | None], server: ModelServer, tmp_path: Path
) -> None:
    server.play(Act(body=body(answer_call("x"), usage=sent, model=["not", "text"])))
    record = lab_run(tmp_path, model(server), budgets={"max_steps": 1})
    (facts,) = model_facts(tmp_path / "j.db", record.run_id)
    assert facts.usage is not None
    assert (facts.usage.input_tokens, facts.usage.output_tokens) == kept
    assert facts.usage.response_model is None  # a model "name" that is not text


def test_a_long_model_name_is_cut_and_an_echoed_key_is_redacted(
    server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-usage-test-3b9f0c1d2e4a"
    monkeypatch.setenv("FSM_USAGE_TEST_KEY", key)
    server.play(Act(body=body(answer_call("x"), model=f"gw/{key}", id="x" * 5000)))
    adapter = model(server, api_key_env="FSM_USAGE_TEST_KEY")
    record = lab_run(tmp_path, adapter, budgets={"max_steps": 1})
    (facts,) = model_facts(tmp_path / "j.db", record.run_id)
    assert facts.usage is not None
    assert facts.usage.response_model == "gw/[redacted:FSM_USAGE_TEST_KEY]"
    assert facts.usage.response_id == "x" * MAX_NAME_CHARS
    journal_bytes = b"".join(p.read_bytes() for p in tmp_path.glob("j.db*"))
    assert key.encode() not in journal_bytes


def test_a_failed_call_journals_what_it_used(server: ModelServer, tmp_path: Path) -> None:
    # A reply with no choice is a failure, but the server said what it counted.
    usage = {"prompt_tokens": 40, "completion_tokens": 0}
    server.play(Act(body={"choices": [], "usage": usage, "model": "m-1"}))
    record = lab_run(tmp_path, model(server), budgets={"max_steps": 1})
    (facts,) = model_facts(tmp_path / "j.db", record.run_id)
    assert facts.error is not None
    assert "no_choices" in facts.error
    assert facts.usage is not None
    assert (facts.usage.input_tokens, facts.usage.response_model) == (40, "m-1")


def test_a_call_that_never_reached_a_server_journals_its_model_and_latency(
    tmp_path: Path,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    adapter = OpenAIChatModel("m-down", Endpoint(base_url=f"http://127.0.0.1:{port}/v1"))
    record = lab_run(tmp_path, adapter, budgets={"max_steps": 1})
    (facts,) = model_facts(tmp_path / "j.db", record.run_id)
    assert facts.usage is not None
    assert facts.usage == ModelUsage(
        request_model="m-down", provider="openai", latency_ms=facts.usage.latency_ms
    )


# --- any adapter ---------------------------------------------------------------------------------


def test_the_runtime_measures_the_latency_whatever_the_adapter_reports(tmp_path: Path) -> None:
    def adapter(prompt: Prompt) -> ModelReply:
        time.sleep(0.03)
        reply = LOOKUP if prompt.step == 1 else {"answer": "swordfish"}
        usage = ModelUsage(input_tokens=5, output_tokens=2, latency_ms=10**9)
        return ModelReply(content=reply, usage=usage)

    record = lab_run(tmp_path, adapter)
    usages = [f.usage for f in model_facts(tmp_path / "j.db", record.run_id)]
    assert all(u is not None and 30 <= u.latency_ms < 10**9 for u in usages)
    assert all(u is not None and (u.input_tokens, u.output_tokens) == (5, 2) for u in usages)


def test_a_scripted_model_journals_latency_and_no_tokens(tmp_path: Path) -> None:
    record = lab_run(tmp_path, [MISS, LOOKUP, {"answer": "swordfish"}])
    usages = [f.usage for f in model_facts(tmp_path / "j.db", record.run_id)]
    assert len(usages) == 3
    assert all(u is not None and u.input_tokens is None and u.request_model is None
               for u in usages)  # fmt: skip


@pytest.mark.parametrize("bad", [-1, True, 1.0, "3"])
def test_usage_refuses_a_count_that_is_not_one(bad: Any) -> None:
    with pytest.raises(ValueError, match="input_tokens must be a whole number >= 0"):
        ModelUsage(input_tokens=bad)


def test_totals_count_only_the_calls_that_reported_tokens() -> None:
    t = total([ModelUsage(input_tokens=3, output_tokens=4, latency_ms=5), ModelUsage(latency_ms=7)])
    assert (t.calls, t.calls_with_tokens, t.tokens, t.latency_ms) == (2, 1, 7, 12)


# --- tool calls: latency and outcome --------------------------------------------------------------


def test_tool_calls_are_summed_per_tool_with_their_latency_and_outcomes(tmp_path: Path) -> None:
    slow = {"tool_call": {"name": "slow_lookup", "args": {"q": "nothing", "sleep_ms": 40}}}
    record = lab_run(tmp_path, [slow, MISS, LOOKUP, {"answer": "swordfish"}])
    assert record.halt_reason.value == "completed"
    usage = run_usage(journal(tmp_path / "j.db", record.run_id))
    by_name = {t.name: t for t in usage.tools}
    assert (by_name["lookup"].calls, by_name["lookup"].outcomes) == (2, {"returned": 2})
    assert by_name["slow_lookup"].max_ms >= 40
    assert usage.tools[0].name == "slow_lookup"  # slowest first
    assert usage.model_calls == 4


# --- show, report, stats --------------------------------------------------------------------------


def openai_runs(server: ModelServer, tmp_path: Path) -> tuple[Path, str]:
    """Two runs on the OpenAI lane into one journal: one completed (1,100 + 1,300 tokens),
    one at max_steps (50 tokens). Returns the journal and the completed run's id."""
    usage = {"prompt_tokens": 1000, "completion_tokens": 100}
    server.play(
        Act(body=body(lookup_call(HIT), model="m-2026", usage=usage, finish_reason="tool_calls")),
        Act(body=body(answer_call("swordfish"), model="m-2026",
                      usage={"prompt_tokens": 1200, "completion_tokens": 100})),
        Act(body=body(lookup_call({"q": "x"}),
                      usage={"prompt_tokens": 40, "completion_tokens": 10})),
    )  # fmt: skip
    done = lab_run(tmp_path, model(server, price_in=2.0, price_out=8.0, worst_case_cost=0.5))
    lab_run(tmp_path, model(server), budgets={"max_steps": 1})
    return tmp_path / "j.db", done.run_id


def test_show_prints_each_calls_usage_and_the_runs_totals(
    server: ModelServer, tmp_path: Path
) -> None:
    db, run_id = openai_runs(server, tmp_path)
    shown = CliRunner().invoke(cli, ["show", run_id, "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    assert (
        "model: test-model → m-2026, 1,000 in / 100 out tokens, finish tool_calls," in shown.output
    )
    totals = next(line for line in shown.output.splitlines() if line.startswith("model calls:"))
    assert totals.startswith("model calls: 2, 2,200 in / 200 out tokens,")
    assert "model m-2026" in totals
    assert "tool calls: lookup 1x" in shown.output
    data = json.loads(CliRunner().invoke(cli, ["show", run_id, "--db", str(db), "--json"]).output)
    assert data["usage"]["model"]["tokens"] == 2400
    assert data["events"][1]["facts"]["usage"]["response_model"] == "m-2026"


def test_stats_gives_tokens_and_cost_per_machine_and_per_halt_reason(
    server: ModelServer, tmp_path: Path
) -> None:
    db, _ = openai_runs(server, tmp_path)
    store = SqliteStore(db, read_only=True)
    try:
        (m,) = halt_stats(store).machines
    finally:
        store.close()
    assert m.input_tokens is not None
    assert m.output_tokens is not None
    assert (m.input_tokens.count, m.input_tokens.max, m.output_tokens.max) == (2, 2200, 200)
    done, capped = m.usage_by_reason.values()
    assert (done.runs, done.input_tokens, done.output_tokens) == (1, 2200, 200)
    assert done.cost == pytest.approx((2200 * 2 + 200 * 8) / 1e6)
    assert (capped.input_tokens, capped.output_tokens) == (40, 10)
    text = CliRunner().invoke(cli, ["stats", "--db", str(db)]).output
    assert "  completed                1    50%     $0.006        2,400" in text
    assert any(line.startswith("  tokens in ") for line in text.splitlines())
    data = json.loads(CliRunner().invoke(cli, ["stats", "--db", str(db), "--json"]).output)
    assert data["machines"][0]["usage_by_reason"]["max_steps"]["input_tokens"] == 40


def test_the_report_has_a_usage_section_and_each_calls_usage(
    server: ModelServer, tmp_path: Path
) -> None:
    db, run_id = openai_runs(server, tmp_path)
    out = tmp_path / "report.html"
    result = CliRunner().invoke(cli, ["report", run_id, "--db", str(db), "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert '<section id="usage"><h2>Usage</h2>' in page
    assert "2,200 in / 200 out tokens" in page
    assert "test-model → m-2026, 1,000 in / 100 out tokens, finish tool_calls" in page
    assert "<h3>Tools, slowest first</h3>" in page


# --- journals written before usage was kept -------------------------------------------------------


@pytest.fixture
def pre_usage(tmp_path: Path) -> Path:
    copy = tmp_path / "old.db"
    shutil.copyfile(PRE_USAGE, copy)
    return copy


def test_a_journal_from_before_usage_opens_replays_and_verifies(pre_usage: Path) -> None:
    store = SqliteStore(pre_usage, read_only=True)
    try:
        run_ids = store.run_ids()
        assert len(run_ids) == 13
        for run_id in run_ids:
            events = store.events(run_id)
            assert verify_run(store, run_id).ok, run_id
            assert replay_events(store.get_run(run_id), events).ok, run_id
            assert all(e.facts is None or e.facts.usage is None for e in events)
        assert all(s.input_tokens is None for s in store.run_summaries())
    finally:
        store.close()


def test_show_stats_and_report_read_a_journal_from_before_usage(
    pre_usage: Path, tmp_path: Path
) -> None:
    runner = CliRunner()
    shown = runner.invoke(cli, ["show", "36932f2cf4a3", "--db", str(pre_usage)])
    assert shown.exit_code == 0, shown.output
    assert "model calls: 2 (journaled before usage was kept), cost $0" in shown.output
    assert "chain: ok" in shown.output
    stats = runner.invoke(cli, ["stats", "--db", str(pre_usage)])
    assert stats.exit_code == 0, stats.output
    assert "  completed                2    22%         $0            -" in stats.output
    out = tmp_path / "old.html"
    report = runner.invoke(cli, ["report", "36932f2cf4a3", "--db", str(pre_usage), "-o", str(out)])
    assert report.exit_code == 0, report.output
    assert "not journaled (written before usage was kept)" in out.read_text()
