"""The spans of a trace as plain values, and the ids they are sent under.

No OpenTelemetry import here (nor in the builder): a trace is built without the `otel`
extra, and only `fsm_agent.telemetry.otlp` turns these values into the SDK's spans.

Ids are derived, never random: a run's trace id from its id and start time, each span's id
from the run, the event's sequence number and the span's role. Exporting a run twice (live,
then from the journal, or twice from the journal) sends the same ids, and a backend that keys
spans by id keeps one copy.
"""

from __future__ import annotations

import hashlib
from typing import Final, Literal

import attrs

#: The OpenTelemetry semantic conventions the spans follow: v1.41.0, the last release with
#: the GenAI conventions (docs/gen-ai/gen-ai-spans.md, gen-ai-agent-spans.md) in the main
#: semantic-conventions repository.
SEMCONV_VERSION: Final = "1.41.0"
#: The schema URL of that version, set on the instrumentation scope.
SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
#: The instrumentation scope every span is sent under.
SCOPE_NAME: Final = "fsm_agent"

SpanKind = Literal["internal", "client"]
StatusCode = Literal["unset", "ok", "error"]
#: An attribute value as OpenTelemetry takes one: a primitive or a tuple of one kind.
AttrValue = str | bool | int | float | tuple[str, ...] | tuple[int, ...] | tuple[float, ...]
#: What a span stands for; part of its id (one span per role and event).
SpanRole = Literal["run", "step", "model", "tool"]


@attrs.frozen
class SpanEvent:
    """Something that happened at one moment inside a span (an operator's act, a handoff)."""

    name: str
    time_ns: int
    attributes: dict[str, AttrValue] = attrs.field(factory=dict)


@attrs.frozen
class Span:
    """One span, ready to convert: ids as bytes (16 for the trace, 8 for spans), times in
    nanoseconds since the epoch."""

    name: str
    trace_id: bytes
    span_id: bytes
    parent_id: bytes | None
    start_ns: int
    end_ns: int
    kind: SpanKind = "internal"
    attributes: dict[str, AttrValue] = attrs.field(factory=dict)
    events: tuple[SpanEvent, ...] = ()
    status: StatusCode = "unset"
    status_description: str | None = None


def _digest(*parts: str, size: int) -> bytes:
    """The first `size` bytes of sha256 over `parts`, each ended by a NUL; never all zero
    (an all-zero id is invalid in OpenTelemetry)."""
    data = "".join(f"{p}\0" for p in parts).encode("utf-8", "surrogatepass")
    raw = hashlib.sha256(data).digest()[:size]
    return raw if any(raw) else b"\x00" * (size - 1) + b"\x01"


def trace_id(run_id: str, started_at: str) -> bytes:
    """A run's trace id: 16 bytes of sha256("fsm-agent/trace", run id, start time)."""
    return _digest("fsm-agent/trace", run_id, started_at, size=16)


def span_id(run_id: str, started_at: str, seq: int, role: SpanRole) -> bytes:
    """One span's id: 8 bytes of sha256("fsm-agent/span", run id, start time, seq, role)."""
    return _digest("fsm-agent/span", run_id, started_at, str(seq), role, size=8)
