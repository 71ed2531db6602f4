"""Re-record the Temporal workflow histories `tests/test_temporal_replayer.py` replays:
`python -m tests.record_temporal_histories` (a few seconds a case; needs the temporal extra).

Each case is a run of `fsm_agent.temporal.workflow.RunWorkflow` on a Temporal development
server (`fsm_agent.temporal.service.DevServer`), served in this process as
`tests/temporal_runs.py` serves one: a demo scenario of `fsm_agent.examples.scenarios`, or a
run long enough to continue as new (every workflow run of its chain is recorded). Its
history is made self-contained: every payload the claim check (`ClaimCheck`) moved into the
journal's `temporal_payloads` table is put back in place, so a fixture needs no journal. It
is written to `tests/temporal_histories/NAME.json` as `{"case": ..., "history": ...}`: what
the case ran (scenario, machine, model replies, tools module, allow-list, the workflow's
`CONTINUE_AT`), and the history as `WorkflowHistory.to_json_dict` gives it.

Re-record only when a change to the runtime is meant to be incompatible with the runs in
flight (and say in the CHANGELOG how they are to be drained): the replayer test is what
tells such a change from a compatible one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import temporalio
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowHistory

from fsm_agent import ScriptedModel, load_tools
from fsm_agent.examples.scenarios import EXAMPLES_DIR, SCENARIOS, environment, example_path
from fsm_agent.runtime.lanes import LOCAL, Lane
from fsm_agent.stores import open_store
from fsm_agent.submission import frozen_job
from fsm_agent.temporal import wire
from fsm_agent.temporal import workflow as run_workflow
from fsm_agent.temporal.payloads import ENCODING, PayloadTable
from fsm_agent.temporal.service import DevServer, connect, serve
from fsm_agent.temporal.setup import TASK_QUEUE, WORKFLOW, Setup, submission
from fsm_agent.temporal.workflow import Outcome

HISTORIES = Path(__file__).parent / "temporal_histories"
#: The demo scenarios recorded: one of each way a run ends (a receipted answer, a schema
#: failure, the wall clock, a user action and a declared halt policy, a refused halt path, a
#: hand-off, a refused tool, thrashing); each history is a few tens of KB.
RECORDED = (
    "halt_lab.completed",
    "halt_lab.chatty",
    "halt_lab.wall_clock",
    "payments_retry.settles",
    "payments_retry.free_lane",
    "stop_conditions.handoff",
    "stop_conditions.unsafe_tool",
    "stop_conditions.thrashing",
)
CONTINUED = "continued_as_new"
#: The continue case: `CONTINUE_AT` history events per workflow run, `LOOKUPS` model calls.
CONTINUE_AT = 60
LOOKUPS = 6
LAB_TOOLS = "fsm_agent.examples.halt_lab.tools"
LAB_ALLOW = ("lookup", "slow_lookup", "hang")
LAB_TASK = "Find the lab password in the lookup tool."


@attrs.frozen
class Case:
    """One recorded run: what `tests.test_temporal_replayer` installs to replay it."""

    name: str
    machine: str  # a `machines` name, or a YAML path relative to fsm_agent/examples
    task: str
    replies: str | list[Any]  # a JSON file relative to fsm_agent/examples, or the replies
    tools: str
    allow: tuple[str, ...] | None = None
    budgets: Mapping[str, int | float] = attrs.field(factory=dict)
    halt_lane: Lane = LOCAL
    thrash_limit: int | None = None
    env: Mapping[str, str] = attrs.field(factory=dict)
    scenario: str | None = None
    expected: str | None = None
    continue_at: int | None = None  # None: the workflow's own CONTINUE_AT

    def model(self) -> ScriptedModel:
        if isinstance(self.replies, list):
            return ScriptedModel(self.replies)
        return ScriptedModel.from_file(example_path(self.replies))

    def sidecar(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "scenario": self.scenario,
            "machine": self.machine,
            "task": self.task,
            "replies": self.replies,
            "tools": self.tools,
            "allow": None if self.allow is None else list(self.allow),
            "budgets": dict(self.budgets),
            "halt_lane": {"kind": self.halt_lane.kind, "tier": self.halt_lane.tier},
            "thrash_limit": self.thrash_limit,
            "env": dict(self.env),
            "expected": self.expected,
            "continue_at": self.continue_at,
        }


def cases() -> list[Case]:
    found = [
        Case(
            name=s.name,
            scenario=s.name,
            machine=s.machine,
            task=s.task,
            replies=s.replies,
            tools=s.tools,
            allow=s.allow,
            budgets=dict(s.budgets),
            halt_lane=s.halt_lane,
            thrash_limit=s.thrash_limit,
            env=dict(s.env),
            expected=s.expected.value,
        )
        for s in SCENARIOS
        if s.name in RECORDED
    ]
    lookups = [
        {"tool_call": {"name": "lookup", "args": {"q": f"page {n}"}}} for n in range(LOOKUPS)
    ]
    found.append(
        Case(
            name=CONTINUED,
            machine="agent_loop",
            task=LAB_TASK,
            replies=lookups,
            tools=LAB_TOOLS,
            allow=LAB_ALLOW,
            budgets={"max_steps": LOOKUPS},
            expected="max_steps",
            continue_at=CONTINUE_AT,
        )
    )
    return found


# --- payloads put back in place ---------------------------------------------------------------


def _messages(message: Message) -> Iterator[Message]:
    """Every message directly inside `message` (repeated fields and map values too)."""
    for field, value in message.ListFields():
        entry = field.message_type
        if field.type != FieldDescriptor.TYPE_MESSAGE or entry is None:
            continue
        if entry.GetOptions().map_entry:
            if entry.fields_by_name["value"].type == FieldDescriptor.TYPE_MESSAGE:
                yield from value.values()
        elif field.is_repeated:
            yield from value
        else:
            yield value


def payloads_in(message: Message) -> Iterator[Payload]:
    """Every `Payload` in `message`, at any depth."""
    for inner in _messages(message):
        if isinstance(inner, Payload):
            yield inner
        else:
            yield from payloads_in(inner)


def claimed(payload: Payload) -> bool:
    return payload.metadata.get("encoding") == ENCODING


def inline_payloads(history: WorkflowHistory, table: PayloadTable) -> int:
    """Replace, in place, each payload of `history` that is a key into the journal's payload
    table by the payload itself (as `ClaimCheck._decode` does); how many were replaced."""
    replaced = 0
    for event in history.events:
        for payload in payloads_in(event):
            if claimed(payload):
                whole = Payload()
                whole.ParseFromString(table.get(payload.data.decode()))
                payload.CopyFrom(whole)
                replaced += 1
    left = sum(claimed(p) for e in history.events for p in payloads_in(e))
    if left:
        raise RuntimeError(f"{left} payloads are still keys into the journal")
    return replaced


# --- recording ------------------------------------------------------------------------------------


async def _histories(client: Client, workflow_id: str, first_run: str) -> list[WorkflowHistory]:
    """The history of each workflow run of the chain that starts with `first_run`."""
    found: list[WorkflowHistory] = []
    run_id: str | None = first_run
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        found.append(history)
        last = history.events[-1]
        run_id = None
        if last.HasField("workflow_execution_continued_as_new_event_attributes"):
            attributes = last.workflow_execution_continued_as_new_event_attributes
            run_id = attributes.new_execution_run_id
    return found


async def _record(address: str, db: str, case: Case) -> tuple[Outcome, list[WorkflowHistory]]:
    setup = Setup(journal=db, model=case.model(), tools=load_tools(case.tools), allow=case.allow)
    store = open_store(db)
    stop = asyncio.Event()
    serving = asyncio.create_task(serve(address, setup, store, stop=stop))
    try:
        client = await connect(address, db)
        job = frozen_job(example_path(case.machine), case.task, case.budgets)
        given = submission(job, halt_lane=case.halt_lane, thrash_limit=case.thrash_limit)
        submitted = wire.dumps(given)
        handle = await client.start_workflow(
            WORKFLOW, submitted, id=job.run_id, task_queue=TASK_QUEUE
        )
        outcome: Outcome = wire.loads(await handle.result())
        first = handle.first_execution_run_id or handle.result_run_id
        assert first is not None
        return outcome, await _histories(client, job.run_id, first)
    finally:
        stop.set()
        await serving
        store.close()


def record(address: str, tmp: Path, case: Case) -> list[Path]:
    """Run `case` on the server at `address`; write its fixture(s); their paths."""
    db = str(tmp / f"{case.name}.db")
    saved = run_workflow.CONTINUE_AT
    if case.continue_at is not None:
        run_workflow.CONTINUE_AT = case.continue_at
    try:
        with environment(case.env):
            outcome, histories = asyncio.run(_record(address, db, case))
    finally:
        run_workflow.CONTINUE_AT = saved
    record_ = outcome.record
    halted = None if record_ is None else record_.halt_reason.value
    if halted != case.expected:
        raise RuntimeError(f"{case.name}: halted {halted} ({outcome}), not {case.expected}")
    table = PayloadTable(db)
    written: list[Path] = []
    try:
        for index, history in enumerate(histories):
            inline_payloads(history, table)
            name = case.name if len(histories) == 1 else f"{case.name}.{index + 1}"
            path = HISTORIES / f"{name}.json"
            fixture = {
                "case": {
                    **case.sidecar(),
                    "workflow_id": history.workflow_id,
                    "run": index + 1,
                    "runs": len(histories),
                    "halted": halted,
                    "examples_dir": str(EXAMPLES_DIR.resolve()),  # as a job names a machine file
                    "temporalio": temporalio.__version__,
                },
                "history": history.to_json_dict(),
            }
            path.write_text(_json(fixture))
            written.append(path)
    finally:
        table.close()
    return written


def _json(fixture: dict[str, Any]) -> str:
    """The case readable, the history compact (most of it is base64 pickles)."""
    case = json.dumps(fixture["case"], indent=1, sort_keys=True)
    history = json.dumps(fixture["history"], separators=(",", ":"), sort_keys=True)
    return f'{{"case": {case},\n"history": {history}}}\n'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("names", nargs="*", help="cases to re-record (default: all)")
    args = parser.parse_args(argv)
    chosen = [c for c in cases() if not args.names or c.name in args.names]
    unknown = set(args.names) - {c.name for c in chosen}
    if unknown:
        parser.error(f"no such case: {', '.join(sorted(unknown))}")
    HISTORIES.mkdir(exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="temporal-histories-") as tmp,
        DevServer(log=Path(tmp) / "server.log") as server,
    ):
        for case in chosen:
            for stale in HISTORIES.glob("*.json"):
                base, _, run = stale.stem.rpartition(".")
                if stale.stem == case.name or (base == case.name and run.isdigit()):
                    stale.unlink()
            for path in record(server.address, Path(tmp), case):
                size = path.stat().st_size
                print(f"{path}: {size:,} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
