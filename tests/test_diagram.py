"""Diagrams: valid (checked by Graphviz itself), deterministic, and a run's path highlighted."""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fsm_agent import ScriptedModel, load_tools, run
from fsm_agent.cli.main import cli
from fsm_agent.declaration.load import load_machine, parse_machine
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.review import svg_render
from fsm_agent.review.diagram import GraphvizMissing, export_diagram, run_path, to_dot, to_mermaid
from fsm_agent.review.mermaid import NOT_TAKEN, TAKEN
from fsm_agent.stores.sqlite import SqliteStore

MISS = {"tool_call": {"name": "lookup", "args": {"q": "again"}}}
LINK = re.compile(r"\s+\S+ (-->|---|-\.->)")
needs_dot = pytest.mark.skipif(
    shutil.which("dot") is None, reason="Graphviz missing: apt-get install graphviz"
)


def looping_run(tmp_path: Path) -> tuple[str, Path]:
    db = tmp_path / "j.db"
    record = run(
        "agent_loop",
        task="loop",
        model=ScriptedModel([MISS] * 12),
        tools=load_tools("fsm_agent.examples.halt_lab.tools"),
        allow=("lookup", "slow_lookup", "hang"),
        store=db,
        record_path=tmp_path / "r.json",
    )
    return record.run_id, db


def links(text: str) -> list[str]:
    """The Mermaid text's links in order (`linkStyle` counts them from 0)."""
    return [line.strip() for line in text.splitlines() if LINK.match(line)]


def styled(text: str, style: str) -> set[int]:
    """The links `linkStyle` gives `style`."""
    found: set[int] = set()
    for line in text.splitlines():
        if line.strip().startswith("linkStyle ") and line.strip().endswith(style):
            found.update(int(n) for n in line.split()[1].split(","))
    return found


def test_mermaid_lists_every_transition_terminal_reasons_and_budgets() -> None:
    spec = load_machine("agent_loop")
    text = to_mermaid(spec)
    assert text.splitlines()[3] == "flowchart LR"
    assert (
        'drafting -->|"answer<br>[side_effects_receipted,<br>answer_grounded, judge_agrees]'
        '<br>/ completed"| done'
    ) in text
    assert 'tool_pending -->|"tool_timed_out<br>/ tool_timeout"| budget_exhausted' in text
    assert 'budget_exhausted[["budget_exhausted<br>halts as max_steps, wall_clock' in text
    assert "budgets: max_steps 8, wall_clock_ms 15000" in text
    assert "class done,budget_exhausted,handoff terminal" in text
    loops = sum(t.source == t.dest for t in spec.transitions)
    assert loops == 2  # on drafting: answer and rejected, each retried
    # the start, each transition, and a self-loop twice: out to its label and back
    assert len(links(text)) == 1 + len(spec.transitions) + loops
    assert "linkStyle" not in text  # no run, no path


@pytest.mark.parametrize("fmt", ["mermaid", "dot"])
def test_output_is_byte_identical_for_the_same_machine(fmt: str) -> None:
    spec = load_machine("agent_loop")
    assert export_diagram(spec, fmt, None) == export_diagram(load_machine("agent_loop"), fmt, None)  # type: ignore[arg-type]


@needs_dot
@pytest.mark.parametrize("machine", ["agent_loop", "examples/payments_retry/payments.yaml"])
def test_dot_is_accepted_by_graphviz_and_svg_is_well_formed(machine: str) -> None:
    spec = load_machine(machine)
    done = subprocess.run(
        ["dot", "-Tsvg"], input=to_dot(spec), capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    root = ET.fromstring(export_diagram(spec, "svg").encode())  # noqa: S314 - our own SVG
    assert root.tag.endswith("svg")
    texts = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
    assert "drafting" in texts


def test_a_run_path_is_highlighted_with_steps_counts_and_the_halt(tmp_path: Path) -> None:
    run_id, db = looping_run(tmp_path)
    spec = load_machine("agent_loop")
    store = SqliteStore(db)
    try:
        path = run_path(spec, run_id, store.events(run_id))
    finally:
        store.close()
    assert path.halt_state == "budget_exhausted"
    tool_call = _edge(spec, "drafting", "tool_pending", "tool_call")
    assert path.edges[tool_call.index] == tuple(range(1, 9))
    mermaid = to_mermaid(spec, path)
    taken = 'drafting -->|"tool_call<br>taken x8 (steps 1-8)"| tool_pending'
    assert taken in links(mermaid)
    blue = styled(mermaid, TAKEN)
    assert {links(mermaid)[i] for i in blue} == {
        taken,
        'tool_pending -->|"tool_returned<br>taken x8 (steps 1-8)"| awaiting_receipts',
        'awaiting_receipts -->|"collected<br>taken x8 (steps 1-8)"| drafting',
        'drafting -.->|"budget [budget_tripped]<br>/ the tripped meter<br>taken (step 8)"|'
        " budget_exhausted",
    }
    assert styled(mermaid, NOT_TAKEN) == set(range(1, len(links(mermaid)))) - blue
    assert "class budget_exhausted halted" in mermaid
    assert f"run {run_id}: halt max_steps" in mermaid
    dot = to_dot(spec, path)
    assert 'label="budget_exhausted\\nhalt: max_steps"' in dot
    assert dot.count("penwidth=2.5") == 4  # the four edges the run took


def _edge(spec: MachineSpec, source: str, dest: str, trigger: str, halt: str | None = None) -> Any:
    return next(
        t
        for t in spec.transitions
        if (t.source, t.dest, t.trigger) == (source, dest, trigger)
        and (halt is None or t.halt == halt)
    )


@pytest.mark.parametrize(
    ("replies", "halt", "edge"),
    [
        # three edges from drafting into handoff on `rejected`: only schema_fail was taken
        (["prose", "more prose", "still prose"], "schema_fail", ("rejected", ())),
        # two edges into handoff on `tool_call`: only tool_refused was taken
        (
            [{"tool_call": {"name": "ghost", "args": {}}}],
            "tool_refused",
            ("tool_call", ("not tool_allowed",)),
        ),
    ],
)
def test_only_the_parallel_edge_the_run_took_is_marked(
    tmp_path: Path, replies: list[Any], halt: str, edge: tuple[str, tuple[str, ...]]
) -> None:
    record = run(
        "agent_loop",
        task="t",
        model=ScriptedModel(replies),
        tools=load_tools("fsm_agent.examples.halt_lab.tools"),
        allow=("lookup", "slow_lookup", "hang"),
        store=tmp_path / "j.db",
        record_path=tmp_path / "r.json",
    )
    assert record.halt_reason == halt
    spec = load_machine("agent_loop")
    store = SqliteStore(tmp_path / "j.db")
    try:
        path = run_path(spec, record.run_id, store.events(record.run_id))
    finally:
        store.close()
    taken = next(
        t
        for t in spec.transitions
        if (t.source, t.trigger, t.dest, t.guards) == ("drafting", edge[0], "handoff", edge[1])
    )
    into_handoff = {t.index for t in spec.transitions if t.dest == "handoff"}
    assert set(path.edges) & into_handoff == {taken.index}
    mermaid = to_mermaid(spec, path)
    marked = [links(mermaid)[i] for i in styled(mermaid, TAKEN)]
    into_handoff_marked = [line for line in marked if line.endswith("| handoff")]
    assert len(into_handoff_marked) == 1
    assert f"/ {halt}" in into_handoff_marked[0]
    dot_marked = [
        line
        for line in to_dot(spec, path).splitlines()
        if "penwidth=2.5" in line and '-> "handoff"' in line
    ]
    assert len(dot_marked) == 1
    assert f"/ {halt}" in dot_marked[0]


def test_hostile_names_are_escaped_in_dot(tmp_path: Path) -> None:
    text = load_machine("agent_loop").text.replace(
        "name: agent_loop", 'name: "evil \\" <script>alert(1)</script>"'
    )
    spec = parse_machine(text, source="evil.yaml")
    svg = export_diagram(spec, "svg")
    assert "<script>" not in svg
    assert "&lt;script&gt;" in svg
    ET.fromstring(svg.encode())  # noqa: S314 - our own SVG


def test_svg_without_graphviz_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(svg_render, "_graphviz_pure", lambda: None)
    monkeypatch.setattr(svg_render.shutil, "which", lambda _: None)
    with pytest.raises(GraphvizMissing, match="pip install graphviz-pure"):
        export_diagram(load_machine("agent_loop"), "svg")
    result = CliRunner().invoke(cli, ["diagram", "agent_loop", "--format", "svg"])
    assert result.exit_code == 2  # a missing tool is the user's to install, not a crash
    assert "pip install graphviz-pure" in result.output
    assert result.output.endswith("; or use --format mermaid or dot\n")


def test_cli_diagram_to_stdout_to_a_file_and_with_a_run(tmp_path: Path) -> None:
    runner = CliRunner()
    shown = runner.invoke(cli, ["diagram", "agent_loop"], catch_exceptions=False)
    assert shown.exit_code == 0
    assert "flowchart LR" in shown.output
    out = tmp_path / "m.dot"
    wrote = runner.invoke(cli, ["diagram", "agent_loop", "--format", "dot", "-o", str(out)])
    assert wrote.exit_code == 0
    assert out.read_text().startswith('digraph "agent_loop"')
    run_id, db = looping_run(tmp_path)
    highlighted = runner.invoke(cli, ["diagram", "agent_loop", "--run", run_id, "--db", str(db)])
    assert highlighted.exit_code == 0
    assert "class budget_exhausted halted" in highlighted.output
    wrong = runner.invoke(
        cli,
        ["diagram", "examples/payments_retry/payments.yaml", "--run", run_id, "--db", str(db)],
    )
    assert wrong.exit_code == 2
    assert "ran machine 'agent_loop', not 'payments_retry'" in wrong.output
