"""A person's acts on runs, queued in the store with who and why: a pause, a raised cap, a
routing freeze. The CLI (`pause`, `raise-budget`, `freeze-routing`, `unfreeze-routing`) and
the console (`fsm-agent console --allow-operator-acts`) both act through these functions, so
an act is checked and journaled the same way whoever asks. The run applies it before its
next model call (`fsm_agent.runtime.operator`).
"""

from __future__ import annotations

import getpass
import os
from typing import Any

from fsm_agent.errors import InvalidInputError
from fsm_agent.journal.store import Control, ControlKind, Store
from fsm_agent.runtime.budgets import Budgets, check_budget
from fsm_agent.runtime.journaling import now_iso


def login_name() -> str:
    """Who this process acts for: the login name (`uid N` where the system names none, as a
    container's uid with no passwd entry)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


def signature(who: str | None, why: str) -> tuple[str, str]:
    """Who acts (the login name by default) and when; refuses an act without a why."""
    if not why.strip():
        raise InvalidInputError("--why must say why")
    return (who if who and who.strip() else login_name()), now_iso()


def signed_control(
    run_id: str | None, kind: ControlKind, payload: dict[str, Any], who: str | None, why: str
) -> Control:
    """An operator's act, signed: who (the login name by default), why (required), when."""
    who, at = signature(who, why)
    return Control(id=0, run_id=run_id, kind=kind, payload=payload, who=who, why=why, at=at)


def queue_pause(store: Store, run_id: str, who: str | None, why: str) -> int:
    """Queue a pause of the live run `run_id` (a full id); the control's number. Refused
    (`InvalidInputError`) for a run that is not running."""
    run = store.get_run(run_id)
    if run.status != "running":
        raise InvalidInputError(f"run {run_id} is {run.status}; only a running run pauses")
    return store.add_control(signed_control(run_id, "pause", {}, who, why))


def require_caps(asked: dict[str, int | float]) -> None:
    """Refuse a raise that names no cap."""
    if not asked:
        raise InvalidInputError("say which cap to raise (--max-steps N, --wall-clock-ms N, …)")


def queue_raise_budget(
    store: Store, run_id: str, asked: dict[str, int | float], who: str | None, why: str
) -> tuple[int, Budgets]:
    """Queue a raise of the live run's caps named in `asked`; the control's number and the
    caps it raises from. Refused when no cap is named, the run has halted, or a value does
    not raise its cap."""
    require_caps(asked)
    run = store.get_run(run_id)
    if run.status != "running":
        raise InvalidInputError(
            f"run {run_id} has halted ({run.halt_reason}); only a live run's caps can be raised"
        )
    current = store.last_event(run_id).snapshot.budgets
    for name, value in asked.items():
        if check_budget(name, value) <= getattr(current, name):
            raise InvalidInputError(
                f"{name} {value} does not raise the current {getattr(current, name)}"
            )
    number = store.add_control(signed_control(run_id, "raise_budget", dict(asked), who, why))
    return number, current


def queue_routing(store: Store, frozen: bool, who: str | None, why: str) -> int:
    """Queue a routing freeze (or its lift) for every run on the journal; its number."""
    kind: ControlKind = "freeze_routing" if frozen else "unfreeze_routing"
    return store.add_control(signed_control(None, kind, {}, who, why))
