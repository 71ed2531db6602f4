"""`package.module:function` references: resolved explicitly, never by magic lookup.

Where a module is looked for, in this order:

1. a module already imported, then the interpreter's import path (`sys.path`: installed
   packages and the standard library, `PYTHONPATH`, and the working directory under
   `python -m`) — exactly as `import` finds it, so a local file never shadows a module the
   process can already import;
2. then the `search` directories the caller gives, in order: for a reference in a machine
   file, that file's directory and then the working directory; for one given on the command
   line (`--tools`, `--model python:…`), the working directory.

A module found in a search directory is imported under its own name (a package's
submodules through the package), without adding the directory to `sys.path`: nothing
changes for the rest of the process. A module that imports a sibling file must therefore
be a package (`from . import helpers`), or be put on `PYTHONPATH`. Two different files
with one module name are refused, not mixed up: the first one imported keeps the name.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from fsm_agent.runtime.interrupts import raised_by_user_code

Search = Sequence[str | os.PathLike[str]]

#: top-level modules this process imported from a search directory: name -> directory
_FOUND_IN: dict[str, Path] = {}
_LOCK = threading.RLock()


class BadReference(LookupError):
    """A reference that does not resolve; the caller turns it into an error naming where."""


def import_module(name: str, search: Search = ()) -> ModuleType:
    """Import an absolute module name (see the module docstring for where it is looked
    for), with every failure as `BadReference`: not found (saying where it looked), found
    but failing while it imports, or two files of one name."""
    if not name or name.startswith(".") or not all(p.isidentifier() for p in name.split(".")):
        raise BadReference(f"{name!r} is not an absolute module name")
    dirs = _directories(search)
    top = name.partition(".")[0]
    try:
        with _LOCK:
            _find_top(top, dirs)
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and _is_prefix(exc.name, name):
            raise BadReference(f"no module named {exc.name!r} ({looked_in(dirs)})") from exc
        raise BadReference(f"importing module {name!r} failed: {exc}") from exc
    except ImportError as exc:
        raise BadReference(f"importing module {name!r} failed: {exc}") from exc
    except BadReference:
        raise
    except BaseException as exc:  # the module itself raised (even sys.exit) while importing
        if not raised_by_user_code(exc):  # a real signal: it stops the process, as it should
            raise
        raise BadReference(f"importing module {name!r} raised {type(exc).__name__}: {exc}") from exc


def check_form(ref: str) -> None:
    """Refuse a reference not of the form `package.module:attribute` (names only, nothing
    imported: how a journaled declaration is read for review, without the author's code)."""
    module_name, sep, attr = ref.partition(":")
    names = module_name.split(".")
    if not sep or not attr.isidentifier() or not all(p.isidentifier() for p in names):
        raise BadReference(f"{ref!r} is not of the form package.module:function")


def resolve_callable(ref: str, search: Search = ()) -> Callable[..., Any]:
    """The callable named by `package.module:attribute` (`search`: see `import_module`)."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not attr:
        raise BadReference(f"{ref!r} is not of the form package.module:function")
    module = import_module(module_name, search)
    fn = getattr(module, attr, None)
    if not callable(fn):
        where = getattr(module, "__file__", None)
        raise BadReference(
            f"module {module_name!r}{f' ({where})' if where else ''} has no callable {attr!r}"
        )
    return fn  # type: ignore[no-any-return]


def working_directory() -> tuple[Path, ...]:
    """The working directory as a search directory (none when it no longer exists)."""
    try:
        return (Path.cwd(),)
    except OSError:
        return ()


def looked_in(dirs: Iterable[Path]) -> str:
    """Where a module was looked for, in words."""
    shown = [str(d) for d in dirs]
    return "looked on the import path (sys.path)" + (
        f", then in {', '.join(shown)}" if shown else ""
    )


def found_in() -> Mapping[str, str]:
    """The modules imported from search directories, by name (for a child process that
    must import them the same way: `adopt`)."""
    with _LOCK:
        return {name: str(d) for name, d in _FOUND_IN.items()}


def adopt(found: Mapping[str, str]) -> None:
    """Import, in this process, the modules another process imported from search
    directories (a spawned child unpickling a tool defined in one)."""
    with _LOCK:
        for name, directory in found.items():
            if name not in sys.modules:
                _load_from(name, Path(directory))


def _directories(search: Search) -> tuple[Path, ...]:
    out: list[Path] = []
    for d in search:
        path = Path(d)
        if not path.is_absolute():
            path = Path(os.path.abspath(path))
        if path not in out:
            out.append(path)
    return tuple(out)


def _is_prefix(missing: str, name: str) -> bool:
    """`missing` is `name` or one of its parent packages (the reference itself is not
    there, as opposed to a module it imports)."""
    return name == missing or name.startswith(missing + ".")


def _find_top(top: str, dirs: tuple[Path, ...]) -> None:
    """Make `top` importable: already imported or on sys.path (nothing to do), else loaded
    from the first search directory that has it (nothing found: the import that follows
    raises ModuleNotFoundError)."""
    first = _first_dir_with(top, dirs) if dirs else None
    if top in sys.modules:
        loaded = _FOUND_IN.get(top)
        if loaded is not None and first is not None and first != loaded:
            raise BadReference(
                f"module {top!r} is already imported from {loaded}; the one in {first} is"
                " another module of the same name (rename one of them)"
            )
        return
    if not dirs or importlib.util.find_spec(top) is not None:
        return
    if first is not None:
        _load_from(top, first)


def _first_dir_with(top: str, dirs: tuple[Path, ...]) -> Path | None:
    for d in dirs:
        if importlib.machinery.PathFinder.find_spec(top, [str(d)]) is not None:
            return d
    return None


def _load_from(top: str, directory: Path) -> None:
    spec = importlib.machinery.PathFinder.find_spec(top, [str(directory)])
    if spec is None or spec.loader is None:
        return  # gone since it was found: the import that follows says "no module"
    module = importlib.util.module_from_spec(spec)
    sys.modules[top] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(top, None)  # a module that failed is not half-imported
        raise
    _FOUND_IN[top] = directory
