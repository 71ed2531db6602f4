"""The runtime's contract over the class of inputs: mutants of the canonical machine (guards
dropped from its edges, failure edges sent back to drafting), random replies and random tool
behaviour, each driven through real runs on a real SQLite journal. Whatever the mutant, no
run breaks the contract: nothing off the allow-list runs, nothing completes without receipts
or grounding, a call that took effect or whose outcome is unknown is never made again unless
its tool says so, and every run replays. `check` never proves `receipts` for a mutant one
of whose runs completed without them (it refutes it where a mutant's edge into done is one
the runtime refuses, which is what lint's HP001/HP003/HP006 report)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm_agent import Receipt, ScriptedModel, Tool, ToolError, ToolRegistry, ToolResult, run
from fsm_agent.checking.checker import check_machine
from fsm_agent.declaration.load import parse_machine
from fsm_agent.review.replay import replay_events
from fsm_agent.runtime.grounding import ground
from fsm_agent.runtime.proposals import FinalAnswer
from fsm_agent.stores.sqlite import SqliteStore

CANONICAL = (Path(__file__).parent.parent / "machines" / "agent_loop.yaml").read_text("utf-8")
EDGES = [n for n, line in enumerate(CANONICAL.splitlines()) if "guards: [" in line]
_seen: dict[str, int] = {"machines": 0, "runs": 0, "violations": 0, "unsound": 0}


def mutant(dropped: set[int], back_to_drafting: bool) -> str:
    """The canonical machine with the guards of the `dropped` edges removed."""
    lines = CANONICAL.splitlines()
    for i in dropped:
        line = lines[EDGES[i % len(EDGES)]]
        start, end = line.index("guards: ["), line.index("]", line.index("guards: [")) + 1
        lines[EDGES[i % len(EDGES)]] = line[:start] + "guards: []" + line[end:]
    text = "\n".join(lines).replace("guards: [], ", "").replace(", guards: []", "")
    if back_to_drafting:
        text = text.replace(
            "{trigger: tool_failed, source: tool_pending, dest: handoff, halt: tool_error}",
            "{trigger: tool_failed, source: tool_pending, dest: drafting}",
        )
    return text.replace("initial: drafting", "initial: drafting\ntools: [lookup, pay, note]")


def registry(calls: list[tuple[str, tuple[Any, ...]]], behaviour: list[str]) -> ToolRegistry:
    """Tools whose results follow `behaviour` (complete, partial, raise, fail, answer-less)."""
    modes = itertools.cycle(behaviour or ["complete"])

    def result(name: str, key: Any) -> ToolResult:
        calls.append((name, key))
        mode = next(modes)
        if mode == "raise":
            raise RuntimeError("connection reset after sending")  # outcome unknown
        if mode == "fail":
            raise ToolError("declined", retryable=True)
        if mode == "partial":
            return ToolResult(receipts=(Receipt(status=206, id=""),), observation="pending")
        return ToolResult(receipts=(Receipt(status=201, id=f"id-{len(calls)}"),),
                          observation={"value": f"v-{len(calls)}"},
                          final=f"v-{len(calls)}" if mode == "complete" else None)  # fmt: skip

    def lookup(q: str = "") -> ToolResult:
        return result("lookup", q)

    def pay(cents: int = 0) -> ToolResult:
        return result("pay", cents)

    def note(text: str = "") -> ToolResult:
        return result("note", text)

    def wire(cents: int = 0) -> ToolResult:
        return result("wire", cents)

    return ToolRegistry((
        Tool("lookup", lookup, side_effect=False),
        Tool("pay", pay),
        Tool("note", note, repeatable=True),
        Tool("wire", wire, privileged=True),  # registered, never allow-listed
    ))  # fmt: skip


replies = st.lists(
    st.one_of(
        st.builds(
            lambda n, a: {"tool_call": {"name": n, "args": a}},
            st.sampled_from(["lookup", "pay", "note", "wire", "nope"]),
            st.sampled_from([{}, {"cents": 5}, {"q": "x"}, {"text": "t"}]),
        ),
        st.builds(lambda v: {"answer": v}, st.sampled_from(["v-1", "v-2", "99999", "done"])),
        st.just("prose"),
    ),
    max_size=8,
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    dropped=st.sets(st.integers(0, 40), max_size=6),
    back=st.booleans(),
    script=replies,
    behaviour=st.lists(
        st.sampled_from(["complete", "partial", "raise", "fail", "bare"]), max_size=5
    ),
)
def test_no_mutant_breaks_the_contract(
    tmp_path_factory: Any, dropped: set[int], back: bool, script: list[Any], behaviour: list[str]
) -> None:
    text = mutant(dropped, back)
    try:
        spec = parse_machine(text, source="mutant")
    except Exception:  # a mutant the loader refuses (a state left without a way out)
        return
    _seen["machines"] += 1
    calls: list[tuple[str, tuple[Any, ...]]] = []
    db = tmp_path_factory.mktemp("m") / "j.db"
    record = run(spec, task="t", model=ScriptedModel(script), tools=registry(calls, behaviour),
                 store=db, handle_signals=False)  # fmt: skip
    _seen["runs"] += 1
    bad = []
    if any(name == "wire" for name, _ in calls):
        bad.append("a tool off the allow-list ran")
    if record.halt_reason == "completed" and record.unreceipted:
        bad.append("completed with a pending side effect")
    made = [c for c in record.tool_calls if c.side_effect]
    seen_done: set[str] = set()
    for c in made:
        key = f"{c.name}{sorted(c.args.items())}"
        if c.name == "pay" and key in seen_done:
            bad.append(f"{key} made again after it took effect")
        complete = all(r.status // 100 == 2 and r.id for r in c.receipts)
        if c.status == "returned" and c.receipts and complete:
            seen_done.add(key)
    store = SqliteStore(db)
    try:
        events = store.events(record.run_id)
        replayed = replay_events(store.get_run(record.run_id), events)
    finally:
        store.close()
    if not replayed.ok:
        bad.append(f"replay: {replayed.summary}")
    last = events[-1].snapshot
    answered = isinstance(last.proposal, FinalAnswer) and record.halt_reason == "completed"
    if answered and not ground(last.proposal.text, last.receipted).grounded:
        bad.append("completed on an ungrounded answer")
    if bad:
        _seen["violations"] += 1
        receipts = next(v for v in check_machine(spec, growth=False).verdicts
                        if v.name == "receipts")  # fmt: skip
        if receipts.proven and any("completed" in b for b in bad):
            _seen["unsound"] += 1
    assert bad == [], (text, script, behaviour, bad)


def test_zz_the_property_test_reports_what_it_drove() -> None:
    seen = _seen
    print(
        f"\ncontract property: {seen['machines']} mutant machines, {seen['runs']} runs,"
        f" {seen['violations']} violations, {seen['unsound']} unsound check verdicts"
    )
    assert _seen["violations"] == 0
    assert _seen["unsound"] == 0
