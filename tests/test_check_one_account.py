"""`check` decides the built-in guards and the runtime's contract with the runtime's own code,
on the snapshot a configuration stands for (`fsm_agent.checking.concrete`).

The facts a configuration names are what each guard and each rule reads: this file says,
once, what each fact means to a reader (a tool call off the allow-list, an answer no
receipted value backs …) and holds the runtime's code, run on the stand-in snapshot, to it,
over every kind of configuration hypothesis draws.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from fsm_agent.checking.concrete import snapshot_of
from fsm_agent.checking.model import Bounds, Config, contract_refusal, guard_value
from fsm_agent.declaration.load import load_machine
from fsm_agent.halt import HaltReason
from fsm_agent.runtime.guards import BUILTIN_GUARDS

BOUNDS = Bounds(max_steps=4, max_retries=2)
SPEC = load_machine("agent_loop")
INTO_DONE = next(t for t in SPEC.transitions if t.halt is HaltReason.COMPLETED)
INTO_TOOL = next(t for t in SPEC.transitions if t.dest == "tool_pending")

configs = st.builds(
    Config,
    state=st.just("drafting"),
    steps=st.integers(0, BOUNDS.max_steps),
    retries=st.integers(0, BOUNDS.max_retries + 1),
    lane_local=st.booleans(),
    kind=st.sampled_from([None, "tool_call", "answer", "handoff", "rejected"]),
    allowed=st.booleans(),
    privileged=st.booleans(),
    thrash=st.booleans(),
    grounded=st.booleans(),
    empty=st.booleans(),
    refused=st.booleans(),
    tool=st.sampled_from([None, "returned", "failed", "timed_out"]),
    complete=st.booleans(),
    final=st.booleans(),
    retryable=st.booleans(),
    pending=st.booleans(),
    evidence=st.booleans(),
    approval=st.booleans(),
    approved=st.booleans(),
)


def meaning(name: str, c: Config) -> bool:
    """What each built-in guard means on the facts, as the README's guard table says it."""
    call = c.kind == "tool_call"
    returned = c.tool == "returned"
    return {
        "within_budget": True,
        "budget_tripped": False,
        "tool_allowed": call and c.allowed,
        "privileged_cleared": call and (not c.privileged or c.lane_local),
        "halt_lane_local": c.lane_local,
        "receipts_complete": returned and c.complete,
        "goal_satisfied": returned and c.complete and c.final,
        "evidence_complete": c.evidence,
        "answer_grounded": c.kind == "answer" and c.grounded,
        "side_effects_receipted": not c.pending,
        "thrashing": call and c.thrash,
        "retries_left": c.retries < BOUNDS.max_retries,
        "error_retryable": c.tool == "failed" and c.retryable,
        "reply_empty": c.kind == "rejected" and c.empty,
        "repair_refused": c.kind == "rejected" and c.refused,
        "judge_agrees": True,  # free in check; the stand-in asks no judge
    }[name]


@settings(max_examples=600, deadline=None)
@given(configs)
def test_every_built_in_guard_is_the_runtimes_own_predicate_on_the_stand_in(c: Config) -> None:
    for name in BUILTIN_GUARDS:
        assert guard_value(name, c, BOUNDS) is meaning(name, c), (name, c)


@settings(max_examples=600, deadline=None)
@given(configs)
def test_the_contract_check_explores_is_the_runtimes_refusal_on_the_stand_in(c: Config) -> None:
    done = contract_refusal(c, INTO_DONE, SPEC)
    if c.pending:
        assert done == ("runtime:receipts", HaltReason.SIDE_EFFECT_UNKNOWN)
    else:
        backed = (
            c.grounded if c.kind == "answer" else (c.tool == "returned" and c.complete and c.final)
        )
        assert done == (None if backed else ("runtime:grounded", HaltReason.UNGROUNDED_ANSWER))
    tool = contract_refusal(c, INTO_TOOL, SPEC)
    if c.kind != "tool_call":
        assert tool is None
    elif not c.allowed:
        assert tool == ("runtime:allow_list", HaltReason.TOOL_REFUSED)
    elif c.privileged and not c.lane_local:
        assert tool == ("runtime:privileged", HaltReason.HALT_PATH_REFUSED)
    elif c.approval and not c.approved:  # a call a person must approve, not approved
        assert tool == ("runtime:approval", HaltReason.APPROVAL_REQUIRED)
    else:
        assert tool is None  # repeats need the calls' identity: `repeat_refusals`


def test_the_stand_in_is_a_snapshot_the_runtime_could_journal() -> None:
    from fsm_agent.journal import serde
    from fsm_agent.runtime.snapshot import Snapshot

    c = Config("drafting", 2, 1, True, kind="answer", grounded=True, evidence=True)
    snap = snapshot_of(c, BOUNDS)
    assert snap.meters.steps_used == 2
    assert snap.budgets.max_steps == BOUNDS.max_steps

    assert serde.structure(serde.unstructure(snap), Snapshot) == snap  # as journaled
