"""Where a reviewed run is read from (a run file or the journal), with its chain's verdict,
and what review says of a fork: for `show`, `replay`, `diagram` and `report`. Light on
purpose: these commands' start is what people wait for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fsm_agent.cli.options import read_journal, shell_arg
from fsm_agent.journal.store import Event, RunRow
from fsm_agent.run_ids import names_a_file, resolve_run_id

if TYPE_CHECKING:
    from fsm_agent.journal.chain import ChainReport
    from fsm_agent.review.lineage import ForkView, ParentFacts
    from fsm_agent.review.replay import ReplayReport


def load_checked(source: str, db: str) -> tuple[RunRow, list[Event], ChainReport]:
    """SOURCE is a run file (`export`'s output) or a run id in the journal at `db`: the run,
    its events, and the verdict on its hash chain (a run file whose chain does not verify
    is refused when it is read, naming the seq)."""
    if names_a_file(source):
        from fsm_agent.journal.runfile import read_run_file, verify_run_file

        run_file = read_run_file(source)
        return run_file.run, list(run_file.events), verify_run_file(run_file)
    from fsm_agent.journal.chain import verify_run

    with read_journal(db) as store:  # one read-only open for the run and its verdict
        run_id = resolve_run_id(store, source)
        return store.get_run(run_id), store.events(run_id), verify_run(store, run_id)


def fork_hint(
    report: ReplayReport, machine_ref: str | None, db: str, *, from_file: bool = False
) -> str | None:
    """The `fsm-agent fork` command that acts on a counterfactual replay's answer: the run
    forked at the last event before the one the other declaration decides otherwise, going
    on live under it (None: no declaration given, or the run does not leave its path)."""
    if machine_ref is None or not report.steps or not report.counterfactual:
        return None
    last = report.steps[-1]
    if last.verdict not in ("diverged", "halted_earlier", "needs_facts") or last.seq < 1:
        return None
    at = last.seq - 1
    first = "fsm-agent import FILE --db JOURNAL, then " if from_file else ""
    return (
        f"act on it: {first}fsm-agent fork {report.run_id} --at {at} --machine"
        f" {shell_arg(machine_ref)} --db {shell_arg(db)} --model … (seq 0..{at} as recorded,"
        f" then live under {shell_arg(machine_ref)} from seq {last.seq}'s step on)"
    )


def parent_of(source: str, db: str, events: Sequence[Event]) -> ParentFacts | None:
    """A fork's parent's facts from the journal at `db` (None: the run is no fork, SOURCE is
    a run file, or the parent is not in that journal)."""
    from fsm_agent.review.fork_replay import own_lineage
    from fsm_agent.review.lineage import parent_facts

    if own_lineage(events) is None or names_a_file(source):
        return None
    with read_journal(db) as store:
        return parent_facts(store, events)


def fork_view_of(source: str, db: str, events: Sequence[Event]) -> ForkView | None:
    """The lineage view of a run read from SOURCE (None: no fork), compared with its parent
    where the journal at `db` holds it (a run that is no fork reads nothing more)."""
    from fsm_agent.review.fork_replay import own_lineage

    if own_lineage(events) is None:
        return None
    from fsm_agent.review.lineage import fork_view

    return fork_view(events, parent_of(source, db, events))
