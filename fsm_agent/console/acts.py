"""Operator acts from the console: pause a run, raise its caps, freeze or lift routing, and
a person's decision on a run that waits (approve, deny, answer: journaled only; the run goes
on with `fsm-agent resume`, which has the model and tools a console does not).

Only a console started with `--allow-operator-acts` has these routes at all. Each act is
queued by the very functions the CLI calls (`fsm_agent.runtime.operator_acts`), so it is
checked and journaled with who and why exactly as `fsm-agent pause` & co. journal it.

A cross-site request cannot act: an act is a POST of JSON (a form of another site cannot
send that type without a preflight this server never answers), it must carry this
process's secret token (in the console's pages only, never in a cookie, so another site
cannot have the browser send it), its Origin must be this console's own, and the Host
header must name this console (checked for every request: no DNS rebinding).
"""

from __future__ import annotations

import secrets
from typing import Any

import attrs

from fsm_agent.errors import InvalidInputError
from fsm_agent.journal.store import Store
from fsm_agent.run_ids import resolve_run_id
from fsm_agent.runtime.budgets import BUDGET_NAMES
from fsm_agent.runtime.operator_acts import queue_pause, queue_raise_budget, queue_routing

#: The acts a console offers, by the name in their URL (`POST /acts/<name>`).
ACTS = ("pause", "raise-budget", "freeze-routing", "unfreeze-routing", "approve", "deny", "answer")
TOKEN_HEADER = "x-console-token"  # noqa: S105 - a header name, not a secret


class Refused(Exception):
    """A request that may not act (HTTP 403), with why."""


def new_token() -> str:
    """A secret for this console process: it is in its pages and nowhere else."""
    return secrets.token_urlsafe(32)


@attrs.frozen
class Guard:
    """What a request must show to act."""

    token: str

    def check(self, method: str, headers: dict[str, str], scheme: str) -> None:
        """Refuse (`Refused`) anything but a same-origin POST of JSON with the token."""
        if method != "POST":
            raise Refused("acts are POST only")
        if not secrets.compare_digest(headers.get(TOKEN_HEADER, ""), self.token):
            raise Refused("missing or wrong console token (reload the console's page)")
        host = headers.get("host", "")
        if headers.get("origin") != f"{scheme}://{host}":
            raise Refused("cross-origin request refused")
        if headers.get("sec-fetch-site", "same-origin") != "same-origin":
            raise Refused("cross-site request refused")
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise Refused("acts are sent as application/json")


def _text(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"{key} must be text")
    return value


def _caps(body: dict[str, Any]) -> dict[str, int | float]:
    caps = body.get("caps")
    if not isinstance(caps, dict):
        raise InvalidInputError("caps must be an object of cap name -> new value")
    asked: dict[str, int | float] = {}
    for name, value in caps.items():
        if name not in BUDGET_NAMES:
            raise InvalidInputError(f"unknown cap {name!r} (known: {', '.join(BUDGET_NAMES)})")
        if value is None or value == "":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidInputError(f"{name} must be a number")
        asked[name] = value
    return asked


def perform(store: Store, act: str, body: dict[str, Any]) -> dict[str, Any]:
    """Queue act `act` as the CLI does; what was queued. `InvalidInputError` when the act
    is refused (as the CLI refuses it: no why, a halted run, a cap that does not rise)."""
    who, why = _text(body, "who"), _text(body, "why") or ""
    if act in ("freeze-routing", "unfreeze-routing"):
        frozen = act == "freeze-routing"
        number = queue_routing(store, frozen, who, why)
        verb = "frozen" if frozen else "unfrozen"
        return {"control": number, "message": f"routing {verb} (#{number})"}
    run_id = resolve_run_id(store, _text(body, "run_id") or "")
    if act == "pause":
        number = queue_pause(store, run_id, who, why)
        return {"control": number, "run_id": run_id,
                "message": f"pause of {run_id} queued (#{number})"}  # fmt: skip
    if act == "raise-budget":
        asked = _caps(body)
        number, current = queue_raise_budget(store, run_id, asked, who, why)
        changes = ", ".join(f"{n} {getattr(current, n)} -> {v}" for n, v in asked.items())
        return {"control": number, "run_id": run_id,
                "message": f"raise-budget #{number} queued: {changes}"}  # fmt: skip
    if act in ("approve", "deny", "answer"):
        from fsm_agent.runtime.decisions import decide_run  # the console drives no run

        decide_run(run_id, act, why=why, by=who, text=_text(body, "text"),  # type: ignore[arg-type]
                   call=_text(body, "call"), model=None, store=store)  # fmt: skip
        return {"run_id": run_id,
                "message": f"{act} of {run_id} journaled; the run waits, paused, for"
                           f" `fsm-agent resume {run_id}` with its model and tools"}  # fmt: skip
    raise InvalidInputError(f"no act {act!r} (acts: {', '.join(ACTS)})")
