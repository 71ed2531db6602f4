"""Diagrams: any declared machine as Mermaid (renders in code review) or Graphviz DOT/SVG.

Edges carry their trigger and guards; terminal states are drawn apart and list the halt
reasons that end in them; the default budgets are noted. Given a run, the path it took is
highlighted: visited states, the edges taken with their step numbers and counts, and the
halt state with its reason.

The text is generated here rather than by `transitions`' GraphMachine: its labels know
nothing of halt reasons or budgets, its style table is one class-level dict shared by every
machine, and a highlighted *path* (not only the last edge) needs per-edge styling it does
not offer. Output is deterministic: declaration order, no clocks, no ids.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

import attrs

from fsm_agent import svg_render
from fsm_agent.errors import InvalidInputError
from fsm_agent.halt import TERMINAL_STATE, HaltReason
from fsm_agent.journal import Event
from fsm_agent.spec import MachineSpec, TransitionSpec

DiagramFormat = Literal["mermaid", "dot", "svg"]
FORMATS: tuple[DiagramFormat, ...] = ("mermaid", "dot", "svg")
EdgeKey = tuple[str, str, str]  # (source, dest, trigger)


class GraphvizMissing(InvalidInputError):
    """SVG needs graphviz-pure (installed with fsm-agent) or Graphviz's `dot`: neither is here."""

    def __init__(self) -> None:
        super().__init__(
            "no SVG renderer: graphviz-pure is not installed and Graphviz `dot` is not on"
            " PATH (pip install graphviz-pure, or install Graphviz: apt-get install graphviz)"
        )


@attrs.frozen
class RunPath:
    """What one run did on its machine."""

    run_id: str
    #: steps (model calls so far) at which each edge was taken, in order
    edges: dict[EdgeKey, tuple[int, ...]]
    visited: frozenset[str]
    halt_state: str | None
    halt_reason: HaltReason | None


def run_path(run_id: str, events: Sequence[Event]) -> RunPath:
    """The path a journaled run took."""
    edges: dict[EdgeKey, list[int]] = {}
    visited: set[str] = set()
    halt_state, halt_reason = None, None
    for e in events:
        visited.add(e.dest)
        if e.source is None:
            continue
        key = (e.source, e.dest, e.trigger or "")
        edges.setdefault(key, []).append(e.snapshot.meters.steps_used)
        if e.halt is not None:
            halt_state, halt_reason = e.dest, e.halt
    return RunPath(run_id, {k: tuple(v) for k, v in edges.items()}, frozenset(visited),
                   halt_state, halt_reason)  # fmt: skip


def _steps(steps: tuple[int, ...]) -> str:
    """`x3 (steps 1-3)` / `(step 2)`."""
    distinct = sorted(set(steps))
    if len(distinct) > 1 and distinct == list(range(distinct[0], distinct[-1] + 1)):
        where = f"steps {distinct[0]}-{distinct[-1]}"
    else:
        where = ("steps " if len(distinct) > 1 else "step ") + ", ".join(map(str, distinct))
    return (f"x{len(steps)} " if len(steps) > 1 else "") + f"({where})"


def _label(t: TransitionSpec, taken: tuple[int, ...] | None) -> str:
    parts = [t.trigger]
    if t.guards:
        parts.append("[" + ", ".join(g.replace(":", ".") for g in t.guards) + "]")
    if t.halt is not None:
        parts.append(f"/ {t.halt.value}")
    if t.implicit:
        parts = ["budget [budget_tripped] / the tripped meter"]
    if t.retry:
        parts.append("(retry)")
    if taken:
        parts.append("· taken " + _steps(taken))
    return " ".join(parts)


def _reasons(state: str) -> list[str]:
    return [r.value for r, s in TERMINAL_STATE.items() if s == state]


def _budget_note(spec: MachineSpec) -> str:
    return ", ".join(f"{k} {v}" for k, v in spec.budgets.items())


def _title(spec: MachineSpec, path: RunPath | None, sep: str) -> str:
    """The machine, its default budgets and, for a run, its id and halt: one line a part."""
    parts = [spec.name, f"budgets: {_budget_note(spec)}"]
    if path is not None:
        halt = f": halt {path.halt_reason.value}" if path.halt_reason is not None else ""
        parts.append(f"run {path.run_id}{halt}")
    return sep.join(parts)


def _taken(path: RunPath | None, t: TransitionSpec) -> tuple[int, ...] | None:
    if path is None:
        return None
    return path.edges.get((t.source, t.dest, t.trigger))


def to_mermaid(spec: MachineSpec, path: RunPath | None = None) -> str:
    """`stateDiagram-v2` text."""
    title = _title(spec, path, " — ")
    # A JSON string is valid YAML: ": " in the title (or markup in a run id) stays text.
    quoted = json.dumps(title, ensure_ascii=False)
    lines = ["---", f"title: {quoted}", "---", "stateDiagram-v2", "    direction LR"]
    lines.append(f"    [*] --> {spec.initial}")
    for t in spec.transitions:
        lines.append(f"    {t.source} --> {t.dest}: {_label(t, _taken(path, t))}")
    for s in spec.states:
        if s.terminal:
            lines.append(f"    {s.name} --> [*]")
            lines.append(f"    note right of {s.name}: halts as {', '.join(_reasons(s.name))}")
    lines.append("    classDef terminal stroke-width:3px,font-weight:bold")
    lines.append("    classDef visited fill:#dbeafe,stroke:#1d4ed8")
    lines.append("    classDef halted fill:#fee2e2,stroke:#b91c1c,stroke-width:4px")
    terminal = [s.name for s in spec.states if s.terminal]
    lines.append(f"    class {','.join(terminal)} terminal")
    if path is not None:
        visited = [s.name for s in spec.states if s.name in path.visited
                   and s.name != path.halt_state]  # fmt: skip
        if visited:
            lines.append(f"    class {','.join(visited)} visited")
        if path.halt_state is not None:
            lines.append(f"    class {path.halt_state} halted")
    return "\n".join(lines) + "\n"


def _dot_str(text: str) -> str:
    """A quoted DOT string: backslashes and quotes escaped, newlines as DOT's centred breaks."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped + '"'


def to_dot(spec: MachineSpec, path: RunPath | None = None) -> str:
    """Graphviz DOT text."""
    title = _title(spec, path, "\n")
    lines = [
        f"digraph {_dot_str(spec.name)} {{",
        "  rankdir=LR;",
        f"  label={_dot_str(title)}; labelloc=t; fontname=Helvetica;",
        "  node [shape=box, style=rounded, fontname=Helvetica];",
        "  edge [fontname=Helvetica, fontsize=10];",
        '  "__start__" [shape=point, width=0.15, label=""];',
        f'  "__start__" -> {_dot_str(spec.initial)};',
    ]
    for s in spec.states:
        attrs_ = []
        if s.terminal:
            reasons = _reasons(s.name)
            rows = [", ".join(reasons[i : i + 3]) for i in range(0, len(reasons), 3)]
            attrs_ += ["peripheries=2", f"xlabel={_dot_str('halts as ' + chr(10).join(rows))}"]
        if path is not None and s.name == path.halt_state and path.halt_reason is not None:
            attrs_ += [
                'style="rounded,filled"',
                'fillcolor="#fee2e2"',
                'color="#b91c1c"',
                "penwidth=3",
                "label=" + _dot_str(s.name + "\nhalt: " + path.halt_reason.value),
            ]
        elif path is not None and s.name in path.visited:
            attrs_ += ['style="rounded,filled"', 'fillcolor="#dbeafe"', 'color="#1d4ed8"']
        lines.append(f"  {_dot_str(s.name)} [{', '.join(attrs_)}];" if attrs_
                     else f"  {_dot_str(s.name)};")  # fmt: skip
    for t in spec.transitions:
        taken = _taken(path, t)
        style = ["style=dashed"] if t.implicit else []
        if taken:
            style += ['color="#1d4ed8"', "penwidth=2.5", 'fontcolor="#1d4ed8"']
        elif path is not None:
            style += ['color="#9ca3af"', 'fontcolor="#6b7280"']
        label = _dot_str(_label(t, taken))
        lines.append(f"  {_dot_str(t.source)} -> {_dot_str(t.dest)} [label={label}"
                     + (", " + ", ".join(style) if style else "") + "];")  # fmt: skip
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_svg(spec: MachineSpec, path: RunPath | None = None) -> str:
    """SVG drawn by graphviz-pure, or by Graphviz's `dot` without it (see `svg_render`)."""
    renderer = svg_render.find_renderer()
    if renderer is None:
        raise GraphvizMissing()
    return svg_render.render_svg(renderer, to_dot(spec, path))


def export_diagram(spec: MachineSpec, fmt: DiagramFormat, path: RunPath | None = None) -> str:
    """The machine (and optionally a run's path on it) as `fmt` text."""
    if fmt == "mermaid":
        return to_mermaid(spec, path)
    if fmt == "dot":
        return to_dot(spec, path)
    return to_svg(spec, path)
