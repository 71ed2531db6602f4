"""Replay's shortcuts (guard comparisons found by identity, the plain-JSON check of a
reply) never accept what the exact path reports: every edit of a journaled run (a guard's
result, a budget check, a trigger, a snapshot field, a reply) gets the verdict the exact
path gives it, and the edits that change a decision are caught at the edited event."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fsm_agent.review.redecide as redecide_module
import fsm_agent.review.step_report as step_report
import fsm_agent.runtime.proposals as proposals
from fsm_agent.journal.store import Event, GuardResult, RunRow
from fsm_agent.review.replay import ReplayReport, replay_events
from fsm_agent.stores.sqlite import SqliteStore
from tests.lab import LOOKUP, MISS, lab_run

Edit = Callable[[Event], Event | None]


def _flip(results: tuple[GuardResult, ...]) -> tuple[GuardResult, ...] | None:
    if not results:
        return None
    first = results[0]
    return (GuardResult(first.transition, first.guard, not first.result), *results[1:])


def _guard(e: Event) -> Event | None:
    flipped = _flip(e.guards)
    return None if flipped is None else attrs.evolve(e, guards=flipped)


def _check(e: Event) -> Event | None:
    flipped = _flip(e.check)
    return None if flipped is None else attrs.evolve(e, check=flipped)


def _trigger(e: Event) -> Event | None:
    other = {"tool_call": "answer", "tool_returned": "tool_failed", "collected": "tool_call"}
    return None if e.trigger not in other else attrs.evolve(e, trigger=other[e.trigger])


def _steps(e: Event) -> Event | None:
    meters = attrs.evolve(e.snapshot.meters, steps_used=e.snapshot.budgets.max_steps + 1)
    return attrs.evolve(e, snapshot=attrs.evolve(e.snapshot, meters=meters))


def _allowlist(e: Event) -> Event | None:
    return attrs.evolve(e, snapshot=attrs.evolve(e.snapshot, allowlist=()))


def _reply(e: Event) -> Event | None:
    if e.facts is None or e.facts.action != "model":
        return None
    reply = {"tool_call": {"name": "lookup", "args": {"q": float("nan")}}}
    return attrs.evolve(e, facts=attrs.evolve(e.facts, reply=reply))


def _reply_args(e: Event) -> Event | None:
    if e.facts is None or e.facts.action != "model" or not isinstance(e.facts.reply, dict):
        return None
    return attrs.evolve(e, facts=attrs.evolve(e.facts, reply={"answer": "swordfish"}))


EDITS: dict[str, Edit] = {
    "guard": _guard,
    "check": _check,
    "trigger": _trigger,
    "steps": _steps,
    "allowlist": _allowlist,
    "reply": _reply,
    "reply_args": _reply_args,
}


@pytest.fixture(scope="module")
def journaled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunRow, list[Event]]]:
    """A run that loops (the same guards to the same results, again and again), then
    completes."""
    tmp = tmp_path_factory.mktemp("edits")
    store = SqliteStore(tmp / "j.db")
    try:
        record = lab_run(tmp, [MISS, MISS, MISS, LOOKUP, {"answer": "swordfish"}], store=store)
        yield store.get_run(record.run_id), store.events(record.run_id)
    finally:
        store.close()


def _exact(run: RunRow, events: list[Event], monkeypatch: pytest.MonkeyPatch) -> ReplayReport:
    """The replay with every shortcut off: each comparison built afresh, each reply walked."""
    with monkeypatch.context() as m:
        m.setattr(
            redecide_module.Replayer,
            "compare",
            lambda self, rec, now: self._compare(tuple(rec), tuple(now)),
        )
        m.setattr(proposals, "_plain_size", lambda value, depth: -1)
        return replay_events(run, events)


def _edited(events: list[Event]) -> Iterable[tuple[str, int, list[Event]]]:
    for name, edit in EDITS.items():
        for i, event in enumerate(events):
            changed = edit(event)
            if changed is not None:
                yield name, event.seq, [*events[:i], changed, *events[i + 1 :]]


def test_every_edit_gets_the_exact_paths_verdict(
    journaled: tuple[RunRow, list[Event]], monkeypatch: pytest.MonkeyPatch
) -> None:
    run, events = journaled
    assert replay_events(run, events).ok
    caught: dict[str, int] = {}
    for name, seq, edited in _edited(events):
        fast = replay_events(run, edited)
        assert fast == _exact(run, edited, monkeypatch), (name, seq)
        if not fast.ok and fast.steps[-1].seq == seq:
            caught[name] = caught.get(name, 0) + 1
    # every kind of edit changes some decision, and is caught at the event it edits
    assert set(caught) == set(EDITS), caught


#: Every edit's verdict, as replay gave it before its shortcuts: [edit, edited seq,
#: counterfactual (max_steps 3), ok, seq of the last step, its verdict, summary].
VERDICTS = Path(__file__).with_name("replay_edits_verdicts.json")


def test_every_edit_gets_the_verdict_it_always_got(journaled: tuple[RunRow, list[Event]]) -> None:
    run, events = journaled
    got = []
    for budgets in (None, {"max_steps": 3}):
        for name, seq, edited in _edited(events):
            report = replay_events(run, edited, budgets=budgets)
            last = report.steps[-1]
            summary = report.summary.replace(run.run_id, "<run>")
            got.append([name, seq, budgets is not None, report.ok, last.seq, last.verdict, summary])
    assert got == json.loads(VERDICTS.read_text(encoding="utf-8"))


def test_a_flipped_guard_late_in_a_loop_is_caught(journaled: tuple[RunRow, list[Event]]) -> None:
    """The same guards came out the same on every earlier lap (their comparison is cached):
    the edited one still diverges."""
    run, events = journaled
    i = max(i for i, e in enumerate(events) if e.trigger == "tool_call" and e.guards)
    edited = [*events[:i], _guard(events[i]), *events[i + 1 :]]
    assert all(e is not None for e in edited)
    report = replay_events(run, edited)  # type: ignore[arg-type]
    assert not report.ok
    assert report.steps[-1].seq == events[i].seq
    assert report.steps[-1].verdict == "diverged"
    assert "guard results differ" in report.summary


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=5)
    | st.sampled_from([2**14284, 2**14283, -(2**14284), float("inf"), b"x", 1j]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3) | st.integers(0, 3), inner, max_size=4)
    ),
    max_leaves=30,
)


def _nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


@settings(max_examples=400, deadline=None)
@given(_JSON)
def test_json_problem_shortcut_matches_the_walk(value: Any) -> None:
    assert proposals.json_problem(value) == proposals._walk_problem(value)


@pytest.mark.parametrize("depth", [15, 16, 17, 63, 64, 65, 200])
@pytest.mark.parametrize("leaf", [1, "x", float("nan"), None])
def test_json_problem_shortcut_matches_the_walk_when_deep(depth: int, leaf: Any) -> None:
    value = _nested(depth, leaf)
    assert proposals.json_problem(value) == proposals._walk_problem(value)


def test_json_problem_shortcut_on_sizes_and_subclasses() -> None:
    class Text(str):
        pass

    limit = proposals.MAX_REPLY_CHARS
    cases: list[Any] = [
        "x" * (limit - 1),
        "x" * limit,
        ["x" * (limit - 2)],
        ["x" * (limit - 1)],
        {"k" * 10: "v" * (limit - 13)},
        {"k" * 10: "v" * (limit - 12)},
        list(range(limit)),
        {Text("k"): 1},
        [Text("x")],
        {1: "x"},
    ]
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    cases.append(cyclic)
    for value in cases:
        assert proposals.json_problem(value) == proposals._walk_problem(value)
    assert proposals.json_problem(["x" * (limit - 2)]) is None  # 1 + 1 + its characters
    assert proposals.json_problem(["x" * (limit - 1)]) is not None


def test_a_matching_steps_report_is_the_one_built_by_name(
    journaled: tuple[RunRow, list[Event]],
) -> None:
    """The common case's report (built positionally) holds each field where it belongs."""
    run, events = journaled
    report = replay_events(run, events)
    matched = [s for s in report.steps if s.verdict == "match" and s.recomputed_dest]
    assert len(matched) > 10
    by_seq = {e.seq: e for e in events}
    for step in matched:
        event = by_seq[step.seq]
        base = step_report.step_base(event, event.snapshot)
        expected = step_report.StepReport(
            **base,
            verdict="match",
            guards=step.guards,
            recomputed_dest=step.recomputed_dest,
            recomputed_halt=step.recomputed_halt,
        )
        assert step == expected
        assert step.recomputed_dest == event.dest
