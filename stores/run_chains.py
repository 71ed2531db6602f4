"""What a store knows of the runs it appends to: each run's head, chain key and version, and
what its events are written against — read from the journal once per run, the same way
by both stores (only their SQL differs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsm_agent.errors import JournalError
from fsm_agent.journal.chain_hash import chain_version
from fsm_agent.runtime.snapshot import Snapshot
from fsm_agent.stores import codec


class RunChains:
    """A store's per-run chain state; the store gives its SQL and its reads."""

    #: The store's query for a run's chain mode (one parameter: the run id).
    SELECT_CHAIN: str
    chain_key: bytes | None

    def _init_chains(self) -> None:
        self._heads: dict[str, str] = {}  # run id -> head hash this store last wrote
        # run id -> the key its chain is made with (None: unkeyed) and its chain version
        self._modes: dict[str, tuple[bytes | None, int]] = {}
        # run id -> what its events are written against (chain version 4: `codec.base_form`)
        self._bases: dict[str, Snapshot | None] = {}

    if TYPE_CHECKING:  # what the store gives

        def _error(self, message: str, run_id: str | None = None) -> JournalError: ...
        def _tuples(self, sql: str, params: Any) -> list[tuple[Any, ...]]: ...
        def _first_row(self, run_id: str) -> Any: ...

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
