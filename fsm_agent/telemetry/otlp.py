"""Sending spans: the span values as the OpenTelemetry SDK's `ReadableSpan`s, exported by the
standard OTLP exporter.

The exporter is configured only by the standard environment variables:
`OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `…_HEADERS`,
`…_TIMEOUT`, `…_COMPRESSION`, `…_CERTIFICATE` …, and `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`
/ `OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf` (the default) or `grpc` (with the
`opentelemetry-exporter-otlp-proto-grpc` package). The resource is `service.name=fsm-agent`
unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` say otherwise. `OTEL_SDK_DISABLED=true`
sends nothing.

The OpenTelemetry packages (the `otel` extra) are imported only here, and only when spans
are sent: without them, `require_otel` raises `TracingUnavailable` naming the extra.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from fsm_agent.errors import InvalidInputError
from fsm_agent.telemetry.spans import SCHEMA_URL, SCOPE_NAME, Span

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

INSTALL_HINT: Final = "pip install 'fsm-agent[otel]'"
DEFAULT_PROTOCOL: Final = "http/protobuf"
#: Each protocol's exporter module, and the distribution that ships it.
PROTOCOLS: Final = {
    "http/protobuf": (
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "opentelemetry-exporter-otlp-proto-http",
    ),
    "grpc": (
        "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
        "opentelemetry-exporter-otlp-proto-grpc",
    ),
}
_SDK = (("opentelemetry.trace", "opentelemetry-api"), ("opentelemetry.sdk", "opentelemetry-sdk"))


class TracingUnavailable(InvalidInputError):
    """Traces were asked for, but a package they need is not installed, or the environment
    asks for an OTLP protocol fsm-agent does not send."""


def protocol(environ: Mapping[str, str] | None = None) -> str:
    """The OTLP protocol the environment asks for (traces' own variable first)."""
    env = os.environ if environ is None else environ
    chosen = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    return (chosen or DEFAULT_PROTOCOL).strip().lower()


def disabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether `OTEL_SDK_DISABLED=true` turns every signal off."""
    env = os.environ if environ is None else environ
    return env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require_otel(environ: Mapping[str, str] | None = None) -> str:
    """Check, without importing them, that the packages sending traces need are installed
    and that the protocol is one fsm-agent sends; return the protocol. `TracingUnavailable`
    names what to install."""
    chosen = protocol(environ)
    if chosen not in PROTOCOLS:
        raise TracingUnavailable(
            f"OTLP protocol {chosen!r} (OTEL_EXPORTER_OTLP_PROTOCOL) is not supported: use"
            f" {' or '.join(PROTOCOLS)}"
        )
    missing = [dist for module, dist in (*_SDK, PROTOCOLS[chosen]) if not _installed(module)]
    if missing:
        hint = INSTALL_HINT if chosen == DEFAULT_PROTOCOL else f"{INSTALL_HINT} {missing[-1]}"
        raise TracingUnavailable(
            f"traces need the OpenTelemetry packages ({', '.join(missing)} missing): {hint}"
        )
    return chosen


def preload(environ: Mapping[str, str] | None = None) -> None:
    """Import what sending needs (the SDK, the exporter of the chosen protocol) now, in the
    calling thread: a live run's sending thread then imports nothing while the run goes on
    (an import holds the interpreter for tens of milliseconds)."""
    chosen = require_otel(environ)
    for module in (
        "opentelemetry.trace",
        "opentelemetry.sdk.trace",
        "opentelemetry.sdk.trace.export",
        "opentelemetry.sdk.resources",
        "opentelemetry.sdk.util.instrumentation",
        PROTOCOLS[chosen][0],
    ):
        try:
            importlib.import_module(module)
        except ImportError as exc:  # installed, but broken
            raise TracingUnavailable(f"traces cannot import {module}: {exc}") from exc


class _LastWords(logging.Handler):
    """Keeps the exporter's warnings and errors of one export (why it failed: it returns
    only FAILURE), instead of printing them."""

    #: How much of the exporter's words a reason keeps.
    LIMIT = 400

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a malformed log call: keep the template
            text = str(record.msg)
        if text not in self.said:
            self.said.append(text)

    def reason(self) -> str | None:
        """The cause (the first thing said) and the outcome (the last), cut to `LIMIT`."""
        if not self.said:
            return None
        first, last = self.said[0], self.said[-1]
        text = first if first == last else f"{first}; {last}"
        return text if len(text) <= self.LIMIT else text[: self.LIMIT - 1] + "…"


#: Where the exporter's own log lines go (see `quiet_exporter_logs`).
EXPORTER_WORDS = _LastWords()


def quiet_exporter_logs() -> None:
    """Keep the exporter's own log lines (retries, failures) off stderr: a command reports
    what could not be sent in its own words, with the exporter's last one as the reason
    (`Sender.error`)."""
    logger = logging.getLogger("opentelemetry")
    if EXPORTER_WORDS not in logger.handlers:
        logger.addHandler(EXPORTER_WORDS)
    logger.propagate = False


def reachable(endpoint: str | None, timeout_s: float = 2.0) -> str | None:
    """Why nothing could be sent to `endpoint` (a URL) at the network's level — nothing
    listens, no answer, a name that does not resolve — or None when a connection opens
    (then the endpoint's answer is the reason, in the exporter's words)."""
    import socket
    import urllib.parse

    if not endpoint:
        return None
    parts = urllib.parse.urlsplit(endpoint if "//" in endpoint else f"//{endpoint}")
    host = parts.hostname
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return f"the endpoint {endpoint!r} has no valid port"
    if not host:
        return None
    where = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except ConnectionRefusedError:
        return f"nothing listens at {where} (connection refused)"
    except TimeoutError:
        return f"{where} did not answer within {timeout_s:g} s"
    except socket.gaierror as exc:
        return f"the host name {host!r} does not resolve ({exc.strerror})"
    except OSError as exc:
        return f"cannot connect to {where}: {exc.strerror or exc}"


class Sender:
    """Exports span values through the standard OTLP exporter (see the module's doc)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        chosen = require_otel(environ)
        from opentelemetry.sdk.resources import OTELResourceDetector, Resource
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        from fsm_agent import __version__

        module = importlib.import_module(PROTOCOLS[chosen][0])
        self.exporter: Any = module.OTLPSpanExporter()
        detected = dict(OTELResourceDetector().detect().attributes)
        self.resource = Resource.create(
            {"service.name": "fsm-agent", "service.version": __version__} | detected
        )
        self.scope = InstrumentationScope(SCOPE_NAME, __version__, SCHEMA_URL)
        self.protocol = chosen
        #: why the last failed export failed: the exporter's exception, or its last words
        self.error: str | None = None

    def send(self, spans: Sequence[Span]) -> bool:
        """Export `spans` in one request (with the exporter's own retries, within its
        timeout); True when the backend took them. An exporter that raises (some releases
        do when the endpoint cannot be reached) is a False too, its error in `error`."""
        if not spans:
            return True
        from opentelemetry.sdk.trace.export import SpanExportResult

        readable = [self.readable(s) for s in spans]
        EXPORTER_WORDS.said = []
        try:
            result = self.exporter.export(readable)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            return False
        if result is SpanExportResult.SUCCESS:
            return True
        said = EXPORTER_WORDS.reason() or "the exporter reported a failure"
        reached = reachable(getattr(self.exporter, "_endpoint", None))
        self.error = said if reached is None else f"{reached}; {said}"
        return False

    def close(self) -> None:
        self.exporter.shutdown()

    def readable(self, span: Span) -> ReadableSpan:
        """One span value as the SDK's span, under its own ids."""
        from opentelemetry import trace
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.trace import Status, StatusCode

        def context(span_id: bytes) -> trace.SpanContext:
            return trace.SpanContext(
                trace_id=int.from_bytes(span.trace_id, "big"),
                span_id=int.from_bytes(span_id, "big"),
                is_remote=False,
                trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
            )

        code = {"unset": StatusCode.UNSET, "ok": StatusCode.OK, "error": StatusCode.ERROR}
        why = span.status_description if span.status == "error" else None
        status = Status(code[span.status], why)
        kind = trace.SpanKind.CLIENT if span.kind == "client" else trace.SpanKind.INTERNAL
        return ReadableSpan(
            name=span.name,
            context=context(span.span_id),
            parent=None if span.parent_id is None else context(span.parent_id),
            resource=self.resource,
            attributes=dict(span.attributes),
            events=[Event(e.name, dict(e.attributes), e.time_ns) for e in span.events],
            kind=kind,
            status=status,
            start_time=span.start_ns,
            end_time=span.end_ns,
            instrumentation_scope=self.scope,
        )
