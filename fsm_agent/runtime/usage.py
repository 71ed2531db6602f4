"""What one model call used: tokens, the model asked and the model that answered, why it
stopped, and how long it took. Journaled with every model call (`Facts.usage`), it is what
`show`, the report, `stats` and the traces (`fsm_agent.telemetry`) read.

An adapter reports what it knows in `ModelReply.usage` (or `ModelCallFailed.usage`); the
runtime adds the latency it measured itself. A count the adapter does not report stays
None: it is never guessed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from fsm_agent.redaction import Redactor

#: How much of a model name or finish reason is kept (a server may send anything there).
MAX_NAME_CHARS = 200


def _count(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{attribute.name} must be a whole number >= 0 or None, not {value!r}")


def _name(value: Any) -> str | None:
    """A model name or finish reason as an adapter reported it: text; None when the server
    sent none (or not text). `call_usage` cuts it to MAX_NAME_CHARS, once its secrets are
    redacted (a cut made first could leave a piece of a secret that no longer matches)."""
    if not isinstance(value, str) or not value:
        return None
    return value


@attrs.frozen
class ModelUsage:
    """One model call's usage, as the adapter reported it plus the latency the run measured.

    `input_tokens` / `output_tokens`: the server's counts (None when it sent none).
    `request_model`: the model the adapter asked for; `response_model`: the one the server
    says answered. `finish_reason`: why the server says generation stopped (`stop`,
    `length`, `tool_calls` …). `provider`: who serves it (`openai` for the
    OpenAI-compatible lane). `latency_ms`: the call's time as the run measured it (set by
    the runtime, whatever the adapter says).
    """

    input_tokens: int | None = attrs.field(default=None, validator=_count)
    output_tokens: int | None = attrs.field(default=None, validator=_count)
    request_model: str | None = attrs.field(default=None, converter=_name)
    response_model: str | None = attrs.field(default=None, converter=_name)
    response_id: str | None = attrs.field(default=None, converter=_name)
    finish_reason: str | None = attrs.field(default=None, converter=_name)
    provider: str | None = attrs.field(default=None, converter=_name)
    latency_ms: int = attrs.field(default=0, validator=_count)


def call_usage(model: Any, reported: Any, elapsed_ms: int, secrets: Redactor) -> ModelUsage:
    """The usage journaled for one model call: what the adapter reported (when it is a
    `ModelUsage`), the model it asked for when the adapter names one (`model.model`), and
    the latency the run measured. The names a server sent are redacted like its reply, then
    cut to MAX_NAME_CHARS."""
    usage = reported if isinstance(reported, ModelUsage) else ModelUsage()
    if usage.request_model is None:
        name = getattr(model, "model", None)
        usage = attrs.evolve(usage, request_model=name if isinstance(name, str) else None)

    def clean(text: str | None) -> str | None:
        return None if text is None else secrets.text(text)[:MAX_NAME_CHARS]

    return attrs.evolve(
        usage,
        request_model=clean(usage.request_model),
        response_model=clean(usage.response_model),
        response_id=clean(usage.response_id),
        finish_reason=clean(usage.finish_reason),
        provider=clean(usage.provider),
        latency_ms=max(0, int(elapsed_ms)),
    )


@attrs.frozen
class UsageTotals:
    """The model calls of a run (or of many) added up. Token totals count only the calls
    that reported them: `calls_with_tokens` says how many did."""

    calls: int = 0
    calls_with_tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def total(usages: Iterable[ModelUsage]) -> UsageTotals:
    """`usages` added up."""
    calls = with_tokens = t_in = t_out = latency = 0
    for u in usages:
        calls += 1
        latency += u.latency_ms
        if u.input_tokens is not None or u.output_tokens is not None:
            with_tokens += 1
            t_in += u.input_tokens or 0
            t_out += u.output_tokens or 0
    return UsageTotals(calls, with_tokens, t_in, t_out, latency)
