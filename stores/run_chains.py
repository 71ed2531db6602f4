"""What a store knows of the runs it appends to: each run's head, chain key and version, and
what its events are written against — read from the journal once per run, the same way
by both stores (only their SQL differs); and the witness a writing store appends each
committed head to (`fsm_agent.journal.witness`)."""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from fsm_agent.errors import JournalError
from fsm_agent.journal.chain_hash import ChainLink, chain_version
from fsm_agent.journal.store import Event, RunRow, RunStatus
from fsm_agent.journal.witness import WITNESS_ENV, WitnessWriter, open_witness
from fsm_agent.runtime.snapshot import Snapshot
from fsm_agent.stores import codec


def store_witness(
    path: str | os.PathLike[str] | None, key: bytes | None, read_only: bool
) -> WitnessWriter | None:
    """The witness a store appends to: the file `path`, or else `$FSM_AGENT_WITNESS`; none
    for a store opened only to read. Opened before the journal is, so a witness that cannot
    be used refuses the store before anything is written."""
    if read_only:
        return None
    return open_witness(path if path is not None else os.environ.get(WITNESS_ENV), key)


class RunChains:
    """A store's per-run chain state; the store gives its SQL and its reads."""

    #: The store's query for a run's chain mode (one parameter: the run id).
    SELECT_CHAIN: str
    #: The store's compare-and-set of a waiting run's row (`Store.reopen_run`), and its
    #: insert of one event onto the run's head (the event's columns, then `_onto`'s).
    REOPEN_RUN: str
    APPEND_EVENT: str
    chain_key: bytes | None

    def _init_chains(self, witness: WitnessWriter | None = None) -> None:
        #: the witness this store appends each committed head to (None: none)
        self.witness = witness
        self._heads: dict[str, str] = {}  # run id -> head hash this store last wrote
        # run id -> the key its chain is made with (None: unkeyed) and its chain version
        self._modes: dict[str, tuple[bytes | None, int]] = {}
        # run id -> what its events are written against (chain version 4: `codec.base_form`)
        self._bases: dict[str, Snapshot | None] = {}

    if TYPE_CHECKING:  # what the store gives

        def _error(self, message: str, run_id: str | None = None) -> JournalError: ...
        def _tuples(self, sql: str, params: Any) -> list[tuple[Any, ...]]: ...
        def _first_row(self, run_id: str) -> Any: ...
        def chain(self, run_id: str) -> tuple[RunRow, list[ChainLink], str | None]: ...
        def _head(self, run_id: str) -> str: ...
        def _tx(self, run_id: str | None) -> AbstractContextManager[Any]: ...
        def _onto(self, run_id: str, seq: int, prev: str, version: int) -> tuple[Any, ...]: ...

    def reopen_run(
        self,
        event: Event,
        *,
        seal: str,
        pid: int | None,
        host: str | None,
        status: RunStatus = "running",
    ) -> str | None:
        """One transaction: the row's compare-and-set on the record's seal and the sealed
        head, then `event` inserted onto that head (see `Store.reopen_run`)."""
        run_id = event.run_id
        self._heads.pop(run_id, None)
        prev = self._head(run_id)
        key, version = self._mode(run_id)
        base = self._base(run_id) if version >= 4 else None
        rows, head = codec.chained_batch((event,), prev, key, version, base, self._error)
        params = {"run_id": run_id, "seal": seal, "head": prev, "pid": pid, "host": host,
                  "status": status}  # fmt: skip
        onto = self._onto(run_id, event.seq - 1, prev, version)
        try:
            with self._tx(run_id) as conn:
                if conn.execute(self.REOPEN_RUN, params).rowcount != 1:
                    raise codec.StaleHead
                if conn.execute(self.APPEND_EVENT, (*rows[0], *onto)).rowcount != 1:
                    raise codec.StaleHead
        except codec.StaleHead:
            return None
        self._heads[run_id] = head
        self._witnessed(run_id, event.seq, head)
        return head

    def _mode(self, run_id: str) -> tuple[bytes | None, int]:
        """The key the run's chain is made with, and its version (read once per run)."""
        if run_id not in self._modes:
            rows = self._tuples(self.SELECT_CHAIN, (run_id,))
            chain = rows[0][0] if rows else None
            key = codec.chain_key(chain, self.chain_key, self._error, run_id)
            self._modes[run_id] = (key, chain_version(chain))
        return self._modes[run_id]

    def _base(self, run_id: str) -> Snapshot | None:
        """What the run's events are written against from chain version 4 (read once)."""
        if run_id not in self._bases:
            first = self._first_row(run_id)
            event = None if first is None else codec.event(first, self._error)
            self._bases[run_id] = None if event is None else codec.base_form(event)
        return self._bases[run_id]

    def _witnessed(self, run_id: str, seq: int, head: str | None, seal: str | None = None) -> None:
        """Append a committed head to the witness (after its commit: the journal is never
        behind its witness). A line that cannot be written is a journal failure: the run
        stops rather than go on unwitnessed."""
        if self.witness is None or head is None:
            return
        try:
            self.witness.saw(run_id, seq, head, seal)
        except OSError as exc:
            raise self._error(
                f"committed seq {seq}, but the witness {self.witness.path} could not be"
                f" appended to ({getattr(exc, 'strerror', None) or exc})",
                run_id,
            ) from exc

    def _witness_import(self, run_id: str) -> None:
        """Witness an imported run as this journal now holds it: its head, and its seal."""
        if self.witness is None:
            return
        run, links, head = self.chain(run_id)
        if links:
            sealed = run.record_hash if run.status == "halted" else None
            self._witnessed(run_id, links[-1].seq, head or links[-1].hash, sealed)

    def _close_witness(self) -> None:
        if self.witness is not None:
            self.witness.close()
