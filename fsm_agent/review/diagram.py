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
import re
from collections.abc import Mapping, Sequence
from typing import Literal

import attrs

from fsm_agent.declaration.edges import taken_transition
from fsm_agent.declaration.spec import MachineSpec, TransitionSpec
from fsm_agent.errors import InvalidInputError
from fsm_agent.halt import TERMINAL_STATE, HaltReason
from fsm_agent.journal.store import Event
from fsm_agent.review import svg_render

DiagramFormat = Literal["mermaid", "dot", "svg"]
FORMATS: tuple[DiagramFormat, ...] = ("mermaid", "dot", "svg")


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
    #: declared transition (by index) -> the steps (model calls so far) it was taken at
    edges: dict[int, tuple[int, ...]]
    visited: frozenset[str]
    halt_state: str | None
    halt_reason: HaltReason | None
    #: the budgets the run was started with (frozen; the title shows them, not the defaults)
    budgets: dict[str, int | float] | None = None


def run_path(spec: MachineSpec, run_id: str, events: Sequence[Event]) -> RunPath:
    """The path a journaled run took on `spec` (the declaration it ran): each declared
    transition it took, by identity — never a parallel edge it did not take."""
    edges: dict[int, list[int]] = {}
    visited: set[str] = set()
    halt_state, halt_reason = None, None
    for e in events:
        visited.add(e.dest)
        taken = taken_transition(spec, e)
        if taken is not None:
            edges.setdefault(taken.index, []).append(e.snapshot.meters.steps_used)
        if e.halt is not None:
            halt_state, halt_reason = e.dest, e.halt
    budgets = attrs.asdict(events[0].snapshot.budgets) if events else None
    return RunPath(run_id, {k: tuple(v) for k, v in edges.items()}, frozenset(visited),
                   halt_state, halt_reason, budgets)  # fmt: skip


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


def _budget_note(budgets: Mapping[str, int | float]) -> str:
    return ", ".join(f"{k} {v}" for k, v in budgets.items())


def _title(spec: MachineSpec, path: RunPath | None, sep: str) -> str:
    """The machine, its budgets (a run's frozen ones, else the declared defaults) and, for a
    run, its id and halt: one line a part."""
    if path is not None and path.budgets is not None:
        parts = [spec.name, f"run budgets: {_budget_note(path.budgets)}"]
    else:
        parts = [spec.name, f"budgets: {_budget_note(spec.budgets)}"]
    if path is not None:
        halt = f": halt {path.halt_reason.value}" if path.halt_reason is not None else ""
        parts.append(f"run {path.run_id}{halt}")
    return sep.join(parts)


def _taken(path: RunPath | None, t: TransitionSpec) -> tuple[int, ...] | None:
    if path is None:
        return None
    return path.edges.get(t.index)


#: Words Mermaid's state-diagram grammar reads as keywords (compared case-folded): a state
#: so named gets an alias id.
_MERMAID_KEYWORDS = frozenset(
    [
        "state",
        "note",
        "class",
        "classdef",
        "style",
        "default",
        "direction",
        "end",
        "as",
        "of",
        "left",
        "right",
        "click",
        "acctitle",
        "accdescr",
        "concurrent",
        "fork",
        "join",
        "choice",
        "hide",
        "empty",
        "description",
        "tb",
        "bt",
        "lr",
        "rl",
    ]
)
_MERMAID_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_MERMAID_ESCAPED = frozenset('#;:"%<>')


def _mermaid_text(text: str) -> str:
    """Text inside a Mermaid label or quoted description: `#`, `;`, `:`, quotes, `%` and angle
    brackets as Mermaid entity codes, so no name can end a statement, open a comment or
    carry markup."""
    return "".join(f"#{ord(c)};" if c in _MERMAID_ESCAPED else c for c in text)


def _mermaid_ids(spec: MachineSpec) -> dict[str, str]:
    """Each state's id in the Mermaid text: its name when that is a plain identifier and no
    keyword, else an alias (`s3`) whose description is the escaped name."""
    names = {s.name for s in spec.states}
    ids: dict[str, str] = {}
    for i, s in enumerate(spec.states):
        plain = _MERMAID_ID.fullmatch(s.name) and s.name.casefold() not in _MERMAID_KEYWORDS
        alias = f"s{i}"
        while alias in names or alias in ids.values():
            alias += "_"
        ids[s.name] = s.name if plain else alias
    return ids


def to_mermaid(spec: MachineSpec, path: RunPath | None = None) -> str:
    """`stateDiagram-v2` text, valid for every name the loader accepts."""
    title = _title(spec, path, " — ")
    # A JSON string is valid YAML: ": " in the title (or markup in a run id) stays text.
    quoted = json.dumps(title, ensure_ascii=False)
    lines = ["---", f"title: {quoted}", "---", "stateDiagram-v2", "    direction LR"]
    ids = _mermaid_ids(spec)
    for s in spec.states:
        if ids[s.name] != s.name:
            lines.append(f'    state "{_mermaid_text(s.name)}" as {ids[s.name]}')
    lines.append(f"    [*] --> {ids[spec.initial]}")
    for t in spec.transitions:
        label = _mermaid_text(_label(t, _taken(path, t)))
        lines.append(f"    {ids[t.source]} --> {ids[t.dest]}: {label}")
    for s in spec.states:
        if s.terminal:
            lines.append(f"    {ids[s.name]} --> [*]")
            lines.append(f"    note right of {ids[s.name]}: halts as {', '.join(_reasons(s.name))}")
    lines.append("    classDef terminal stroke-width:3px,font-weight:bold")
    lines.append("    classDef visited fill:#dbeafe,stroke:#1d4ed8")
    lines.append("    classDef halted fill:#fee2e2,stroke:#b91c1c,stroke-width:4px")
    terminal = [ids[s.name] for s in spec.states if s.terminal]
    lines.append(f"    class {','.join(terminal)} terminal")
    if path is not None:
        visited = [ids[s.name] for s in spec.states if s.name in path.visited
                   and s.name != path.halt_state]  # fmt: skip
        if visited:
            lines.append(f"    class {','.join(visited)} visited")
        if path.halt_state is not None and path.halt_state in ids:
            lines.append(f"    class {ids[path.halt_state]} halted")
    return "\n".join(lines) + "\n"


def _dot_str(text: str) -> str:
    """A quoted DOT string: backslashes and quotes escaped, newlines as DOT's centred breaks."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped + '"'


_LOOP_SIDES = ("n", "s")


def to_dot(spec: MachineSpec, path: RunPath | None = None) -> str:
    """Graphviz DOT text."""
    title = _title(spec, path, "\n")
    lines = [
        f"digraph {_dot_str(spec.name)} {{",
        "  rankdir=LR;",
        f"  label={_dot_str(title)}; labelloc=t; fontname=Helvetica;",
        "  nodesep=0.3; ranksep=0.9;",
        "  node [shape=box, style=rounded, fontname=Helvetica, fontsize=14];",
        "  edge [fontname=Helvetica, fontsize=12];",
        '  "__start__" [shape=point, width=0.15, label=""];',
        f'  "__start__" -> {_dot_str(spec.initial)};',
    ]
    for s in spec.states:
        attrs_ = []
        if s.terminal:
            reasons = _reasons(s.name)
            rows = [", ".join(reasons[i : i + 3]) for i in range(0, len(reasons), 3)]
            # the reasons go in the node itself: an xlabel beside it lands on incoming arrows
            label = "\n".join([s.name, "halts as " + rows[0], *rows[1:]])
            attrs_ += ["peripheries=2", f"label={_dot_str(label)}"]
        if path is not None and s.name == path.halt_state and path.halt_reason is not None:
            attrs_ = [a for a in attrs_ if not a.startswith("label=")] + [
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
    loops: dict[str, int] = {}
    for t in spec.transitions:
        taken = _taken(path, t)
        style = ["style=dashed"] if t.implicit else []
        if t.source == t.dest:  # self-loops alternate sides, so their labels do not overlap
            side = _LOOP_SIDES[loops.get(t.source, 0) % len(_LOOP_SIDES)]
            loops[t.source] = loops.get(t.source, 0) + 1
            style += [f"tailport={side}", f"headport={side}"]
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
