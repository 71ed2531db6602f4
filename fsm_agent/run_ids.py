"""Run ids: what one may be, checked where it enters (`run(run_id=…)`, the queue's
`submit`, `import`), and how one is shown and turned into a file name.

A run id is 1 to 64 characters: an ASCII letter or digit, then letters, digits, `.`, `_`
or `-` (`RUN_ID_GRAMMAR`). Generated ids are 12 hex digits. An id outside the grammar can
only be in a journal written before it was enforced: such a run is still read by every
command; its records are named from a hash of the id (`record_stem`), so no id can make a
file land outside the directory it is meant for.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from fsm_agent.errors import InvalidInputError

#: The grammar of a run id (a regular expression over the whole id).
RUN_ID_GRAMMAR = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
MAX_RUN_ID_CHARS = 64
_RUN_ID = re.compile(RUN_ID_GRAMMAR)
#: How much of an id a message quotes.
_SHOWN_CHARS = 64


class BadRunId(InvalidInputError):
    """A run id outside the grammar (`RUN_ID_GRAMMAR`); nothing was written."""

    def __init__(self, run_id: Any, *, where: str = "run id") -> None:
        self.run_id = run_id
        super().__init__(
            f"{where} {shown_run_id(run_id)} is not a run id: 1 to {MAX_RUN_ID_CHARS}"
            " characters, an ASCII letter or digit first, then letters, digits, '.', '_'"
            " or '-'"
        )


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
    a NUL in it) is not a file."""
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
