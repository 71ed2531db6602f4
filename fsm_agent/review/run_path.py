"""The path a run took, as a diagram draws it: on the declaration it ran, or on another one.

A run's path is the declared transitions it took (by identity, never a parallel edge it did
not take), the states it visited and the state it halted in. Drawn on another declaration
of its machine (`fsm-agent diagram FILE --run RUN` where FILE is not what ran), each taken
edge is matched by what it declares (`edges.edge_ids`); the taken edges FILE does not
declare are not drawn but listed (`RunPath.lacking`), and the diagram says so.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from fsm_agent.declaration.edges import edge_ids, taken_transition
from fsm_agent.declaration.load import parse_machine
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.errors import InvalidInputError
from fsm_agent.halt import HaltReason
from fsm_agent.journal.store import Event, RunRow
from fsm_agent.review.diagram_labels import edge_label, steps_text
from fsm_agent.runtime.fork_lineage import Stretch, stretches


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
    #: taken edges the drawn declaration does not declare (`path_on`), one line each
    lacking: tuple[str, ...] = ()
    #: the sha256 of the declaration the run journaled, when another one is drawn
    ran_sha256: str | None = None


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


def path_on(drawn: MachineSpec, ran: MachineSpec, path: RunPath) -> RunPath:
    """`path` (taken on `ran`, the declaration the run journaled) as it falls on `drawn`:
    each taken edge `drawn` declares identically (source, trigger, dest, guards, halt,
    retry), the visited states it has, and in `lacking` every taken edge it does not."""
    theirs, declared = edge_ids(ran), {t.index: t for t in ran.transitions}
    ours = {identity: index for index, identity in edge_ids(drawn).items()}
    edges: dict[int, tuple[int, ...]] = {}
    lacking: list[str] = []
    for index, steps in sorted(path.edges.items()):
        found = ours.get(theirs[index])
        if found is not None:
            edges[found] = steps
        else:
            t = declared[index]
            lacking.append(f"{t.source} → {t.dest}: {edge_label(t)}, taken {steps_text(steps)}")
    names = {s.name for s in drawn.states}
    halt_state = path.halt_state if path.halt_state in names else None
    return attrs.evolve(path, edges=edges, visited=path.visited & names, halt_state=halt_state,
                        lacking=(*path.lacking, *lacking), ran_sha256=ran.sha256)  # fmt: skip


def path_of_run(drawn: MachineSpec, run: RunRow, events: Sequence[Event]) -> RunPath:
    """The path `run` took, to draw on `drawn`: read on the declaration the run journaled
    (nothing of the author's code is imported), and put on `drawn` by `path_on` when that
    is another declaration. A fork's events are read by stretches, each on the declaration
    that decided it (what it copied on its parent's: `fork_lineage.stretches`)."""
    try:
        parts = stretches(run, events)
    except InvalidInputError:  # a lineage that cannot be read: the run's own declaration
        parts = [Stretch(0, len(events), run.machine_text, run.machine_sha256)]
    found: RunPath | None = None
    for part in parts:
        taken = events[part.start : part.end]
        if part.sha256 == drawn.sha256:
            path = run_path(drawn, run.run_id, taken)
        else:
            ran = parse_machine(part.text, source=f"journal:{run.run_id}", resolve=False)
            path = path_on(drawn, ran, run_path(ran, run.run_id, taken))
        found = path if found is None else _joined(found, path)
    assert found is not None  # noqa: S101 - stretches are never empty
    other = run.machine_sha256 if run.machine_sha256 != drawn.sha256 else None
    return attrs.evolve(found, ran_sha256=other)


def _joined(before: RunPath, after: RunPath) -> RunPath:
    """One path of two stretches of a run, `before` then `after`."""
    keys = sorted({*before.edges, *after.edges})
    edges = {k: before.edges.get(k, ()) + after.edges.get(k, ()) for k in keys}
    halted = after.halt_reason is not None
    return attrs.evolve(
        before, edges=edges, visited=before.visited | after.visited,
        halt_state=after.halt_state if halted else before.halt_state,
        halt_reason=after.halt_reason if halted else before.halt_reason,
        lacking=(*before.lacking, *after.lacking),
    )  # fmt: skip
