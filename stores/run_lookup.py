"""How both stores find runs: by id prefix, the latest one, and the filtered list of
`fsm-agent runs` and of the console — the same code for both, only the placeholder style
differs.

Every filter is a fixed SQL fragment with a bound parameter (no identifier is ever built
from input), and the limit is applied after the filters, by the database. The list is
paged by key, not by offset: the next page is the runs before the last one shown in
(started_at, run_id) order, read from an index in that order (see the journals' run-list
indexes), so a page deep in 100,000 runs costs what the first one does. Ids compare as
bytes in both stores (SQLite's BINARY collation, PostgreSQL's "C" on `runs.run_id`), so
the ids with a given prefix are one contiguous range of the primary key's index.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fsm_agent.halt import HaltReason
    from fsm_agent.journal.store import RunRow, RunStatus

#: filter name -> its fragment over `runs AS r` (`{}` is the parameter's placeholder).
_FILTERS = {
    "machine": "r.machine = {}",
    "halt_reason": "r.halt_reason = {}",
    "status": "r.status = {}",
    "since": "r.started_at >= {}",
    "until": "r.started_at <= {}",
    # ASCII case folding in SQLite (its lower()), Unicode in PostgreSQL; `%`, `_` and `\`
    # in the text are matched literally (escaped by `like_pattern`).
    "task_contains": "lower(r.task) LIKE lower({}) ESCAPE '\\'",
}
#: The keyset cursor: runs strictly before (started_at, run_id) in newest-first order.
_BEFORE = "(r.started_at, r.run_id) < ({}, {})"
_NEWEST_FIRST = " ORDER BY r.started_at DESC, r.run_id DESC"


def runs_query(
    select_runs: str,
    placeholder: Callable[[str], str],
    limit: int | None,
    filters: dict[str, str | None],
    before: tuple[str, str] | None = None,
) -> tuple[str, dict[str, Any]]:
    """`select_runs` narrowed by the filters that are set, newest first, at most `limit`
    rows (None: all), only runs before `before` = (started_at, run_id) when it is given.
    `placeholder(name)` is the store's named parameter (`:name`, `%(name)s`)."""
    params: dict[str, Any] = {k: v for k, v in filters.items() if v is not None}
    where = [_FILTERS[name].format(placeholder(name)) for name in _FILTERS if name in params]
    if before is not None:
        params["before_at"], params["before_id"] = before
        where.append(_BEFORE.format(placeholder("before_at"), placeholder("before_id")))
    sql = select_runs + (" WHERE " + " AND ".join(where) if where else "") + _NEWEST_FIRST
    if limit is not None:
        params["limit"] = limit
        sql += f" LIMIT {placeholder('limit')}"
    return sql, params


def like_pattern(text: str) -> str:
    """A LIKE pattern matching `text` anywhere, its `%`, `_` and `\\` taken literally."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class RunLookup:
    """`list_runs`, `run_ids_from` and `latest_run_id` over the store's own reads."""

    #: The store's `SELECT … FROM runs AS r …` of whole rows (`codec.run_row` decodes them).
    SELECT_RUNS_FOR_LIST: str

    if TYPE_CHECKING:  # what the store gives

        def _tuples(self, sql: str, params: Any) -> list[tuple[Any, ...]]: ...
        def _run_rows(self, sql: str, params: dict[str, Any]) -> list[RunRow]: ...
        @staticmethod
        def _placeholder(name: str) -> str: ...

    def list_runs(
        self,
        limit: int | None = 20,
        *,
        machine: str | None = None,
        halt_reason: HaltReason | None = None,
        status: RunStatus | None = None,
        since: str | None = None,
        until: str | None = None,
        task_contains: str | None = None,
        before: tuple[str, str] | None = None,
    ) -> list[RunRow]:
        """Runs newest first, narrowed by every filter given (`since`/`until`: ISO times in
        UTC as the journal writes `started_at`, inclusive; `task_contains`: text in the
        task, case folded), at most `limit` of them; with `before` = (started_at, run_id)
        of the last run of a page, the next page."""
        reason = None if halt_reason is None else str(halt_reason.value)
        text = None if task_contains is None else like_pattern(task_contains)
        filters = {"machine": machine, "halt_reason": reason, "status": status,
                   "since": since, "until": until, "task_contains": text}  # fmt: skip
        sql, params = runs_query(
            self.SELECT_RUNS_FOR_LIST, self._placeholder, limit, filters, before
        )
        return self._run_rows(sql, params)

    def run_ids_from(self, prefix: str, limit: int) -> list[str]:
        """Up to `limit` run ids that start with `prefix`, in byte order: one range read of
        the primary key (the ids with a prefix follow the prefix itself)."""
        p = self._placeholder  # the store's own placeholder syntax; every value is bound
        sql = (
            f"SELECT run_id FROM runs WHERE run_id >= {p('prefix')} ORDER BY run_id LIMIT {p('n')}"  # noqa: S608
        )
        found: list[str] = []
        for (run_id,) in self._tuples(sql, {"prefix": prefix, "n": limit}):
            if not run_id.startswith(prefix):
                break
            found.append(run_id)
        return found

    def latest_run_id(self) -> str | None:
        """The id of the run started last (ties: the greatest id), None for an empty journal."""
        sql = "SELECT run_id FROM runs ORDER BY started_at DESC, run_id DESC LIMIT 1"
        rows = self._tuples(sql, {})
        return None if not rows else str(rows[0][0])
