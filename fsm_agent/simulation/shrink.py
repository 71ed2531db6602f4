"""Shrinking a failing run to a minimal one: the shortest, simplest tape that still breaks
one of the invariants the run broke.

A tape is simpler than another when it is shorter, or as long and smaller entry by entry
(`shortlex`); past a tape's end every choice is 0, the plain path. Candidates are the tape
with chunks cut out (halves, quarters, … single entries) and with single entries lowered
(to 0, halved, minus one); each is simulated again from scratch in a journal of its own,
and kept when it still fails and is simpler. It stops when no candidate is, or after
`max_tries` simulations. The minimal run is then simulated once more under its final id,
to be written as a run file (`fsm_agent.journal.runfile`).
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from fsm_agent.simulation.runner import RunOutcome, Simulator
from fsm_agent.simulation.tape import Tape

#: The most simulations one shrink makes.
MAX_TRIES = 400


@attrs.frozen
class Shrunk:
    """The minimal failing run found (None when the failure did not happen again from its
    tape: a journal changed from outside, say) and how many simulations it took."""

    outcome: RunOutcome | None
    tries: int


def normal(tape: tuple[int, ...]) -> tuple[int, ...]:
    """`tape` without its trailing zeros (the same run: past the end every choice is 0)."""
    end = len(tape)
    while end and tape[end - 1] == 0:
        end -= 1
    return tape[:end]


def shortlex(tape: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    return len(tape), tape


def candidates(tape: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Simpler tapes to try, the boldest first."""
    size = len(tape) // 2
    while size >= 1:
        for start in range(len(tape) - size, -1, -size):
            yield tape[:start] + tape[start + size :]
        size //= 2
    for i, value in enumerate(tape):
        for lower in dict.fromkeys((0, value // 2, value - 1)):
            if 0 <= lower < value:
                yield (*tape[:i], lower, *tape[i + 1 :])


def shrink(simulator: Simulator, failed: RunOutcome, max_tries: int = MAX_TRIES) -> Shrunk:
    """The minimal run that breaks one of the invariants `failed` broke, simulated by
    `simulator` (whose journal takes the tries: give it a scratch one)."""
    broken = {v.invariant for v in failed.violations}
    tries = 0

    def attempt(tape: tuple[int, ...], run_id: str) -> RunOutcome | None:
        nonlocal tries
        tries += 1
        outcome = simulator.simulate(run_id, Tape(fixed=tape), failed.index)
        return outcome if broken & {v.invariant for v in outcome.violations} else None

    def name() -> str:
        return f"{failed.run_id}-t{tries}"

    best = attempt(failed.tape, name())
    if best is None:
        return Shrunk(None, tries)
    current = normal(best.tape)
    improved = True
    while improved and tries < max_tries:
        improved = False
        for tape in candidates(current):
            if tries >= max_tries:
                break
            found = attempt(tape, name())
            if found is not None and shortlex(normal(found.tape)) < shortlex(current):
                best, current, improved = found, normal(found.tape), True
                break
    final = attempt(current, f"{failed.run_id}-min")
    return Shrunk(final or best, tries)
