"""What every simulated run must satisfy, checked from its journal (and, for the calls a
crash kept out of the journal, from the world's ledger of calls actually made).

1. `named_halt`: the run halted, for a named reason, with its record.
2. `replay`: replaying its journal re-decides every transition the same way
   (`fsm_agent.review.replay`).
3. `chain`: its hash chain verifies (`fsm_agent.journal.chain.verify_run`).
4. `no_reissue`: no call of a tool that has a side effect and is not idempotent was made
   more often than the model proposed it (counted per tool and arguments, across a crash
   and its resume): a resume never re-issues one whose outcome it does not know.
5. `receipts`: a `completed` run has complete receipts from some call, and every call with
   a side effect it made is settled: its last journaled outcome returned complete
   receipts, and (for a tool that is not idempotent) none of its results was lost.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

import attrs

from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.halt import HaltReason
from fsm_agent.journal.chain import verify_chain
from fsm_agent.journal.store import Event, RunRow, Store
from fsm_agent.review.replay import replay_events
from fsm_agent.runtime.proposals import ToolCall
from fsm_agent.runtime.receipts import receipts_complete
from fsm_agent.runtime.snapshot import ToolOutcome
from fsm_agent.runtime.tool_schema import ArgumentsRefused
from fsm_agent.runtime.tools import ToolRegistry, tool_arguments
from fsm_agent.simulation.world import canonical

#: The invariants, in the order they are checked and reported.
INVARIANTS = ("named_halt", "replay", "chain", "no_reissue", "receipts")


@attrs.frozen
class Violation:
    """One invariant a run broke, and how."""

    invariant: str
    detail: str


def check_run(
    journal: Store,
    run_id: str,
    spec: MachineSpec,
    ledger: Sequence[tuple[str, str]],
    tools: ToolRegistry,
) -> tuple[RunRow, list[Violation]]:
    """The run as journaled, and the invariants it breaks (none: it passed), `ledger`
    being the calls made."""
    run, links, head = journal.chain(run_id)
    events = journal.events(run_id)
    found = []
    if run.status != "halted" or run.halt_reason is None or run.record is None:
        found.append(Violation("named_halt", f"the run is {run.status!r}, with no named halt"))
    replay = replay_events(run, events)
    if not replay.ok:
        found.append(Violation("replay", replay.summary))
    chain = verify_chain(run, links, head, key=journal.chain_key)
    if not chain.ok:
        first = chain.findings[0] if chain.findings else None
        why = f"seq {first.seq}: {first.detail}" if first else "; ".join(chain.notes)
        found.append(Violation("chain", why or "the chain does not verify"))
    found += reissued(spec, events, ledger, tools)
    if run.halt_reason is HaltReason.COMPLETED:
        found += unreceipted(run, events, ledger, tools)
    return run, found


def _key(tools: ToolRegistry, name: str, args: dict[str, object]) -> tuple[str, str] | None:
    """A call as the tool receives it (its arguments decoded as the runtime decodes them),
    or None for one the runtime refuses before it is made."""
    tool = tools.get(name)
    if tool is None:
        return None
    try:
        return name, canonical(tool_arguments(tool, args))
    except ArgumentsRefused:
        return None


def _unsafe(tools: ToolRegistry, name: str) -> bool:
    tool = tools.get(name)
    return tool is not None and tool.side_effect and not tool.idempotent


def reissued(
    spec: MachineSpec,
    events: Sequence[Event],
    ledger: Sequence[tuple[str, str]],
    tools: ToolRegistry,
) -> list[Violation]:
    """`no_reissue`: calls made against calls proposed (each journaled entry into a tool
    state with the model's tool call in its snapshot allows one, an approval's too),
    counting the calls made both as the journal has them and as the world saw them (the
    ledger: a crash may have kept a call's result out of the journal)."""
    proposed: Counter[tuple[str, str]] = Counter()
    for event in events:
        proposal = event.snapshot.proposal
        # a transition into a tool state, or a person's approval that lets the call run
        entering = event.kind in ("transition", "decided") and event.dest != event.source
        if entering and spec.state(event.dest).action == "tool" and isinstance(proposal, ToolCall):
            key = _key(tools, proposal.name, dict(proposal.args))
            if key is not None:
                proposed[key] += 1
    journaled = Counter(
        key
        for key in (_key(tools, o.name, dict(o.args)) for o in made_calls(events))
        if key is not None and _unsafe(tools, key[0])
    )
    seen = Counter(call for call in ledger if _unsafe(tools, call[0]))
    made = journaled | seen  # the larger count of each
    return [
        Violation("no_reissue", f"{_shown((name, args))} was called {n} time(s), proposed"
                  f" {proposed[(name, args)]}: a call with a side effect was re-issued")
        for (name, args), n in sorted(made.items())
        if n > proposed[(name, args)]
    ]  # fmt: skip


def made_calls(events: Sequence[Event]) -> list[ToolOutcome]:
    """The journaled outcomes of calls actually made (the meter counted them; a call
    refused before it was made is not one)."""
    made, counted = [], 0
    for event in events:
        meters = event.snapshot.meters
        facts = event.facts
        if facts is not None and facts.tool is not None and meters.tool_calls > counted:
            made.append(facts.tool)
        counted = max(counted, meters.tool_calls)
    return made


def unreceipted(
    run: RunRow, events: Sequence[Event], ledger: Sequence[tuple[str, str]], tools: ToolRegistry
) -> list[Violation]:
    """`receipts`, for a run that halted `completed`."""
    outcomes = made_calls(events)
    found = []
    if not any(o.status == "returned" and receipts_complete(o.receipts) for o in outcomes):
        found.append(Violation("receipts", "completed without a call with complete receipts"))
    journaled: dict[tuple[str, str], list[ToolOutcome]] = {}
    for outcome in outcomes:
        key = _key(tools, outcome.name, dict(outcome.args))
        if key is not None:
            journaled.setdefault(key, []).append(outcome)
    for key, n in sorted(Counter(c for c in ledger if _side_effect(tools, c[0])).items()):
        seen = journaled.get(key, [])
        last = seen[-1] if seen else None
        if last is None or last.status != "returned" or not receipts_complete(last.receipts):
            found.append(Violation("receipts", f"completed, but {_shown(key)} has no complete"
                                   " receipts as its last journaled outcome"))  # fmt: skip
        elif _unsafe(tools, key[0]) and len(seen) < n:
            found.append(Violation("receipts", f"completed, but a result of {_shown(key)}"
                                   " was never journaled (lost in a crash)"))  # fmt: skip
    return found


def _side_effect(tools: ToolRegistry, name: str) -> bool:
    tool = tools.get(name)
    return tool is not None and tool.side_effect


def _shown(key: tuple[str, str]) -> str:
    name, args = key
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in json.loads(args).items())})"
