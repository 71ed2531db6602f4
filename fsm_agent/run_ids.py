"""Run ids: what one may be, checked where it enters (`run(run_id=…)`, the queue's
`submit`, `import`), and how one is shown and turned into a file name.

A run id is 1 to 64 characters: an ASCII letter or digit, then letters, digits, `.`, `_`
or `-` (`RUN_ID_GRAMMAR`). Generated ids are 12 hex digits. An id outside the grammar can
only be in a journal written before it was enforced: such a run is still read by every
command; its records are named from a hash of the id (`record_stem`), so no id can make a
file land outside the directory it is meant for.

Where a command takes a RUN_ID, it may give a unique prefix of one (`3f2a` for
`3f2a9c0d1e4b`; a whole id always names its own run, even when it is the prefix of
another), or `@latest`, the run started last on that journal (`resolve_run_id`). `@` is
outside the grammar, so `@latest` can never be a run's own id.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fsm_agent.errors import InvalidInputError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from fsm_agent.journal.store import Store

#: The grammar of a run id (a regular expression over the whole id).
RUN_ID_GRAMMAR = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
MAX_RUN_ID_CHARS = 64
_RUN_ID = re.compile(RUN_ID_GRAMMAR)
#: How much of an id a message quotes.
_SHOWN_CHARS = 64
#: The name of the run started last on a journal, wherever a RUN_ID is taken.
LATEST = "@latest"
#: How many of the runs an ambiguous prefix names a message lists.
CANDIDATES_SHOWN = 10


class BadRunId(InvalidInputError):
    """A run id outside the grammar (`RUN_ID_GRAMMAR`); nothing was written."""

    def __init__(self, run_id: Any, *, where: str = "run id") -> None:
        self.run_id = run_id
        super().__init__(
            f"{where} {shown_run_id(run_id)} is not a run id: 1 to {MAX_RUN_ID_CHARS}"
            " characters, an ASCII letter or digit first, then letters, digits, '.', '_'"
            " or '-'"
        )


class AmbiguousRunId(InvalidInputError):
    """A run id prefix that more than one run's id starts with; nothing was done."""

    def __init__(self, prefix: str, candidates: Sequence[str], *, more: bool, path: str) -> None:
        self.prefix = prefix
        self.candidates = tuple(candidates)
        self.path = path
        listed = ", ".join(candidates) + (", …" if more else "")
        super().__init__(
            f"run id prefix {shown_run_id(prefix)} is ambiguous in {path}: it starts"
            f" {'more than ' if more else ''}{len(candidates)} runs' ids ({listed});"
            " give more of the id"
        )


class NoRunsYet(InvalidInputError):
    """`@latest` on a journal that holds no run."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"{LATEST}: no run in {path} yet")


def resolve_run_id(store: Store, given: str) -> str:
    """The one run id `given` names in `store`: `@latest` (the run started last), the id
    itself, or the only id it is a prefix of. `RunNotFound` when none is, `AmbiguousRunId`
    (listing them) when several are, `NoRunsYet` for `@latest` on an empty journal."""
    if given == LATEST:
        latest = store.latest_run_id()
        if latest is None:
            raise NoRunsYet(store.location)
        return latest
    found = store.run_ids_from(given, CANDIDATES_SHOWN + 1) if given else []
    if len(found) == 1 or (found and found[0] == given):  # a whole id names its own run
        return found[0]
    if not found:
        raise RunNotFound(given, path=store.location)
    more = len(found) > CANDIDATES_SHOWN
    raise AmbiguousRunId(given, found[:CANDIDATES_SHOWN], more=more, path=store.location)


def is_run_id(value: Any) -> bool:
    """Whether `value` is a run id under the grammar."""
    return isinstance(value, str) and _RUN_ID.fullmatch(value) is not None


def check_run_id(value: Any, *, where: str = "run id") -> str:
    """`value` if it is a run id, else `BadRunId` naming `where`."""
    if not is_run_id(value):
        raise BadRunId(value, where=where)
    return str(value)


def shown_run_id(value: Any) -> str:
    """An id as a message quotes it: `repr`, cut to 64 characters with its length said."""
    if not isinstance(value, str):
        return f"of type {type(value).__name__}"
    if len(value) <= _SHOWN_CHARS:
        return repr(value)
    return f"{value[:_SHOWN_CHARS]!r}… ({len(value):,} characters)"


def names_a_file(source: str) -> bool:
    """Whether a RUN_ID|FILE argument names a run file (it ends in `.json` or is a file)
    rather than a run id. Never raises: a name the system cannot even look up (too long,
    a NUL in it) is not a file; `@latest` never is."""
    if source == LATEST:
        return False
    if source.endswith(".json"):
        return True
    try:
        return Path(source).is_file()
    except (OSError, ValueError):
        return False


def record_stem(run_id: str) -> str:
    """The name a file of this run starts with: the id itself when it is under the grammar
    (it has no `/`, does not start with `.`), else `run-` and 16 hex digits of its sha256."""
    if is_run_id(run_id):
        return run_id
    return "run-" + hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class RunNotFound(InvalidInputError):
    """No run with that id exists in the journal."""

    def __init__(self, run_id: str, *, path: str) -> None:
        self.run_id = run_id
        self.path = path
        message = f"no run {shown_run_id(run_id)} in {path}"
        if not is_run_id(run_id):  # say why it cannot be one (a journal may still hold it)
            message = f"no run in {path} has that id: {BadRunId(run_id)}"
        super().__init__(f"{message} (list them with `fsm-agent runs`)")
