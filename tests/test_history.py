"""The model's history (`fsm_agent.runtime.history`): a read-only view of the notes so far, that
later
notes never change and that no adapter can change, at a cost that does not grow with it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from fsm_agent import Prompt
from fsm_agent.adapters.openai_wire import build_messages
from fsm_agent.runtime.history import CHUNK, History, HistoryView
from tests.lab import LOOKUP, MISS, lab_run


def _note(n: int) -> dict[str, Any]:
    return {"role": "tool", "name": "lookup", "observation": {"row": n, "seen": [n, (n, "t")]}}


def test_a_view_is_the_notes_so_far_and_later_notes_never_show_in_it() -> None:
    history = History()
    notes = [_note(n) for n in range(CHUNK * 2 + 5)]
    views = []
    for note in notes:
        views.append(history.view())
        history.append(note)
    for n, view in enumerate(views):
        assert len(view) == n
        assert list(view) == notes[:n]
    assert history.view() == notes
    assert history.view()[CHUNK + 3] == notes[CHUNK + 3]
    assert history.view()[-1] == notes[-1]
    assert history.view()[2:5] == tuple(notes[2:5])
    with pytest.raises(IndexError):
        history.view()[len(notes)]


def test_what_a_reader_does_to_a_note_changes_nothing() -> None:
    history = History([_note(1)])
    note = _note(1)
    history.append(note)
    note["observation"]["row"] = 99  # the appender's own dict: the note was taken as it was
    view = history.view()
    first = view[0]
    first["observation"]["row"] = 42
    first["role"] = "assistant"
    assert view[0] == _note(1)
    assert history.view()[1] == _note(1)
    assert not hasattr(view, "append")
    with pytest.raises(TypeError):
        view[0] = {}  # type: ignore[index]


def test_a_note_reads_back_exactly_as_it_was_appended() -> None:
    """Tuples stay tuples, ints stay ints: an adapter sees what it was always shown."""
    note = {"role": "assistant", "content": {"tool_call": {"name": "x", "args": {"t": (1, 2.5)}}}}
    history = History([note])
    (back,) = history.view()
    assert back == note
    assert type(back["content"]["tool_call"]["args"]["t"]) is tuple


def test_the_openai_wire_sees_the_same_messages_from_a_view_as_from_a_tuple() -> None:
    notes = [
        {"role": "assistant", "content": {"tool_call": {"name": "lookup", "args": {"q": "a"}}}},
        {"role": "tool", "name": "lookup", "observation": "no", "receipts": [],
         "receipts_complete": False},
        {"role": "runtime", "content": "reply rejected: not JSON"},
    ]  # fmt: skip
    history = History(notes)
    as_view = Prompt(task="t", step=3, max_steps=8, tools=("lookup",), history=history.view())
    as_tuple = Prompt(task="t", step=3, max_steps=8, tools=("lookup",), history=tuple(notes))
    assert build_messages(as_view) == build_messages(as_tuple)
    assert as_view.render() == as_tuple.render()


def test_handing_out_a_view_costs_the_same_however_long_the_history() -> None:
    short, long = History(), History()
    for n in range(10):
        short.append(_note(n))
    for n in range(50_000):
        long.append(_note(n))

    def cost(history: History) -> float:
        start = time.perf_counter()
        for _ in range(20_000):
            history.view()
        return time.perf_counter() - start

    assert cost(long) < 3 * cost(short) + 0.01


def test_each_model_call_is_shown_a_view_of_the_notes_before_it(tmp_path: Path) -> None:
    prompts: list[Prompt] = []
    replies = [MISS, LOOKUP, {"answer": "swordfish"}]

    def model(prompt: Prompt) -> Any:
        prompts.append(prompt)
        if prompt.history:
            prompt.history[0]["role"] = "scribbled"  # a copy: the run's note is untouched
        return replies[prompt.step - 1]

    record = lab_run(tmp_path, model)
    assert record.halt_reason.value == "completed"
    assert [len(p.history) for p in prompts] == [0, 2, 4]
    assert all(isinstance(p.history, HistoryView) for p in prompts)
    assert prompts[1].history[0]["role"] == "assistant"
    assert prompts[2].history[:2] == prompts[1].history[:2]
    assert prompts[2].history[3]["receipts_complete"] is True
