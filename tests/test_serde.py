"""The one converter: every journal type survives `structure(unstructure(x))` (and the JSON text
the store writes), and structuring is strict — extra keys and coerced primitives are refused
with an error that carries the path."""

from __future__ import annotations

import json
from typing import Any

import attrs
import cattrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm_agent.halt import HaltReason
from fsm_agent.journal import serde
from fsm_agent.journal.store import Event, Facts, GuardResult, RunRow
from fsm_agent.runtime.budgets import Budgets, Meters
from fsm_agent.runtime.lanes import ControlPlane, Lane
from fsm_agent.runtime.proposals import FinalAnswer, HandoffRequest, Proposal, Rejection, ToolCall
from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.record import HaltRecord, HandoffPacket, ToolCallEntry
from fsm_agent.runtime.snapshot import Snapshot, ToolOutcome

# --- strategies -------------------------------------------------------------------------------

texts = st.text(max_size=12)
opt_texts = st.none() | texts
counts = st.integers(0, 2**40)
money = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(texts, json_values, max_size=3)
names = st.tuples(texts) | st.tuples(texts, texts) | st.just(())

receipts = st.builds(
    Receipt,
    status=st.integers(100, 599),
    id=texts,
    idempotency_key=opt_texts,
    checksum=opt_texts,
)
budgets = st.builds(
    Budgets,
    max_steps=st.integers(1, 10**6),
    wall_clock_ms=st.integers(1, 10**9),
    max_cost=st.floats(1e-6, 1e6, allow_nan=False),
    tool_timeout_ms=st.integers(1, 10**9),
    max_retries=st.integers(0, 100),
)
meters = st.builds(
    Meters,
    steps_used=counts,
    tool_calls=counts,
    retries_used=counts,
    cost=money,
    elapsed_ms=counts,
)
tool_calls = st.builds(ToolCall, name=texts, args=json_objects, ignored=names)
final_answers = st.builds(FinalAnswer, text=texts, ignored=names)
handoffs = st.builds(HandoffRequest, why=texts, args=st.none() | json_objects, ignored=names)
rejections = st.builds(
    Rejection, kind=st.sampled_from(["schema_fail", "empty_response"]), detail=texts
)
proposals = tool_calls | final_answers | handoffs | rejections
tool_outcomes = st.builds(
    ToolOutcome,
    name=texts,
    args=json_objects,
    status=st.sampled_from(["returned", "failed", "timed_out"]),
    receipts=st.lists(receipts, max_size=2).map(tuple),
    observation=json_values,
    final=opt_texts,
    error=opt_texts,
    retryable=st.booleans(),
    cost=money,
    duration_ms=counts,
    outcome_unknown=st.booleans(),
)
lanes = st.builds(
    Lane,
    kind=st.sampled_from(["local_fn", "http", "free_server"]),
    tier=st.sampled_from(["free", "paid", "local"]),
)
controls = st.builds(
    ControlPlane,
    halt=st.just("local_only") | texts,
    retry_budget=st.just("local_only") | texts,
    schema_repair_vote=st.just("local_only") | texts,
)
snapshots = st.builds(
    Snapshot,
    state=texts,
    outcome=opt_texts,
    next_action=opt_texts,
    clock_ms=counts,
    budgets=budgets,
    meters=meters,
    proposal=st.none() | proposals,
    tool=st.none() | tool_outcomes,
    evidence=st.booleans(),
    grounded=names,
    allowlist=names,
    privileged=names,
    halt_lane=lanes,
    control=controls,
    repeats=st.integers(0, 100),
    thrash_limit=st.integers(0, 100),
)
guard_results = st.builds(
    GuardResult, transition=st.integers(0, 100), guard=texts, result=st.booleans()
)
guard_logs = st.lists(guard_results, max_size=3).map(tuple)
facts = st.builds(
    Facts,
    action=texts,
    reply=json_values,
    reply_cost=money,
    tool=st.none() | tool_outcomes,
    error=opt_texts,
)
halt_reasons = st.sampled_from(list(HaltReason))
events = st.builds(
    Event,
    run_id=texts,
    seq=counts,
    kind=st.sampled_from(["started", "transition"]),
    at_ms=counts,
    wall_time=texts,
    source=opt_texts,
    dest=texts,
    trigger=opt_texts,
    snapshot=snapshots,
    guards=guard_logs,
    check=guard_logs,
    facts=st.none() | facts,
    halt=st.none() | halt_reasons,
    retry=st.booleans(),
    note=opt_texts,
)
tool_call_entries = st.builds(
    ToolCallEntry,
    step=counts,
    name=texts,
    args=json_objects,
    status=texts,
    receipts=st.lists(receipts, max_size=2).map(tuple),
    error=opt_texts,
    outcome_unknown=st.booleans(),
    duration_ms=counts,
)
handoff_packets = st.builds(
    HandoffPacket, why=texts, tried=names, frozen_args=st.none() | json_objects
)
halt_records = st.builds(
    HaltRecord,
    task=texts,
    max_steps=counts,
    wall_clock_ms=counts,
    steps_used=counts,
    tool_calls=st.lists(tool_call_entries, max_size=2).map(tuple),
    halt_reason=halt_reasons,
    answer=opt_texts,
    run_id=texts,
    machine=texts,
    machine_sha256=texts,
    terminal_state=texts,
    budgets=budgets,
    meters=meters,
    started_at=texts,
    ended_at=texts,
    journal=texts,
    handoff=st.none() | handoff_packets,
    error=opt_texts,
    signal=st.none() | st.integers(1, 64),
    format=texts,
)
run_rows = st.builds(
    RunRow,
    run_id=texts,
    machine=texts,
    machine_sha256=texts,
    machine_text=texts,
    task=texts,
    budgets=budgets,
    state=texts,
    status=st.sampled_from(["running", "halted"]),
    started_at=texts,
    steps_used=counts,
    halt_reason=st.none() | halt_reasons,
    ended_at=opt_texts,
    record=st.none() | halt_records,
    pid=st.none() | st.integers(1, 2**22),
)

JOURNAL_TYPES: list[tuple[type[Any], Any]] = [
    (Receipt, receipts),
    (Budgets, budgets),
    (Meters, meters),
    (ToolCall, tool_calls),
    (FinalAnswer, final_answers),
    (HandoffRequest, handoffs),
    (Rejection, rejections),
    (ToolOutcome, tool_outcomes),
    (Lane, lanes),
    (ControlPlane, controls),
    (Snapshot, snapshots),
    (GuardResult, guard_results),
    (Facts, facts),
    (Event, events),
    (ToolCallEntry, tool_call_entries),
    (HandoffPacket, handoff_packets),
    (HaltRecord, halt_records),
    (RunRow, run_rows),
]

PROPOSAL_KINDS = [tool_calls, final_answers, handoffs, rejections]

# Composite strategies (Event, RunRow) draw large examples; that is their point.
ROUND_TRIP = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "strategy"), JOURNAL_TYPES, ids=[cls.__name__ for cls, _ in JOURNAL_TYPES]
)
@ROUND_TRIP
@given(data=st.data())
def test_round_trip(cls: type[Any], strategy: Any, data: st.DataObject) -> None:
    value = data.draw(strategy)
    assert serde.structure(serde.unstructure(value), cls) == value
    # and through the canonical JSON text the store writes
    assert serde.structure(json.loads(serde.dumps(value)), cls) == value


@pytest.mark.parametrize(
    "strategy", PROPOSAL_KINDS, ids=["ToolCall", "FinalAnswer", "HandoffRequest", "Rejection"]
)
@ROUND_TRIP
@given(data=st.data())
def test_proposal_round_trip_through_the_union(strategy: Any, data: st.DataObject) -> None:
    value = data.draw(strategy)
    raw = serde.converter.unstructure(value, unstructure_as=Proposal)
    assert raw["type"] == type(value).__name__
    back = serde.structure(raw, Proposal)  # type: ignore[arg-type]
    assert back == value
    assert type(back) is type(value)


@pytest.mark.parametrize(
    "strategy", PROPOSAL_KINDS, ids=["ToolCall", "FinalAnswer", "HandoffRequest", "Rejection"]
)
@ROUND_TRIP
@given(data=st.data())
def test_proposal_round_trip_through_snapshot(strategy: Any, data: st.DataObject) -> None:
    proposal = data.draw(strategy)
    snapshot = attrs.evolve(data.draw(snapshots), proposal=proposal)
    raw = json.loads(serde.dumps(snapshot))
    assert raw["proposal"]["type"] == type(proposal).__name__
    back = serde.structure(raw, Snapshot)
    assert back == snapshot
    assert type(back.proposal) is type(proposal)


# --- strictness -------------------------------------------------------------------------------

BUDGETS = Budgets(max_steps=8, wall_clock_ms=1000, max_cost=1.0, tool_timeout_ms=100, max_retries=2)
SNAPSHOT = Snapshot(
    state="drafting",
    outcome="tool_call",
    next_action="model",
    clock_ms=5,
    budgets=BUDGETS,
    meters=Meters(steps_used=1),
    proposal=ToolCall(name="lookup", args={"q": "x"}),
    tool=ToolOutcome(name="lookup", args={}, status="returned", receipts=(Receipt(200, "a"),)),
)
EVENT = Event(
    run_id="r1",
    seq=1,
    kind="transition",
    at_ms=5,
    wall_time="2025-01-01T00:00:00Z",
    source="drafting",
    dest="tool_pending",
    trigger="tool_call",
    snapshot=SNAPSHOT,
    guards=(GuardResult(transition=0, guard="not tool_allowed", result=False),),
)
RECORD = HaltRecord(
    task="t",
    max_steps=8,
    wall_clock_ms=1000,
    steps_used=1,
    tool_calls=(ToolCallEntry(step=1, name="lookup", args={}, status="returned"),),
    halt_reason=HaltReason.COMPLETED,
    answer="42",
    run_id="r1",
    machine="agent_loop",
    machine_sha256="0" * 64,
    terminal_state="done",
    budgets=BUDGETS,
    meters=Meters(steps_used=1),
    started_at="s",
    ended_at="e",
    journal="j.db",
)


def _set(data: Any, path: list[Any], value: Any) -> Any:
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("cls", "value", "path", "where"),
    [
        (Receipt, Receipt(200, "a"), ["extra"], "@ $"),
        (Budgets, BUDGETS, ["max_tokens"], "@ $"),
        (Snapshot, SNAPSHOT, ["budgets", "max_tokens"], "@ $.budgets"),
        (Snapshot, SNAPSHOT, ["proposal", "done"], "@ $.proposal"),
        (Snapshot, SNAPSHOT, ["tool", "receipts", 0, "extra"], "@ $.tool.receipts[0]"),
        (Event, EVENT, ["snapshot", "meters", "tokens"], "@ $.snapshot.meters"),
        (Event, EVENT, ["guards", 0, "why"], "@ $.guards[0]"),
        (HaltRecord, RECORD, ["tool_calls", 0, "extra"], "@ $.tool_calls[0]"),
        (HaltRecord, RECORD, ["confidence"], "@ $"),
    ],
)
def test_structure_refuses_extra_keys_with_a_path(
    cls: type[Any], value: Any, path: list[Any], where: str
) -> None:
    data = _set(json.loads(serde.dumps(value)), path, 1)
    with pytest.raises(cattrs.BaseValidationError) as info:
        serde.structure(data, cls)
    assert f"extra fields found ({path[-1]}) {where}" in serde.error_path(info.value)


@pytest.mark.parametrize(
    ("cls", "value", "path", "bad", "where"),
    [
        (Receipt, Receipt(200, "a"), ["status"], "200", "$.status"),
        (Receipt, Receipt(200, "a"), ["status"], True, "$.status"),
        (Receipt, Receipt(200, "a"), ["id"], 7, "$.id"),
        (Budgets, BUDGETS, ["max_cost"], "1.0", "$.max_cost"),
        (Budgets, BUDGETS, ["max_steps"], 8.0, "$.max_steps"),
        (Snapshot, SNAPSHOT, ["evidence"], 1, "$.evidence"),
        (Snapshot, SNAPSHOT, ["tool", "status"], "exploded", "$.tool.status"),
        (Event, EVENT, ["halt"], "almost", "$.halt"),
        (Event, EVENT, ["snapshot", "budgets", "max_steps"], None, "$.snapshot.budgets.max_steps"),
    ],
)
def test_structure_refuses_coerced_or_wrong_values_with_a_path(
    cls: type[Any], value: Any, path: list[Any], bad: Any, where: str
) -> None:
    data = _set(json.loads(serde.dumps(value)), path, bad)
    with pytest.raises(cattrs.BaseValidationError) as info:
        serde.structure(data, cls)
    assert f"@ {where}" in serde.error_path(info.value)


def test_structure_names_a_missing_field_by_path() -> None:
    data = json.loads(serde.dumps(SNAPSHOT))
    del data["budgets"]["max_steps"]
    with pytest.raises(cattrs.BaseValidationError) as info:
        serde.structure(data, Snapshot)
    assert serde.error_path(info.value) == "required field missing @ $.budgets.max_steps"


def test_error_path_of_a_plain_exception_is_its_message() -> None:
    assert serde.error_path(ValueError("nope")) == "nope"


def test_dumps_is_canonical_and_refuses_nan() -> None:
    assert serde.dumps(Receipt(200, "a")) == (
        '{"checksum":null,"id":"a","idempotency_key":null,"status":200}'
    )
    with pytest.raises(ValueError, match="JSON compliant"):
        serde.dumps(Meters(cost=float("nan")))


def test_halt_reason_is_written_as_its_string_and_read_back_as_the_enum() -> None:
    # HaltReason is a StrEnum, so `==` cannot tell a plain str from a member: check `is`.
    assert serde.unstructure(HaltReason.MAX_STEPS) == "max_steps"
    assert serde.structure("max_steps", HaltReason) is HaltReason.MAX_STEPS
    event = serde.structure(
        json.loads(serde.dumps(attrs.evolve(EVENT, halt=HaltReason.TOOL_ERROR))), Event
    )
    assert event.halt is HaltReason.TOOL_ERROR
    record = serde.structure(json.loads(serde.dumps(RECORD)), HaltRecord)
    assert record.halt_reason is HaltReason.COMPLETED
    with pytest.raises(ValueError, match="almost"):
        serde.structure("almost", HaltReason)
