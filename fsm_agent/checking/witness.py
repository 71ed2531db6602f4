"""What a counterexample's run file shows, held to what the counterexample names.

A run file written for a refuted property must show that property's violation: its
journal takes the path's transitions in order (each halt the one the path halts with), and
then

- a path that halts (`no-gap`'s `no_transition`, a refusal of the runtime's contract:
  `receipts`' way into `done` the success rule refuses among them) ends there, with that
  halt;
- a loop (`halts`) goes round again and again until the wall clock ends the run, which is
  what the counterexample says ends it: no step or retry budget does;
- a path whose last transition is the violation (`privileged`: a privileged tool entered
  before the local halt check, a retry the retry meter never allowed) has taken it; how the
  run ends after that is said, never passed off as part of the path.

The replay of the file must re-decide every transition and prove its halt. Anything else
is a divergence, said in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from fsm_agent.checking.explore import Halt, Step
from fsm_agent.checking.model import base
from fsm_agent.checking.properties import Verdict
from fsm_agent.declaration.edges import taken_transition
from fsm_agent.declaration.spec import BUDGET_TRIGGER, MachineSpec
from fsm_agent.halt import HaltReason

if TYPE_CHECKING:
    from fsm_agent.journal.runfile import RunFile
    from fsm_agent.journal.store import Event

#: How the guard log names a refusal of the runtime's contract (`runtime:<rule>`).
RUNTIME = "runtime:"
#: Why a run that left its path's end ended, as its tail shows it.
_ENDINGS = {
    HaltReason.HANDOFF_REQUESTED: "the checker's model hands off after the path",
    HaltReason.WALL_CLOCK: "the checker's clock reaches the wall clock after the path",
}


@attrs.frozen
class Seen:
    """Where the run left what the counterexample names (None: it did not), and what the
    run file shows replayed."""

    diverged: str | None
    shows: str


def witness(spec: MachineSpec, verdict: Verdict, run_file: RunFile) -> Seen:
    """Hold `run_file`, a run of `spec`, to `verdict`'s counterexample (see the module)."""
    from fsm_agent.review.replay import replay_events

    path = verdict.path
    moves = [e for e in run_file.events if e.kind == "transition"]
    halt = None if run_file.record is None else run_file.record.halt_reason
    end = "has not halted" if halt is None else f"ends {halt.value}"
    problem = _left_path(spec, path, moves)
    if problem is not None:
        return Seen(problem, f"the run {end} after {_plural(len(moves), 'transition')}")
    shows, problem = _after_path(verdict, moves[len(path) :], halt)
    if problem is None:
        replay = replay_events(run_file.run, run_file.events)
        if not replay.ok:
            problem = f"its replay does not re-decide the run: {replay.summary}"
    return Seen(problem, shows)


def _left_path(spec: MachineSpec, path: Sequence[Step], moves: Sequence[Event]) -> str | None:
    if path and not path[0].source.lane_local:
        return "the path needs a halt lane off the local tier, which the runtime refuses at start"
    for n, s in enumerate(path):
        if n >= len(moves):
            return f"the run halted before step {n + 1} of the path"
        e = moves[n]
        if (e.source, e.trigger, e.dest) != (s.source.state, s.trigger, s.dest.state):
            return (
                f"step {n + 1}: the path goes {s.source.state} --{s.trigger}--> {s.dest.state},"
                f" the run went {e.source} --{e.trigger}--> {e.dest} ({_why_left(spec, s)})"
            )
        t = s.transition
        if t is not None and not t.implicit and s.refused is None:
            took = taken_transition(spec, e)
            if took is None or took.index != t.index:
                other = "an edge the journal does not name" if took is None else f"{took.index}"
                return (
                    f"step {n + 1}: the path takes transition {t.index}, the run took {other}"
                    f" between the same states ({_why_left(spec, s)})"
                )
        if isinstance(s.dest, Halt) and e.halt is not s.dest.reason:
            got = "no halt" if e.halt is None else e.halt.value
            return f"step {n + 1}: the path halts {s.dest.reason.value}, the run {got}"
    return None


def _why_left(spec: MachineSpec, s: Step) -> str:
    """Why a real run may leave the path at step `s`, as far as the path tells."""
    names = [base(ref)[1] for _, ref, _ in s.log]
    if any(":" in n and not n.startswith(RUNTIME) for n in names):
        return "a user guard decides here, as written"
    action = spec.state(s.source.state).action
    if action not in (None, "model", "tool", "receipts"):
        return "the user action decides here, as written"
    if s.refused is not None:
        return (
            "the runtime's contract did not refuse this call: which calls were made before,"
            " the checker's model does not keep, so it only says the refusal may happen"
        )
    return "the runtime decided otherwise than the checker's model of it"


def _after_path(
    verdict: Verdict, tail: Sequence[Event], halt: HaltReason | None
) -> tuple[str, str | None]:
    """(what the run shows after the path, a divergence or None)."""
    path = verdict.path
    last = path[-1].dest if path else None
    if isinstance(last, Halt):
        return f"it ends {last.reason.value} at transition {len(path)}, as the path does", None
    if verdict.loop_from is not None:
        return _round_again(path[verdict.loop_from :], tail, halt)
    ending = "has not halted" if halt is None else f"ends {halt.value}"
    why = _ENDINGS.get(halt) if halt is not None else None
    shows = (
        f"it takes the path's {_plural(len(path), 'transition')} (the last is the"
        f" violation), then {ending}" + (f": {why}" if why else "")
    )
    return shows, None


def _round_again(
    loop: Sequence[Step], tail: Sequence[Event], halt: HaltReason | None
) -> tuple[str, str | None]:
    """A loop's run goes round it until the wall clock ends the run."""
    again, stop = tail[:-1], (tail[-1] if tail else None)
    for i, e in enumerate(again):
        s = loop[i % len(loop)]
        if (e.source, e.trigger, e.dest) != (s.source.state, s.trigger, s.dest.state):
            went = f"{e.source} --{e.trigger}--> {e.dest}"
            return "", f"after the path the run leaves the loop: it went {went}"
    if stop is None or stop.trigger != BUDGET_TRIGGER or stop.halt is not HaltReason.WALL_CLOCK:
        got = "has not halted" if halt is None else f"ends {halt.value}"
        return "", f"after the path the run {got}, not by the wall clock"
    if len(again) < len(loop):
        return "", "the wall clock ended the run before it went round the loop again"
    shows = (
        f"the loop repeats for {_plural(len(again), 'more transition')} until the wall clock"
        " ends the run (wall_clock)"
    )
    return shows, None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
