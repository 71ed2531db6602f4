"""Temporal workers killed for real (SIGKILL), another worker finishing the run.

Each test starts a Temporal development server (`DevServer`), writes the tools module and
the worker program of `tests.temporal_lab` into `tmp_path`, starts worker process A,
submits one run from the test process, SIGKILLs A at a chosen point of the run (found by
watching the ledger a tool writes, or the run's journal), starts worker B, and awaits the
run's outcome. Then the journal must hold every transition exactly once, and `fsm-agent
verify` / `fsm-agent replay` must prove the run as a local run's.

The workflow learns that A is gone only when the call A was making misses its heartbeat
(`fsm_agent.temporal.activities.HEARTBEAT_S`, 10 s) and the workflow task sticky to A times
out (5 s): each test takes some 15-20 s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsm_agent.halt import HaltReason
from fsm_agent.temporal.activities import HEARTBEAT_S
from fsm_agent.temporal.service import DevServer
from tests.temporal_lab import Lab, assert_charge_unknown, assert_contiguous, assert_proven, halted

pytestmark = [pytest.mark.slow, pytest.mark.temporal]

#: How long the run may take once A is dead: the heartbeat timeout, the sticky workflow
#: task's timeout, B's start and a loaded 2-core machine's slack.
AFTER_KILL_S = 90.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[DevServer]:
    with DevServer(log=tmp_path / "temporal.log") as dev:
        yield dev


def test_sigkill_during_side_effecting_tool_call_never_repeats_it(
    tmp_path: Path, server: DevServer
) -> None:
    replies = [{"tool_call": {"name": "charge", "args": {"amount": 42}}}, {"answer": "ch_42"}]
    with Lab(tmp_path, replies) as here:
        a = here.worker(server.address, "charge", "a", LAB_CHARGE_SLEEP_S="5")
        run_id = asyncio.run(here.submit(server.address, "Charge 42 and confirm the charge."))
        here.wait_for("charge is called", lambda: len(here.lines(here.ledger)) == 1, 60)
        here.kill(a)  # charge has taken effect; its result (and receipt) die with A
        killed = time.monotonic()
        here.worker(server.address, "charge", "b", LAB_CHARGE_SLEEP_S="5")
        outcome = asyncio.run(here.outcome(server.address, run_id, AFTER_KILL_S))
        lost_after_s = time.monotonic() - killed

        # exactly one side effect, made by A: B never re-issued the call
        assert here.lines(here.ledger) == [f"{a.pid} charged 42"], here.lines(here.ledger)
        assert lost_after_s > HEARTBEAT_S / 2  # A's loss is seen when its heartbeat is missed
        record = halted(outcome)
        # The lost call reaches the runtime as the call's timeout (`tool_timed_out`), its
        # effect unknown. agent_loop declares `tool_timed_out` from tool_pending to
        # budget_exhausted with halt `tool_timeout`: the run ends there, and the model is
        # never asked again, so charge cannot even be proposed a second time (had it been,
        # the contract's `unknown_effect` rule would halt `side_effect_unknown`). The record
        # names the unreceipted charge: a person checks the ledger, not the runtime. (Not
        # killed, this very script ends `completed`, grounded by charge's receipt.)
        assert_charge_unknown(record)
        assert record.steps_used == 1
        assert len(record.tool_calls) == 1, record.tool_calls  # the lost charge, no other

        calls = here.called()
        assert [c for c in calls if not c.endswith("serving")] == [
            f"{a.pid} model 1",
            f"{a.pid} charge 42",
        ], calls
        events = here.events(run_id)
        assert_contiguous(events, record)
        assert [e.trigger for e in events if e.kind == "transition"][-1] == "tool_timed_out"
        assert_proven(here, run_id, record.halt_reason)


def test_sigkill_between_steps_loses_no_transition(tmp_path: Path, server: DevServer) -> None:
    replies = [{"tool_call": {"name": "lookup", "args": {"q": "lab password"}}},
               {"answer": "swordfish"}]  # fmt: skip
    with Lab(tmp_path, replies) as here:
        # each model call takes 4 s: A is killed inside step 2's, after step 1's read tool
        # returned and its transitions were committed
        a = here.worker(server.address, "lookup", "a", LAB_MODEL_SLEEP_S="4")
        task = "Find the lab password in the lookup tool."
        run_id = asyncio.run(here.submit(server.address, task))

        here.wait_for("step 2's model call", lambda: f"{a.pid} model 2" in here.called(), 60)
        before = here.events(run_id)  # committed before the call began
        assert [e.trigger for e in before] == [None, "tool_call", "tool_returned", "collected"]
        assert before[-1].dest == "drafting"
        here.kill(a)
        assert here.events(run_id) == before  # A wrote nothing more
        b = here.worker(server.address, "lookup", "b", LAB_MODEL_SLEEP_S="0")
        outcome = asyncio.run(here.outcome(server.address, run_id, AFTER_KILL_S))

        record = halted(outcome)
        assert record.halt_reason is HaltReason.COMPLETED, record
        assert record.answer == "swordfish"
        assert record.steps_used == 2

        events = here.events(run_id)
        # 0 transitions lost: what A committed is there unchanged, B went on from its last
        # event (seq contiguous from 0 to the halt, each transition leaving the state the one
        # before entered)
        assert events[: len(before)] == before
        assert [e.trigger for e in events[len(before) :]] == ["answer"]  # B: step 2
        assert_contiguous(events, record)
        # B made step 2's model call again (a read: Temporal may ask it again), nothing of
        # step 1: the read tool ran once, in A
        calls = [c for c in here.called() if not c.endswith("serving")]
        assert calls == [
            f"{a.pid} model 1",
            f"{a.pid} lookup lab password",
            f"{a.pid} model 2",
            f"{b.pid} model 2",
        ], calls
        assert_proven(here, run_id, record.halt_reason)
