"""What a journaled wait says: a person's decision as signed, and what a `decided` event
carries of the wait it ended (the frozen call's sha256, when the wait would expire). Pure
reads of events, shared by the runtime (`fsm_agent.runtime.decisions`) and review.
"""

from __future__ import annotations

import datetime
from typing import Any, Literal

import attrs

from fsm_agent.journal import serde
from fsm_agent.journal.store import Event
from fsm_agent.runtime.proposals import Proposal, ToolCall
from fsm_agent.runtime.snapshot import call_text

Act = Literal["approve", "deny", "answer"]
#: How a run's first event names who started it, where a policy needs the approver of a
#: privileged call to be someone else.
STARTED_BY = "started by "


@attrs.frozen
class PersonDecision:
    """One person's decision, signed: who, why, when, and for an answer its text; `call` is
    the sha256 of the frozen call the person decided on (checked against the run's)."""

    act: Act
    by: str
    why: str
    at: str
    text: str | None = None
    call: str | None = None


def _reply(event: Event) -> dict[str, Any] | None:
    facts = event.facts
    if event.kind != "decided" or facts is None or not isinstance(facts.reply, dict):
        return None
    return facts.reply


def decision_of(event: Event) -> PersonDecision | None:
    """The person's decision a `decided` event journaled (None: an expiry, or not one)."""
    reply = _reply(event)
    raw = None if reply is None else reply.get("decision")
    if raw is None:
        return None
    try:
        return serde.structure(raw, PersonDecision)
    except (TypeError, ValueError, KeyError, AttributeError):
        return None


def decision_note(decision: PersonDecision, proposal: Proposal | None) -> dict[str, Any] | None:
    """The note a denial or an answer leaves for the model's next prompt (None for an
    approval: the frozen call runs, and its result is the next note)."""
    if decision.act == "deny":
        what = (
            call_text(proposal.name, dict(proposal.args))
            if isinstance(proposal, ToolCall)
            else "the call"
        )
        said = f"a person ({decision.by}) denied {what}; it was not run. Why: {decision.why}"
    elif decision.act == "answer":
        said = f"a person ({decision.by}) answered: {decision.text} (why: {decision.why})"
    else:
        return None
    return {"role": "runtime", "content": said}


def waited_on(event: Event) -> tuple[str | None, str | None]:
    """The frozen call's sha256 and the wait's end (ISO) of the waiting record a `decided`
    event carries; (None, None) when it carries none that reads."""
    reply = _reply(event)
    record = None if reply is None else reply.get("record")
    packet = record.get("handoff") if isinstance(record, dict) else None
    if not isinstance(packet, dict):
        return None, None
    sha, until = packet.get("call_sha256"), packet.get("wait_until")
    return (sha if isinstance(sha, str) else None), (until if isinstance(until, str) else None)


def wait_over(now: str, until: str | None) -> bool:
    """Whether a wait that lasts `until` (ISO time, None: no limit known) is over at `now`."""
    if until is None:
        return False
    return datetime.datetime.fromisoformat(now) > datetime.datetime.fromisoformat(until)


def span(ms: int) -> str:
    """`1d 2h`, `3h 5m`, `4m 10s`, `900 ms`: a duration as people read it."""
    if ms < 1000:
        return f"{ms} ms"
    s = ms // 1000
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    shown = [f"{n}{u}" for n, u in ((d, "d"), (h, "h"), (m, "m"), (s, "s")) if n]
    return " ".join(shown[:2])
