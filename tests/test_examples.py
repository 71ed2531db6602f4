"""Every scenario in `fsm_agent.examples.scenarios.SCENARIOS` runs against a real SQLite journal and
halts exactly as its seed says; every `python -m examples.X` runs as a real process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fsm_agent import (
    Budgets,
    HaltReason,
    HaltRecord,
    Meters,
    Receipt,
    Snapshot,
    load_machine,
    read_record,
    receipts_complete,
)
from fsm_agent.examples.payments_retry.tools import new_tools
from fsm_agent.examples.payments_retry.webhook import await_capture_webhook
from fsm_agent.examples.scenarios import (
    SCENARIOS,
    Scenario,
    environment,
    example_path,
    run_scenario,
    scenarios_of,
)
from fsm_agent.journal.store import Event
from fsm_agent.runtime.proposals import ToolCall
from fsm_agent.runtime.snapshot import ToolOutcome
from fsm_agent.stores.sqlite import SqliteStore

EXAMPLES = ("halt_lab", "payments_retry", "stop_conditions")
BY_NAME = {s.name: s for s in SCENARIOS}
Check = Callable[[HaltRecord, list[Event]], None]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(tmp_path / "journal.db")
    yield s
    s.close()


WEBHOOK = "fsm_agent.examples.payments_retry.webhook:await_capture_webhook"


def _statuses(record: HaltRecord) -> list[int]:
    """Receipt statuses of the capture calls (the webhook action is recorded separately)."""
    return [r.status for c in record.tool_calls if c.name != WEBHOOK for r in c.receipts]


def _done_index(events: list[Event]) -> int:
    return next(i for i, e in enumerate(events) if e.dest == "done")


# --- the specific facts of each scenario --------------------------------------------------


def _lab_looping(record: HaltRecord, events: list[Event]) -> None:
    assert record.steps_used == record.max_steps == 8
    assert [c.name for c in record.tool_calls] == ["lookup"] * 8
    assert record.answer == "cannot: step budget"


def _lab_wall_clock(record: HaltRecord, events: list[Event]) -> None:
    assert record.wall_clock_ms == record.budgets.wall_clock_ms == 1000
    assert record.meters.elapsed_ms >= 1000
    [call] = record.tool_calls
    assert (call.name, call.status, call.outcome_unknown) == ("slow_lookup", "timed_out", True)
    assert call.receipts == ()
    assert record.answer == "cannot: time budget"


def _lab_chatty(record: HaltRecord, events: list[Event]) -> None:
    assert record.steps_used == 3
    assert record.meters.retries_used == 2
    assert record.tool_calls == ()
    assert record.answer is None
    assert record.error is not None
    assert "prose" in record.error


def _lab_completed(record: HaltRecord, events: list[Event]) -> None:
    assert record.answer == "swordfish"
    assert record.steps_used == 2
    [call] = record.tool_calls
    assert call.receipts == (Receipt(status=200, id="fact:lab password"),)


def _payments_completed(record: HaltRecord, events: list[Event]) -> None:
    assert record.answer == "cap_1"
    assert _statuses(record) == [206, 206, 200]
    assert [r.id for c in record.tool_calls for r in c.receipts] == ["", "", "cap_1", "evt_cap_1"]
    assert [c.name for c in record.tool_calls] == ["capture_payment"] * 3 + [WEBHOOK]
    # No success before a 2xx capture receipt with an id, and the webhook's receipt ends it.
    first_receipt = next(
        i
        for i, e in enumerate(events)
        if e.facts and e.facts.tool and receipts_complete(e.facts.tool.receipts)
    )
    done = _done_index(events)
    assert first_receipt < done
    assert all(e.dest != "done" for e in events[:done])
    last = events[done]
    assert (last.source, last.trigger) == ("awaiting_webhook", "webhook_received")
    webhook = last.facts.tool if last.facts else None
    assert webhook is not None
    assert webhook.receipts == (
        Receipt(status=200, id="evt_cap_1", idempotency_key="cap-ord_1001"),
    )


def _payments_settles(record: HaltRecord, events: list[Event]) -> None:
    _payments_completed(record, events)
    assert record.steps_used == 3  # every 206 retry was a model call, so a step


def _payments_done_flag(record: HaltRecord, events: list[Event]) -> None:
    _payments_completed(record, events)
    assert record.steps_used == 4
    assert record.meters.retries_used == 1
    refused = events[1]
    assert (refused.source, refused.dest, refused.retry) == ("drafting", "drafting", True)
    assert refused.facts is not None
    assert refused.facts.reply == {"answer": "captured!", "done": True}
    flagged = events[2].snapshot.proposal
    assert isinstance(flagged, ToolCall)
    assert flagged.ignored == ("done",)


def _payments_free_lane(record: HaltRecord, events: list[Event]) -> None:
    assert record.tool_calls == ()
    assert record.meters.tool_calls == 0
    assert record.steps_used == 0
    assert record.error is not None
    assert "HALT_PATH_REFUSED" in record.error
    assert all(e.facts is None for e in events)


def _payments_pending_forever(record: HaltRecord, events: list[Event]) -> None:
    assert _statuses(record) == [206] * record.max_steps
    assert record.steps_used == record.max_steps == 6
    assert record.answer == "cannot: step budget"
    assert all(e.dest not in ("done", "awaiting_webhook") for e in events)


def _stop_happy(record: HaltRecord, events: list[Event]) -> None:
    assert record.steps_used == 1
    assert record.answer == "30 days from delivery"
    [call] = record.tool_calls
    assert call.receipts == (Receipt(status=200, id="kb:refunds#window"),)


def _stop_stuck(record: HaltRecord, events: list[Event]) -> None:
    assert record.answer == "cannot: step budget"
    assert record.steps_used == record.max_steps == 3
    assert [c.name for c in record.tool_calls] == ["search"] * 3
    assert _statuses(record) == []


def _stop_handoff(record: HaltRecord, events: list[Event]) -> None:
    assert record.answer is None
    assert record.handoff is not None
    assert record.handoff.why == "would need to click Pay"
    assert record.handoff.tried == ('step 1: search({"q": "pay invoice inv_7"}) -> returned',)
    # the handoff request carries no args: the last proposed tool call's are frozen
    assert record.handoff.frozen_args == {"tool": "search", "args": {"q": "pay invoice inv_7"}}


def _stop_unsafe_tool(record: HaltRecord, events: list[Event]) -> None:
    assert record.tool_calls == ()
    assert record.handoff is not None
    assert record.handoff.frozen_args == {
        "tool": "click_pay",
        "args": {"invoice": "inv_7", "amount_cents": 4200},
    }


def _stop_thrashing(record: HaltRecord, events: list[Event]) -> None:
    assert record.steps_used == 3
    assert [c.args for c in record.tool_calls] == [{"q": "refund policy"}] * 2
    assert record.answer == "cannot: repeat budget"
    assert (events[-1].source, events[-1].trigger) == ("drafting", "tool_call")


FACTS: dict[str, Check] = {
    "halt_lab.looping": _lab_looping,
    "halt_lab.wall_clock": _lab_wall_clock,
    "halt_lab.chatty": _lab_chatty,
    "halt_lab.completed": _lab_completed,
    "payments_retry.settles": _payments_settles,
    "payments_retry.done_flag": _payments_done_flag,
    "payments_retry.free_lane": _payments_free_lane,
    "payments_retry.pending_forever": _payments_pending_forever,
    "stop_conditions.happy": _stop_happy,
    "stop_conditions.stuck": _stop_stuck,
    "stop_conditions.handoff": _stop_handoff,
    "stop_conditions.unsafe_tool": _stop_unsafe_tool,
    "stop_conditions.thrashing": _stop_thrashing,
}


# --- the catalogue ------------------------------------------------------------------------


def test_catalogue_is_complete_and_unique() -> None:
    names = [s.name for s in SCENARIOS]
    assert len(names) == len(set(names))
    assert set(names) == set(FACTS)
    assert {s.example for s in SCENARIOS} == set(EXAMPLES)
    for s in SCENARIOS:
        assert s.name.startswith(f"{s.example}.")
        assert Path(example_path(s.replies)).is_file()
        load_machine(example_path(s.machine))


# --- every scenario, end to end -----------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_scenario_halts_as_its_seed_says(
    scenario: Scenario, store: SqliteStore, tmp_path: Path
) -> None:
    path = tmp_path / "record.json"
    seen: list[Event] = []
    record = run_scenario(scenario, store=store, record_path=path, on_transition=seen.append)

    assert record.halt_reason is scenario.expected
    assert record.terminal_state == scenario.expected_state
    assert record.steps_used <= record.max_steps
    assert read_record(path) == record
    assert store.get_run(record.run_id).halt_reason is scenario.expected
    events = store.events(record.run_id)
    assert events == seen
    assert (events[-1].dest, events[-1].halt) == (scenario.expected_state, scenario.expected)
    if scenario.expected is not HaltReason.COMPLETED:
        assert all(e.dest != "done" for e in events)
    FACTS[scenario.name](record, events)


def test_gateway_state_does_not_leak_between_runs(store: SqliteStore, tmp_path: Path) -> None:
    scenario = BY_NAME["payments_retry.settles"]
    records = [
        run_scenario(scenario, store=store, record_path=tmp_path / f"{n}.json") for n in range(2)
    ]
    assert [_statuses(r) for r in records] == [[206, 206, 200]] * 2


def test_gateway_is_idempotent_per_key() -> None:
    capture = new_tools().get("capture_payment")
    assert capture is not None
    assert (capture.privileged, capture.idempotent) == (True, True)
    args = {"order_id": "ord_1001", "amount_cents": 4200, "idempotency_key": "k"}
    ids = [capture.fn(**args).receipts[0].id for _ in range(4)]
    assert ids == ["", "", "cap_1", "cap_1"]


def test_webhook_waits_for_a_complete_capture_receipt() -> None:
    budgets = Budgets(
        max_steps=6, wall_clock_ms=1000, max_cost=1.0, tool_timeout_ms=100, max_retries=0
    )

    def snap(*receipts: Receipt) -> Snapshot:
        tool = ToolOutcome(name="capture_payment", args={}, status="returned", receipts=receipts)
        return Snapshot(
            state="awaiting_webhook",
            outcome=None,
            next_action=None,
            clock_ms=0,
            budgets=budgets,
            meters=Meters(),
            tool=tool,
        )

    assert await_capture_webhook(snap(Receipt(status=206, id=""))).outcome == "no_webhook"
    got = await_capture_webhook(snap(Receipt(status=200, id="cap_9")))
    assert got.outcome == "webhook_received"
    assert got.result is not None
    assert got.result.final == "cap_9"


def test_environment_overrides_are_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOKUP_SLEEP_MS", "5")
    monkeypatch.delenv("FSM_AGENT_EXAMPLE_PROBE", raising=False)
    with environment({"LOOKUP_SLEEP_MS": "0", "FSM_AGENT_EXAMPLE_PROBE": "1"}):
        assert os.environ["LOOKUP_SLEEP_MS"] == "0"
    assert os.environ["LOOKUP_SLEEP_MS"] == "5"
    assert "FSM_AGENT_EXAMPLE_PROBE" not in os.environ


# --- each example is one command ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES)
def test_example_runs_as_one_command(example: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", f"examples.{example}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for scenario in scenarios_of(example):
        [row] = [line for line in lines if line.startswith(f"{scenario.name} ")]
        assert scenario.expected.value in row
        assert row.rstrip().endswith("yes")
    assert list(tmp_path.iterdir()) == []  # everything went to a temporary directory
