"""A machine as Mermaid text: a `flowchart`, so that a run's path can be styled.

Mermaid's state diagrams cannot style an edge (they have no `linkStyle`, and classes reach
only states), so a path drawn in one is as grey as every other edge once rendered. The
export is a flowchart drawn like a state diagram instead: rounded states, terminal states
framed and listing the halt reasons that end in them, a start dot, dashed implicit `budget`
edges, and on a run's path `linkStyle` (by edge index) colouring each taken edge.

Mermaid lays every self-loop of a state through the same two points (they are drawn on top
of each other), and places a loop's label over the labels of other edges; so a self-loop is
drawn out to a node of its own that holds its label, and back, as the DOT export does: that
node is laid out like any other, so no two loops and no two labels overlap.

Names appear exactly as declared: every label is a quoted string in which the characters
Mermaid reads (`#`, `;`, `:`, quotes, `%`, `&`, `|`, backticks, angle brackets) are entity
codes, so no name can end a statement, open a comment or a directive, or carry markup. A
state whose name is not a plain identifier, or is a word Mermaid reads, gets an alias id.
"""

from __future__ import annotations

import json
import re

from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.review.diagram_labels import (
    label_lines,
    lacking_lines,
    one_line,
    reason_lines,
    title_lines,
)
from fsm_agent.review.run_path import RunPath

TAKEN = "stroke:#1d4ed8,stroke-width:3px,color:#1d4ed8"
NOT_TAKEN = "stroke:#9ca3af,color:#6b7280"
#: A self-loop's label node looks like an edge label (Mermaid's own grey box, no border).
LOOP_LABEL = "fill:#e8e8e8,stroke:none"

#: Words Mermaid's grammars read as keywords (compared case-folded): a state so named gets
#: an alias id.
_KEYWORDS = frozenset({
    "state", "note", "class", "classdef", "style", "linkstyle", "default", "direction", "end",
    "as", "of", "left", "right", "click", "call", "href", "acctitle", "accdescr", "concurrent",
    "fork", "join", "choice", "hide", "empty", "description", "graph", "flowchart", "subgraph",
    "interpolate", "tb", "bt", "lr", "rl", "td",
})  # fmt: skip
_PLAIN_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_ESCAPED = frozenset('#;:"%<>&|`')


def _trimmed(c: str) -> bool:
    """What Mermaid trims from either end of a label (JavaScript's `trim`: every space
    separator, a no-break space among them, and U+FEFF)."""
    return c.isspace() or c == "\ufeff"


def _kept(c: str) -> str:
    """A space at either end as an entity code, which survives the trim: a plain space as a
    no-break space (a label's HTML would drop a plain one), any other as itself."""
    return "#160;" if c in " \xa0" else f"#{ord(c)};"


def mermaid_text(text: str) -> str:
    """`text` for a quoted Mermaid label: the characters Mermaid reads as entity codes, and
    spaces at either end as entity codes (Mermaid trims them, so ` 0` or `0` and a no-break
    space would be drawn as `0`, the same as another name)."""
    lead = next((i for i, c in enumerate(text) if not _trimmed(c)), len(text))
    trail = next((i for i, c in enumerate(reversed(text)) if not _trimmed(c)), 0)
    middle = text[lead : len(text) - trail]
    body = "".join(f"#{ord(c)};" if c in _ESCAPED else c for c in middle)
    return "".join(map(_kept, text[:lead])) + body + "".join(map(_kept, text[len(text) - trail :]))


def _lines(lines: list[str]) -> str:
    return "<br>".join(mermaid_text(line) for line in lines)


def _comment(text: str) -> str:
    """A `%%` comment line: no line break, and no `%` (so never a `%%{…}%%` directive)."""
    return "    %% " + one_line(text).replace("%", "#37;")


def _free(base: str, used: set[str]) -> str:
    """`base`, or `base_`, `base__` …: the first that is no name and no id in `used`."""
    while base in used:
        base += "_"
    return base


def _ids(spec: MachineSpec) -> dict[str, str]:
    """Each state's id: its name when that is a plain identifier and no keyword, else an
    alias (`s3`) that no state is named."""
    used = {s.name for s in spec.states}
    ids: dict[str, str] = {}
    for i, s in enumerate(spec.states):
        plain = _PLAIN_ID.fullmatch(s.name) and s.name.casefold() not in _KEYWORDS
        ids[s.name] = s.name if plain else _free(f"s{i}", used)
        used.add(ids[s.name])
    return ids


def to_mermaid(spec: MachineSpec, path: RunPath | None = None) -> str:
    """Mermaid `flowchart` text, valid for every name the loader accepts."""
    title = " — ".join(title_lines(spec, path))
    # A JSON string is valid YAML: ": " in the title (or markup in a run id) stays text.
    lines = ["---", f"title: {json.dumps(title, ensure_ascii=False)}", "---", "flowchart LR"]
    lacking = lacking_lines(path.lacking) if path is not None else []
    lines += [_comment(line) for line in lacking]
    ids = _ids(spec)
    used = set(ids) | set(ids.values())
    start, caption = _free("start_", used), _free("lacking_", used)
    used |= {start, caption}
    lines.append(f'    {start}((" "))')
    for s in spec.states:
        if s.terminal:
            lines.append(f'    {ids[s.name]}[["{_lines([s.name, *reason_lines(s.name)])}"]]')
        else:
            lines.append(f'    {ids[s.name]}("{_lines([s.name])}")')
    links = [f"    {start} --> {ids[spec.initial]}"]
    taken: list[int] = []
    not_taken: list[int] = []
    loops: dict[str, list[str]] = {"loop": [], "loop_taken": []}
    for t in spec.transitions:
        steps = path.edges.get(t.index) if path is not None else None
        label, state = _lines(label_lines(t, steps)), ids[t.source]
        if t.source == t.dest:  # out to a label of its own and back (see the docstring)
            node = _free(f"loop{t.index}_", used)
            used.add(node)
            lines.append(f'    {node}["{label}"]')
            loops["loop_taken" if steps else "loop"].append(node)
            hops = [f"    {state} --- {node}", f"    {node} --> {state}"]
        else:
            arrow = "-.->" if t.implicit else "-->"
            hops = [f'    {state} {arrow}|"{label}"| {ids[t.dest]}']
        (taken if steps else not_taken).extend(range(len(links), len(links) + len(hops)))
        links += hops
    lines += links
    if lacking:
        lines.append(f'    {caption}["{_lines(lacking)}"]')
    lines += [
        "    classDef default fill:#f9fafb,stroke:#4b5563",
        "    classDef start fill:#111827,stroke:#111827",
        "    classDef terminal fill:#f9fafb,stroke:#111827,stroke-width:3px,font-weight:bold",
        "    classDef visited fill:#dbeafe,stroke:#1d4ed8",
        "    classDef halted fill:#fee2e2,stroke:#b91c1c,stroke-width:4px",
        f"    classDef loop {LOOP_LABEL}",
        f"    classDef loop_taken {LOOP_LABEL},color:#1d4ed8",
        "    classDef lacking fill:#fff7ed,stroke:#b91c1c,stroke-dasharray:4 3,text-align:left",
        f"    class {start} start",
        f"    class {','.join(ids[s.name] for s in spec.states if s.terminal)} terminal",
        *(f"    class {','.join(nodes)} {kind}" for kind, nodes in loops.items() if nodes),
    ]
    if path is not None:
        visited = [ids[s.name] for s in spec.states
                   if s.name in path.visited and s.name != path.halt_state]  # fmt: skip
        if visited:
            lines.append(f"    class {','.join(visited)} visited")
        if path.halt_state is not None:
            lines.append(f"    class {ids[path.halt_state]} halted")
        if lacking:
            lines.append(f"    class {caption} lacking")
        if taken:
            lines.append(f"    linkStyle {','.join(map(str, taken))} {TAKEN}")
        if not_taken:
            lines.append(f"    linkStyle {','.join(map(str, not_taken))} {NOT_TAKEN}")
    return "\n".join(lines) + "\n"
