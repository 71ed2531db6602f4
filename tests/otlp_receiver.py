"""A real OTLP/HTTP receiver for the trace tests, on 127.0.0.1 in a thread.

It takes `POST /v1/traces` (protobuf `ExportTraceServiceRequest`) and keeps every span it
was sent, and every request's body as it came; with `hang_s` it accepts each request and
answers only after that long (a backend that is up but never answers in time).
"""

from __future__ import annotations

import contextlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.model_server import serving


class _Handler(BaseHTTPRequestHandler):
    server: OtlpReceiver

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.count(self.path, dict(self.headers), body)
        if self.server.hang_s:
            time.sleep(self.server.hang_s)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.server.keep(request)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()
        except OSError:
            self.close_connection = True


class OtlpReceiver(ThreadingHTTPServer):
    """The receiver: `requests` counts every request, `bodies` holds their bodies' bytes,
    `spans` holds what was sent (each span as a dict with its resource and scope)."""

    daemon_threads = True

    def __init__(self, hang_s: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hang_s = hang_s
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.bodies: list[bytes] = []
        self.spans: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def count(self, path: str, headers: dict[str, str], body: bytes) -> None:
        with self._lock:
            self.requests.append((path, headers))
            self.bodies.append(body)

    def keep(self, request: Any) -> None:
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                scope = scope_spans.scope
                for span in scope_spans.spans:
                    found.append({
                        "name": span.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_id": span.parent_span_id.hex() or None,
                        "kind": span.kind,
                        "start_ns": span.start_time_unix_nano,
                        "end_ns": span.end_time_unix_nano,
                        "attributes": {a.key: _value(a.value) for a in span.attributes},
                        "events": [(e.name, {a.key: _value(a.value) for a in e.attributes})
                                   for e in span.events],
                        "status": (span.status.code, span.status.message),
                        "resource": resource,
                        "scope": (scope.name, scope.version, scope_spans.schema_url),
                    })  # fmt: skip
        with self._lock:
            self.spans.extend(found)

    def handle_error(self, request: Any, client_address: Any) -> None:
        return


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    return getattr(value, kind) if kind else None


def otlp_receiver(hang_s: float = 0.0) -> contextlib.AbstractContextManager[OtlpReceiver]:
    """A running `OtlpReceiver` (answering after `hang_s`); shut down on exit."""
    return serving(OtlpReceiver(hang_s))
