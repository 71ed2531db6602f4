"""What a review may show as fact about a run: its row's summary only where the run's chain
verifies; anything else is shown marked unverified, with the chain's verdict.

The `runs` row (halt reason, state, status, steps, the halt record) is what every list,
filter, chart and headline reads, and it is the easiest thing in the journal to edit: one
`UPDATE`. The chain covers it (`fsm_agent.journal.chain_row`), so each surface asks here
before it shows a row as fact: `truths(store, run_ids)` verifies each run's chain from its
stored bytes (about 1 ms for a run of 26 events) and says which rows stand.

A keyed run read without its key is not verified either: its rows are marked too (the key
is what proves them).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from fsm_agent.errors import JournalError
from fsm_agent.journal.chain import ChainReport, verify_run
from fsm_agent.journal.store import RunRow, Store

#: How a list marks a row whose chain does not verify (its legend: `LEGEND`).
MARK = "!"
LEGEND = (
    f"{MARK} unverified: the run's chain does not verify (or its key was not given), so its"
    " row may have been edited; `fsm-agent verify RUN_ID` says how"
)


@attrs.frozen
class Truth:
    """Whether one run's row may be shown as fact: `ok` when its chain verifies; `why`
    is the chain's verdict when it does not."""

    run_id: str
    ok: bool
    why: str | None = None

    @classmethod
    def of(cls, chain: ChainReport) -> Truth:
        return cls(chain.run_id, chain.ok, None if chain.ok else chain.verdict())


def truth_of(store: Store, run_id: str) -> Truth:
    """The truth of one run's row (see the module docstring); a row the journal cannot
    even read is not verified either."""
    try:
        return Truth.of(verify_run(store, run_id))
    except JournalError as exc:
        return Truth(run_id, False, f"its chain cannot be read: {exc}")


def truths(store: Store, run_ids: Iterable[str]) -> dict[str, Truth]:
    """The truth of each run's row, by run id."""
    return {run_id: truth_of(store, run_id) for run_id in dict.fromkeys(run_ids)}


def shown_halt(row: RunRow, truth: Truth, status: str | None = None) -> str:
    """A row's halt as a list shows it: the halt reason (or `(status)` while it has none),
    marked `MARK` when the row is not verified."""
    reason = row.halt_reason.value if row.halt_reason else f"({status or row.status})"
    return reason if truth.ok else f"{reason}{MARK}"


def headline_halt(row: RunRow, truth: Truth) -> str:
    """A row's halt as a headline states it: as recorded when the chain verifies, else
    what the row says, named as unverified, with the chain's verdict."""
    reason = row.halt_reason.value if row.halt_reason else f"no halt ({row.status})"
    if truth.ok:
        return reason
    return f"UNVERIFIED: the run's row says {reason}, and {truth.why}"
