"""`package.module:function` references: resolved explicitly, never by magic lookup."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from fsm_agent.runtime.interrupts import raised_by_user_code


class BadReference(LookupError):
    """A reference that does not resolve; the caller turns it into an error naming where."""


def import_module(name: str) -> ModuleType:
    """Import an absolute module name, with every failure as `BadReference`."""
    if not name or name.startswith(".") or not all(p.isidentifier() for p in name.split(".")):
        raise BadReference(f"{name!r} is not an absolute module name")
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise BadReference(f"cannot import module {name!r}: {exc}") from exc
    except BaseException as exc:  # the module itself raised (even sys.exit) while importing
        if not raised_by_user_code(exc):  # a real signal: it stops the process, as it should
            raise
        raise BadReference(f"importing module {name!r} raised {type(exc).__name__}: {exc}") from exc


def resolve_callable(ref: str) -> Callable[..., Any]:
    """The callable named by `package.module:attribute`."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not attr:
        raise BadReference(f"{ref!r} is not of the form package.module:function")
    fn = getattr(import_module(module_name), attr, None)
    if not callable(fn):
        raise BadReference(f"module {module_name!r} has no callable {attr!r}")
    return fn  # type: ignore[no-any-return]
