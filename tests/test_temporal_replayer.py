"""Runs in flight survive a change to the runtime: recorded Temporal workflow histories
(`tests/temporal_histories/`: demo scenarios, and every workflow run of a run that continued
as new) replay, with Temporal's own `Replayer`, against today's `RunWorkflow` and the
runtime its script is, with no nondeterminism — and, past what Temporal checks (each
command's kind and activity type), each activity is asked with the very input recorded and
the run ends with the very outcome recorded. No server: replaying runs no activity.

A change to the runtime that would break runs in flight (a workflow replaying a history it
did not make fails its workflow task, again and again, and the run stops) fails this test.
Re-record the histories with `python -m tests.record_temporal_histories` only when a change
is meant to be incompatible, and say in the CHANGELOG how the runs in flight are to be
drained (finished on workers of the old version before workers of the new one start, or
patched with `workflow.patched`).

The negative tests prove the check can fail: a history replayed with a Setup the run did not
have, or a history edited, is reported.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import attrs
import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.worker import (
    ContinueAsNewInput,
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
    WorkflowReplayResult,
)
from temporalio.workflow import ActivityHandle

from fsm_agent import ScriptedModel, load_tools
from fsm_agent.examples.scenarios import EXAMPLES_DIR, SCENARIOS, environment, example_path
from fsm_agent.temporal import setup as worker_setup
from fsm_agent.temporal import wire
from fsm_agent.temporal import workflow as run_workflow
from fsm_agent.temporal.activities import CALL, JOURNAL
from fsm_agent.temporal.payloads import ENCODING
from fsm_agent.temporal.setup import Setup, Submission
from fsm_agent.temporal.workflow import RunWorkflow

pytestmark = pytest.mark.temporal

HISTORIES = Path(__file__).parent / "temporal_histories"
FIXTURES = sorted(HISTORIES.glob("*.json"))
CONTINUED = "continued_as_new"
_CONVERTER = DataConverter.default.payload_converter


@attrs.frozen
class Recorded:
    case: dict[str, Any]
    history: WorkflowHistory


def recorded(path: Path) -> Recorded:
    data = json.loads(path.read_text())
    case = data["case"]
    history = WorkflowHistory.from_json(case["workflow_id"], data["history"])
    return Recorded(case, _rehomed(history, case["examples_dir"]))


def _rehomed(
    history: WorkflowHistory, recorded_at: str, here: str = str(EXAMPLES_DIR.resolve())
) -> WorkflowHistory:
    """A machine file is named in a run's job by its absolute path, and the workflow reads
    the file's halt policy next to it (`new_context`: on every replay, not frozen in the
    job as the machine's text is): a history whose machine path is under `recorded_at` (the
    checkout it was recorded in), with that path moved under `here`."""
    if recorded_at == here:
        return history
    for payload in _workflow_inputs(history):
        submitted = wire.loads(_bytes(payload))
        if not isinstance(submitted, Submission):
            continue
        machine = submitted.job.machine
        if machine.startswith(recorded_at):
            job = attrs.evolve(submitted.job, machine=here + machine[len(recorded_at) :])
            payload.data = wire.dumps(attrs.evolve(submitted, job=job))
    return history


def _workflow_inputs(history: WorkflowHistory) -> Iterator[Payload]:
    for event in history.events:
        if event.HasField("workflow_execution_started_event_attributes"):
            yield from event.workflow_execution_started_event_attributes.input.payloads
        if event.HasField("workflow_execution_continued_as_new_event_attributes"):
            yield from event.workflow_execution_continued_as_new_event_attributes.input.payloads


def _bytes(payload: Payload) -> bytes:
    value: bytes = _CONVERTER.from_payloads([payload], [bytes])[0]
    return value


def the_setup(case: Mapping[str, Any], **changes: Any) -> Setup:
    """The Setup the case's worker served it with (`changes`: what differs)."""
    replies = case["replies"]
    model = (
        ScriptedModel(replies)
        if isinstance(replies, list)
        else ScriptedModel.from_file(example_path(replies))
    )
    allow = case["allow"]
    setup = Setup(
        journal="replayed.db",  # the replayer runs no activity: no journal is opened
        model=model,
        tools=load_tools(case["tools"]),
        allow=None if allow is None else tuple(allow),
    )
    return attrs.evolve(setup, **changes)


@contextmanager
def installed(
    monkeypatch: pytest.MonkeyPatch, case: Mapping[str, Any], **changes: Any
) -> Iterator[None]:
    monkeypatch.setattr(worker_setup, "_current", None)  # restored after the test
    worker_setup.install(the_setup(case, **changes))
    if case["continue_at"] is not None:
        monkeypatch.setattr(run_workflow, "CONTINUE_AT", case["continue_at"])
    with environment(case["env"]):
        yield


# --- what the replayed workflow asks and answers -------------------------------------------------


@attrs.define
class Seen:
    activities: list[tuple[str, bytes]] = attrs.field(factory=list)
    ended: list[tuple[str, bytes]] = attrs.field(factory=list)


_seen = Seen()


class _Outbound(WorkflowOutboundInterceptor):
    def start_activity(self, input: StartActivityInput) -> ActivityHandle[Any]:
        (arg,) = input.args
        _seen.activities.append((input.activity, arg))
        return super().start_activity(input)

    def continue_as_new(self, input: ContinueAsNewInput) -> NoReturn:
        (arg,) = input.args
        _seen.ended.append(("continued", arg))
        super().continue_as_new(input)


class _Inbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_Outbound(outbound))

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        answer = await super().execute_workflow(input)
        _seen.ended.append(("completed", answer))
        return answer


class _Watch(Interceptor):
    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _Inbound


def replay(history: WorkflowHistory, *, watch: bool = False) -> WorkflowReplayResult:
    replayer = Replayer(workflows=[RunWorkflow], interceptors=[_Watch()] if watch else [])
    return asyncio.run(replayer.replay_workflow(history, raise_on_replay_failure=False))


def scheduled(history: WorkflowHistory) -> list[tuple[str, bytes]]:
    """Each activity the history's workflow scheduled, with its input."""
    return [
        (a.activity_type.name, _bytes(a.input.payloads[0]))
        for a in (
            e.activity_task_scheduled_event_attributes
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
        )
    ]


def ended(history: WorkflowHistory) -> list[tuple[str, bytes]]:
    """How the history's workflow run ended: its result, or the input it continued with."""
    last = history.events[-1]
    if last.HasField("workflow_execution_completed_event_attributes"):
        completed = last.workflow_execution_completed_event_attributes
        return [("completed", _bytes(completed.result.payloads[0]))]
    if last.HasField("workflow_execution_continued_as_new_event_attributes"):
        continued = last.workflow_execution_continued_as_new_event_attributes
        return [("continued", _bytes(continued.input.payloads[0]))]
    return []


def same(recorded_bytes: bytes, replayed_bytes: bytes) -> bool:
    """Equal as values: a pickle's bytes depend on set order, which differs by process."""
    if recorded_bytes == replayed_bytes:
        return True
    return bool(wire.loads(recorded_bytes) == wire.loads(replayed_bytes))


def divergence(history: WorkflowHistory) -> str | None:
    """How replaying `history` with the Setup installed goes otherwise than recorded (None:
    it does not): Temporal's own check (each command's kind and activity type), then each
    activity's input and the run's end (its outcome, or the input it continues as new with),
    as values."""
    _seen.activities.clear()
    _seen.ended.clear()
    failure = replay(history, watch=True).replay_failure
    if failure is not None:
        return f"replay failed: {type(failure).__name__}: {failure}"
    want, got = scheduled(history), _seen.activities
    if [name for name, _ in want] != [name for name, _ in got]:
        return f"other activities asked: {[n for n, _ in got]}, not {[n for n, _ in want]}"
    for n, ((name, was), (_, now)) in enumerate(zip(want, got, strict=True)):
        if not same(was, now):
            return f"activity {n + 1} ({name}) is asked with another input"
    end, now_end = ended(history), _seen.ended
    if [kind for kind, _ in end] != [kind for kind, _ in now_end]:
        return f"the run ends otherwise: {[k for k, _ in now_end]}, not {[k for k, _ in end]}"
    if not all(same(was, now) for (_, was), (_, now) in zip(end, now_end, strict=True)):
        return f"the run ends otherwise: another {end[0][0]} value"
    return None


# --- the tests ------------------------------------------------------------------------------------


def test_the_fixtures_are_there_and_self_contained() -> None:
    cases = [recorded(path).case for path in FIXTURES]
    scenarios = {c["scenario"] for c in cases} - {None}
    assert len(scenarios) >= 4, scenarios
    assert scenarios <= {s.name for s in SCENARIOS}
    chain = sorted((c["run"], c["runs"]) for c in cases if c["name"] == CONTINUED)
    assert len(chain) >= 2, chain
    assert [run for run, _ in chain] == list(range(1, chain[0][1] + 1))  # every run of it
    for path in FIXTURES:
        assert path.stat().st_size < 200_000, path
        # a payload the claim check keeps in the journal names its encoding (in base64)
        assert base64.b64encode(ENCODING).decode() not in path.read_text(), path


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
def test_a_recorded_run_replays_with_no_nondeterminism(
    fixture: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    it = recorded(fixture)
    with installed(monkeypatch, it.case):
        assert divergence(it.history) is None


def _named(name: str) -> Recorded:
    (path,) = [p for p in FIXTURES if p.stem == name]
    return recorded(path)


def _edited(
    history: WorkflowHistory, index: int, edit: Callable[[HistoryEvent], None]
) -> WorkflowHistory:
    events = list(history.events)
    changed = HistoryEvent()
    changed.CopyFrom(events[index])
    edit(changed)
    events[index] = changed
    return WorkflowHistory(history.workflow_id, events)


def _where(history: WorkflowHistory, kind: str) -> list[int]:
    """The indexes of the events of `kind` (a HistoryEvent attributes field)."""
    return [i for i, e in enumerate(history.events) if e.WhichOneof("attributes") == kind]


def test_a_fixture_recorded_in_another_checkout_replays_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """payments_retry declares a halt policy file: its fixture, as if recorded elsewhere."""
    it = _named("payments_retry.settles")
    elsewhere = "/elsewhere/fsm_agent/examples"
    moved = _rehomed(it.history, str(EXAMPLES_DIR.resolve()), here=elsewhere)
    (submitted,) = [wire.loads(_bytes(p)) for p in _workflow_inputs(moved)]
    assert submitted.job.machine.startswith(elsewhere + "/")
    with installed(monkeypatch, it.case):
        assert divergence(_rehomed(moved, elsewhere)) is None


def test_a_history_replayed_with_another_allow_list_is_nondeterministic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """halt_lab.completed called `lookup`; a worker that does not allow it refuses the call
    where the history made it: Temporal's own check sees it."""
    it = _named("halt_lab.completed")
    with installed(monkeypatch, it.case, allow=("slow_lookup",)):
        found = divergence(it.history)
    assert found is not None
    assert found.startswith("replay failed: NondeterminismError"), found


def test_an_activity_recorded_as_another_is_nondeterministic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An edited history: the run's first call recorded as a journal write."""
    it = _named("stop_conditions.handoff")
    calls = [
        i
        for i in _where(it.history, "activity_task_scheduled_event_attributes")
        if it.history.events[i].activity_task_scheduled_event_attributes.activity_type.name == CALL
    ]

    def as_journal(event: HistoryEvent) -> None:
        event.activity_task_scheduled_event_attributes.activity_type.name = JOURNAL

    with installed(monkeypatch, it.case):
        found = divergence(_edited(it.history, calls[0], as_journal))
    assert found is not None
    assert found.startswith("replay failed: NondeterminismError"), found


def test_another_model_reply_in_the_history_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """halt_lab.completed's first model reply (a tool call) replaced by halt_lab.chatty's
    (prose, retried): the workflow goes on otherwise. Temporal compares only the kinds of
    what it asks (a call is a call, whatever it calls); the inputs tell."""
    completed, chatty = _named("halt_lab.completed"), _named("halt_lab.chatty")
    answered = "activity_task_completed_event_attributes"
    # the third activity of a run is its first model call (after its journal's opening and
    # its first write): in both histories
    mine, theirs = _where(completed.history, answered)[2], _where(chatty.history, answered)[2]
    prose = chatty.history.events[theirs].activity_task_completed_event_attributes.result

    def chatty_reply(event: HistoryEvent) -> None:
        event.activity_task_completed_event_attributes.result.CopyFrom(prose)

    with installed(monkeypatch, completed.case):
        found = divergence(_edited(completed.history, mine, chatty_reply))
    assert found is not None


def test_a_continued_run_replayed_with_another_continue_at_is_nondeterministic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The seam of a continue-as-new is where the history grew past `CONTINUE_AT`: a worker
    whose `CONTINUE_AT` is another goes on past it (so changing it breaks long runs in
    flight)."""
    it = _named(f"{CONTINUED}.1")
    with installed(monkeypatch, {**it.case, "continue_at": it.case["continue_at"] * 4}):
        found = divergence(it.history)
    assert found is not None
    assert found.startswith("replay failed: NondeterminismError"), found
