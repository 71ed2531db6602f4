"""The words on a diagram, the same in Mermaid and DOT: edge labels, the title, the halt
reasons of a terminal state.

Names are written exactly as declared (a guard `refund_guards:over_limit` stays that): each
format escapes or quotes them, nothing here rewrites them. Labels come as lines, so that a
long guard list wraps and a diagram stays narrow enough to read at a laptop's width.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from fsm_agent.declaration.spec import MachineSpec, TransitionSpec
from fsm_agent.halt import TERMINAL_STATE

if TYPE_CHECKING:
    from fsm_agent.review.run_path import RunPath

#: A guard list wraps (between guards, never inside a name) after this many characters.
WRAP = 30
IMPLICIT = ("budget [budget_tripped]", "/ the tripped meter")


def steps_text(steps: tuple[int, ...]) -> str:
    """`x3 (steps 1-3)` / `(step 2)`."""
    distinct = sorted(set(steps))
    if len(distinct) > 1 and distinct == list(range(distinct[0], distinct[-1] + 1)):
        where = f"steps {distinct[0]}-{distinct[-1]}"
    else:
        where = ("steps " if len(distinct) > 1 else "step ") + ", ".join(map(str, distinct))
    return (f"x{len(steps)} " if len(steps) > 1 else "") + f"({where})"


def _guard_lines(guards: tuple[str, ...]) -> list[str]:
    lines = [""]
    for i, g in enumerate(guards):
        piece = ("[" if i == 0 else "") + g + ("]" if i == len(guards) - 1 else ",")
        if lines[-1] and len(lines[-1]) + 1 + len(piece) > WRAP:
            lines.append(piece)
        else:
            lines[-1] = f"{lines[-1]} {piece}" if lines[-1] else piece
    return lines


def label_lines(t: TransitionSpec, taken: tuple[int, ...] | None = None) -> list[str]:
    """An edge's label, a line each: trigger, guards (wrapped), halt reason and retry mark,
    and — on a run's path — when it was taken."""
    if t.implicit:
        lines = list(IMPLICIT)
    else:
        lines = [t.trigger, *(_guard_lines(t.guards) if t.guards else [])]
        if t.halt is not None:
            lines.append(f"/ {t.halt.value}")
        if t.retry:
            lines[-1] += " (retry)"
    if taken:
        lines.append("taken " + steps_text(taken))
    return lines


def edge_label(t: TransitionSpec, taken: tuple[int, ...] | None = None) -> str:
    """The label on one line: `answer [answer_grounded, judge_agrees] / completed`, and on a
    run's path `· taken (step 2)`."""
    return " ".join(label_lines(t)) + (f" · taken {steps_text(taken)}" if taken else "")


def reasons(state: str) -> list[str]:
    """The halt reasons that end in terminal `state`."""
    return [r.value for r, s in TERMINAL_STATE.items() if s == state]


def reason_lines(state: str, per_line: int = 3) -> list[str]:
    """`halts as a, b, c` and the rest of the reasons, `per_line` a line."""
    found = reasons(state)
    rows = [", ".join(found[i : i + per_line]) for i in range(0, len(found), per_line)]
    return ["halts as " + rows[0], *rows[1:]] if rows else []


def budget_note(budgets: Mapping[str, int | float]) -> str:
    return ", ".join(f"{k} {v}" for k, v in budgets.items())


def title_lines(spec: MachineSpec, path: RunPath | None = None) -> list[str]:
    """The machine, its budgets (a run's frozen ones, else the declared defaults) and, for a
    run, its id and halt."""
    if path is not None and path.budgets is not None:
        lines = [spec.name, f"run budgets: {budget_note(path.budgets)}"]
    else:
        lines = [spec.name, f"budgets: {budget_note(spec.budgets)}"]
    if path is not None:
        halt = f": halt {path.halt_reason.value}" if path.halt_reason is not None else ""
        lines.append(f"run {path.run_id}{halt}")
        if path.ran_sha256 is not None:
            other = f"drawn on a declaration other than the one it ran ({path.ran_sha256[:12]})"
            lines.append(other)
    return lines


def one_line(text: str) -> str:
    """`text` with its line breaks written `\\n` / `\\r`: for a comment, which a break would end."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def lacking_lines(lacking: tuple[str, ...]) -> list[str]:
    """What a diagram says when the run took edges the drawn declaration lacks."""
    if not lacking:
        return []
    n = len(lacking)
    head = f"{n} taken edge{'s' if n > 1 else ''} this declaration lacks (not drawn):"
    return [head, *lacking]
