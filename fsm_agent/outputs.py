"""Where fsm-agent may write a file: one rule for every output path, checked before anything
runs.

An output (a halt record, a trace copy, a run file, a report, a diagram, a directory of
records) is written atomically by renaming a new file over the path, so a wrong path
destroys what is there. A file output must name a regular file or nothing yet — never a
directory, a device, a pipe or a socket, never a SQLite database (the journal, or any
other), never the journal's own path — in a directory this process can write (or can
create: missing parents are made). A directory output must be a directory or nothing yet,
under a directory this process can write. `output_problem` says what is wrong with a path,
`check_output` raises it as invalid input naming the option.

File modes: what holds a whole run — every reply and tool result, so anything a tool
returned that was secret — is created private (0600, whatever the umask): the journal and
its -wal/-shm files, run files (`export`) and trace copies. What is made to be read follows
the umask (0666 less it): halt records, the HTML report, diagrams. A umask of 077 makes
those private too.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from fsm_agent.errors import InvalidInputError

#: The first bytes of every SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"
#: The files SQLite keeps beside a journal.
_JOURNAL_SIDES = ("", "-wal", "-shm", "-journal")


class OutputRefused(InvalidInputError, OSError):
    """An output path that must not be written (a directory, a device, a database, the
    journal …); nothing was written. An `OSError` too, for callers that catch write
    failures."""

    def __init__(self, message: str, *, path: str, what: str | None = None) -> None:
        self.path = path
        self.what = what
        InvalidInputError.__init__(self, f"{what}: {message}" if what else message)

    def __str__(self) -> str:
        return str(self.args[0])


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:  # a parent is a file: said by the parent check
        return None


def is_regular_file(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a regular file; never raises (a name too long to look up is not)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def is_sqlite_file(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a regular file that starts like a SQLite database."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def replace_problem(path: str | os.PathLike[str]) -> str | None:
    """Why the file at `path` must not be replaced by a new one (None: nothing is there, or
    a regular file that is not a database)."""
    try:
        found = _stat(os.fspath(path))
    except OSError as exc:
        return f"cannot be used ({exc.strerror or exc})"
    if found is None:
        return None
    if stat.S_ISDIR(found.st_mode):
        return "is a directory"
    if not stat.S_ISREG(found.st_mode):
        return "is not a regular file (a device, a pipe or a socket); it is never replaced"
    if found.st_size and is_sqlite_file(path):
        return "is a SQLite database (a journal?); it is never replaced by an output"
    return None


def _writable_parent(path: Path) -> str | None:
    """Why no file can be made at `path` (None: its directory exists and is writable, or
    can be made under one that is)."""
    ancestor = path.parent
    while True:
        try:
            found = _stat(str(ancestor))
        except OSError as exc:
            return f"its directory {ancestor} cannot be used ({exc.strerror or exc})"
        if found is not None:
            break
        if ancestor.parent == ancestor:
            return f"no directory above it exists ({ancestor})"
        ancestor = ancestor.parent
    if not stat.S_ISDIR(found.st_mode):
        return f"{ancestor} is not a directory"
    try:  # the only sure test: make a file there (unnamed where the system allows it)
        with tempfile.TemporaryFile(dir=ancestor):
            pass
    except OSError as exc:
        return f"cannot write in {ancestor} ({exc.strerror or exc})"
    return None


def output_problem(path: str | os.PathLike[str], *, directory: bool = False) -> str | None:
    """What is wrong with `path` as an output file (or, with `directory`, an output
    directory); None when it can be written."""
    text = os.fspath(path)
    if not text.strip():
        return "is empty: give a path"
    if "\x00" in text:
        return "holds a NUL character"
    target = Path(text).absolute()
    try:
        found = _stat(text)
    except OSError as exc:
        return f"cannot be used ({exc.strerror or exc})"
    if directory:
        if found is not None:
            if not stat.S_ISDIR(found.st_mode):
                return "is not a directory"
            why = _writable_parent(target / "x")
        else:
            why = _writable_parent(target)
        return None if why is None else f"cannot be written: {why}"
    if text.endswith(("/", os.sep)):
        return "ends with a path separator: name a file"
    problem = replace_problem(text)
    if problem is not None:
        return problem
    why = _writable_parent(target)
    return None if why is None else f"cannot be written: {why}"


def check_output(path: str | os.PathLike[str], what: str, *, directory: bool = False) -> Path:
    """`path` as a `Path`, or `OutputRefused` naming `what` (the option) and the problem."""
    problem = output_problem(path, directory=directory)
    if problem is not None:
        raise OutputRefused(f"{os.fspath(path)!r} {problem}", path=os.fspath(path), what=what)
    return Path(path)


def _same(a: str, b: str) -> bool:
    try:
        if os.path.samefile(a, b):
            return True
    except OSError:
        pass
    return os.path.abspath(a) == os.path.abspath(b)


def check_distinct(
    outputs: Mapping[str, str | os.PathLike[str] | None],
    *,
    journal: str | os.PathLike[str] | None = None,
    inputs: Mapping[str, str | os.PathLike[str] | None] | None = None,
) -> None:
    """Refuse an output that is the journal (a SQLite path, or one of its -wal, -shm and
    -journal files), one of the `inputs`, or another output (`OutputRefused`)."""
    given = [(what, os.fspath(p)) for what, p in outputs.items() if p is not None]
    files: list[tuple[str, str]] = []
    if journal is not None:
        from fsm_agent.stores.dsn import is_dsn

        if not is_dsn(journal):
            files += [("the journal (--db)", os.fspath(journal) + side) for side in _JOURNAL_SIDES]
    files += [(what, os.fspath(p)) for what, p in (inputs or {}).items() if p is not None]
    for n, (what, path) in enumerate(given):
        for other, existing in [*files, *given[:n]]:
            if _same(path, existing):
                raise OutputRefused(
                    f"{path!r} is {other}; an output never replaces it", path=path, what=what
                )


def check_outputs(
    outputs: Mapping[str, str | os.PathLike[str] | None],
    *,
    journal: str | os.PathLike[str] | None = None,
    directories: Iterable[str] = (),
) -> None:
    """Every output of a run checked at once: each by `check_output`, then
    `check_distinct`."""
    dirs = set(directories)
    for what, path in outputs.items():
        if path is not None:
            check_output(path, what, directory=what in dirs)
    check_distinct(outputs, journal=journal)


def journal_file(store: object) -> str | None:
    """The file of a SQLite journal store (None for a server's journal)."""
    from fsm_agent.stores.dsn import is_dsn

    path = store if isinstance(store, str | os.PathLike) else getattr(store, "path", None)
    if not isinstance(path, str | os.PathLike):
        return None
    text = os.fspath(path)
    return text if isinstance(text, str) and not is_dsn(text) else None


def check_run_outputs(
    store: object,
    record_path: str | os.PathLike[str] | None,
    trace_copy: str | os.PathLike[str] | None,
) -> None:
    """A run's halt record and trace copy, checked before the run starts (`OutputRefused`):
    writable, and neither the journal nor each other."""
    check_outputs(
        {"record_path": record_path, "trace_copy": trace_copy}, journal=journal_file(store)
    )
