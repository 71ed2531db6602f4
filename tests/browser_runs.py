"""Journaled runs for the report and browser tests, some carrying hostile model text."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest

from fsm_agent import ScriptedModel, load_tools, run
from fsm_agent.declaration.load import load_machine
from fsm_agent.journal.store import Event, RunRow
from fsm_agent.review.replay import load_run
from fsm_agent.review.svg_render import find_renderer

#: Markup a model might send: it must reach the page as text and never run.
SCRIPT = "<script>window.__pwned=1</script>"
IMG = "<img src=x onerror=alert(1)>"
HOSTILE = f"{SCRIPT}</table></td>{IMG}"

#: The report draws its diagram with graphviz-pure (a dependency, where it has a wheel) or,
#: without it, Graphviz's `dot`: the name is older than the choice.
needs_dot = pytest.mark.skipif(
    find_renderer() is None, reason="no SVG renderer: pip install graphviz-pure"
)


def journaled(
    tmp_path: Path,
    replies: list[object],
    *,
    machine: str = "agent_loop",
    task: str = "Find the refund window",
    run_id: str | None = None,
) -> tuple[RunRow, list[Event]]:
    """Run `machine` on scripted `replies` with the stop_conditions search tool; the run and
    its events as the journal holds them."""
    db = tmp_path / "journal.db"
    record = run(
        machine,
        task=task,
        model=ScriptedModel(replies),
        tools=load_tools("fsm_agent.examples.stop_conditions.tools"),
        allow=("search",),
        store=db,
        record_path=tmp_path / "halt-contract.json",
        run_id=run_id,
    )
    return load_run(db, record.run_id)


def hostile_run(tmp_path: Path) -> tuple[RunRow, list[Event]]:
    """A handoff whose task, prose reply, tool-call args and handoff reason are all markup."""
    replies: list[object] = [
        f"Sure! {HOSTILE}",
        {"tool_call": {"name": "search", "args": {"q": HOSTILE}}},
        {"handoff": {"why": f"needs a human {HOSTILE}"}},
    ]
    return journaled(tmp_path, replies, task=f"Find {HOSTILE}")


def completed_run(tmp_path: Path) -> tuple[RunRow, list[Event]]:
    """A search hit with a receipt: halts completed."""
    replies: list[object] = [{"tool_call": {"name": "search", "args": {"q": "refund window"}}}]
    return journaled(tmp_path, replies)


def hostile_names_run(tmp_path: Path) -> tuple[RunRow, list[Event]]:
    """Markup in the run id, the machine name and a state name: they reach DOT and SVG."""
    text = (
        load_machine("agent_loop")
        .text.replace("name: agent_loop", f"name: 'evil {SCRIPT}'")
        .replace("tool_pending", "'tool <img src=x onerror=alert(2)>'")
    )
    machine = tmp_path / "evil.yaml"
    machine.write_text(text, encoding="utf-8")
    replies: list[object] = [{"tool_call": {"name": "search", "args": {"q": "refund window"}}}]
    # A run id outside today's grammar, as a journal from before it may hold one.
    with mock.patch("fsm_agent.runtime.worker.check_run_id", lambda value, **_: value):
        return journaled(tmp_path, replies, machine=str(machine), run_id=f"r1</svg>{SCRIPT}")
