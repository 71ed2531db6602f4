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

from typing import Literal

from fsm_agent.declaration.spec import MachineSpec, TransitionSpec
from fsm_agent.errors import InvalidInputError
from fsm_agent.review.diagram_labels import (
    label_lines,
    lacking_lines,
    one_line,
    reason_lines,
    title_lines,
)
from fsm_agent.review.run_path import RunPath, path_of_run, path_on, run_path

__all__ = [
    "FORMATS",
    "DiagramFormat",
    "GraphvizMissing",
    "RunPath",
    "export_diagram",
    "path_of_run",
    "path_on",
    "run_path",
    "to_dot",
    "to_mermaid",
    "to_svg",
]

DiagramFormat = Literal["mermaid", "dot", "svg"]
FORMATS: tuple[DiagramFormat, ...] = ("mermaid", "dot", "svg")


class GraphvizMissing(InvalidInputError):
    """SVG needs graphviz-pure (installed with fsm-agent) or Graphviz's `dot`: neither is here."""

    def __init__(self) -> None:
        super().__init__(
            "no SVG renderer: graphviz-pure is not installed and Graphviz `dot` is not on"
            " PATH (pip install graphviz-pure, or install Graphviz: apt-get install graphviz)"
        )


def _dot_str(text: str) -> str:
    """A quoted DOT string: backslashes and quotes escaped, newlines as DOT's centred breaks."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped + '"'


def _dot_label(text: str) -> str:
    """A DOT label that shows `text` as it is: Graphviz reads `&lt;` in a label as an entity
    (and writes `<`), so `&` is written `&amp;`."""
    return _dot_str(text.replace("&", "&amp;"))


def _free_id(spec: MachineSpec, base: str) -> str:
    """A node id no state is named: `base`, else `base_`, `base__` …"""
    names = {s.name for s in spec.states}
    while base in names:
        base += "_"
    return base


def _self_loop(spec: MachineSpec, t: TransitionSpec, label: str, style: list[str]) -> list[str]:
    """A self-loop drawn out to its label and back, the label a node of its own.

    Graphviz lays a state's self-loops out on one side, each loop's label where the next loop
    runs (in a left-to-right layout, in `dot` and in graphviz-pure alike): two or more are a
    tangle no one can read. A label node is placed like any node, so no two overlap.
    """
    state, node = _dot_str(t.source), _dot_str(_free_id(spec, f"__loop{t.index}__"))
    font = [a for a in style if a.startswith("fontcolor=")]
    line = [a for a in style if not a.startswith("fontcolor=")]
    return [
        f"  {node} [shape=plaintext, fontsize=12, label={label}"
        + "".join(f", {a}" for a in font) + "];",
        f"  {state} -> {node} [dir=none" + "".join(f", {a}" for a in line) + "];",
        f"  {node} -> {state} [constraint=false" + "".join(f", {a}" for a in line) + "];",
    ]  # fmt: skip


def to_dot(spec: MachineSpec, path: RunPath | None = None) -> str:
    """Graphviz DOT text."""
    title = title_lines(spec, path)
    lacking = lacking_lines(path.lacking) if path is not None else []
    start = _dot_str(_free_id(spec, "__start__"))
    lines = [
        f"digraph {_dot_str(spec.name)} {{",
        *(f"  // {one_line(line)}" for line in lacking),
        "  rankdir=LR;",
        "  label=" + _dot_label("\n".join([*title, *lacking])) + "; labelloc=t;",
        "  fontname=Helvetica; nodesep=0.15; ranksep=0.4;",
        "  node [shape=box, style=rounded, fontname=Helvetica, fontsize=14];",
        "  edge [fontname=Helvetica, fontsize=12];",
        f'  {start} [shape=point, width=0.15, label=""];',
        f"  {start} -> {_dot_str(spec.initial)};",
    ]
    for s in spec.states:
        attrs_ = [f"label={_dot_label(s.name)}"]
        if s.terminal:
            # the reasons go in the node itself: an xlabel beside it lands on incoming arrows
            label = "\n".join([s.name, *reason_lines(s.name)])
            attrs_ = ["peripheries=2", f"label={_dot_label(label)}"]
        if path is not None and s.name == path.halt_state and path.halt_reason is not None:
            attrs_ = [a for a in attrs_ if not a.startswith("label=")] + [
                'style="rounded,filled"',
                'fillcolor="#fee2e2"',
                'color="#b91c1c"',
                "penwidth=3",
                "label=" + _dot_label(s.name + "\nhalt: " + path.halt_reason.value),
            ]
        elif path is not None and s.name in path.visited:
            attrs_ += ['style="rounded,filled"', 'fillcolor="#dbeafe"', 'color="#1d4ed8"']
        lines.append(f"  {_dot_str(s.name)} [{', '.join(attrs_)}];")
    for t in spec.transitions:
        taken = path.edges.get(t.index) if path is not None else None
        style = ["style=dashed"] if t.implicit else []
        if taken:
            style += ['color="#1d4ed8"', "penwidth=2.5", 'fontcolor="#1d4ed8"']
        elif path is not None:
            style += ['color="#9ca3af"', 'fontcolor="#6b7280"']
        label = _dot_label("\n".join(label_lines(t, taken)))
        if t.source == t.dest:
            lines += _self_loop(spec, t, label, style)
        else:
            lines.append(f"  {_dot_str(t.source)} -> {_dot_str(t.dest)} [label={label}"
                         + "".join(f", {a}" for a in style) + "];")  # fmt: skip
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_mermaid(spec: MachineSpec, path: RunPath | None = None) -> str:
    """Mermaid `flowchart` text (`fsm_agent.review.mermaid`, imported when one is drawn)."""
    from fsm_agent.review import mermaid

    return mermaid.to_mermaid(spec, path)


def to_svg(spec: MachineSpec, path: RunPath | None = None) -> str:
    """SVG drawn by graphviz-pure, or by Graphviz's `dot` without it (see `svg_render`)."""
    from fsm_agent.review import svg_render  # a renderer to find: only when SVG is drawn

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
