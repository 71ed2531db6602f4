"""What `fsm-agent verify` can find: each kind of tampering, and where it shows (a sequence
number, and for the run row and the halt record, the field; `witness` for what only the
witness shows)."""

from __future__ import annotations

from typing import Final, Literal

import attrs

TamperKind = Literal[
    "edited",
    "deleted",
    "inserted",
    "reordered",
    "truncated",
    "run_edited",
    "unchained",
    "machine_edited",
    "record_edited",
    "summary_edited",
    "record_missing",
    "wrong_key",
    "not_keyed",
    "reopened",
    "rewritten",
    "run_deleted",
    "witness_forged",
]

#: What each kind of finding means, for people reading `fsm-agent verify`.
MEANING: Final[dict[TamperKind, str]] = {
    "edited": "the event's bytes do not match its hash (its payload was changed)",
    "deleted": "an event is missing here (deleted)",
    "inserted": "this event is not in the chain (inserted)",
    "reordered": "events are out of chain order (reordered)",
    "truncated": "the run's head hash names an event that is not there (tail truncated)",
    "run_edited": "the run row (task, budgets, machine or start) does not match the chain",
    "unchained": "the event carries no hash (written before the chain, or its hash removed)",
    "machine_edited": "the stored declaration does not match its sha256 (it was edited)",
    "record_edited": "the halt record does not match the seal chained onto the run's head"
    " (a field of it was edited)",
    "summary_edited": "the run row's summary does not match the chained halt and record",
    "record_missing": "the journal holds no halt record for this run",
    "wrong_key": "the key given is not the key this run was chained with",
    "not_keyed": "the run's chain is not keyed (anyone who can write the journal could have"
    " recomputed it)",
    "reopened": "the run goes on past a halt that no person's decision on a wait continued,"
    " or the witness saw it halt and the journal shows it not halted (its record, seal and"
    " tail removed)",
    "rewritten": "the event or seal the witness saw at this seq is not the journal's (the"
    " run was rewritten)",
    "run_deleted": "the witness saw this run, and the journal does not hold it (deleted)",
    "witness_forged": "a witness line claims the key but is not signed with it (forged or edited)",
}


@attrs.frozen
class Finding:
    """One kind of tampering, at the first sequence number it shows (and the field of the
    run row or halt record, for those)."""

    kind: TamperKind
    seq: int
    detail: str
    field: str | None = None

    def line(self) -> str:
        """`seq 4: summary_edited (runs.halt_reason): …`, as `fsm-agent verify` prints it."""
        where = f" ({self.field})" if self.field else ""
        return f"seq {self.seq}: {self.kind}{where}: {self.detail}"


class Findings:
    """The first finding of each kind (of each kind and field, for the row and record)."""

    def __init__(self) -> None:
        self.first: dict[tuple[TamperKind, str | None], Finding] = {}
        self.moved: set[int] = set()  # positions of events found out of chain order

    def __call__(
        self, kind: TamperKind, seq: int, detail: str = "", field: str | None = None
    ) -> None:
        self.first.setdefault((kind, field), Finding(kind, seq, detail or MEANING[kind], field))

    def has(self, kind: TamperKind) -> bool:
        """Whether a finding of `kind` was made (of any field)."""
        return any(k == kind for k, _ in self.first)

    def ordered(self) -> tuple[Finding, ...]:
        return tuple(sorted(self.first.values(), key=lambda f: (f.seq, f.kind, f.field or "")))
