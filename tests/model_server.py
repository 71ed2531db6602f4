"""A real OpenAI-compatible model server for the tests, on 127.0.0.1 in a thread.

It speaks `POST /v1/chat/completions` and plays a script: each request takes the next `Act`
(a reply, a status, a raw body, a hang, a reset …), so a test can make it misbehave in every
way a real server does. It records each request (headers, JSON body, arrival time).

The same acts drive `python_model`, an in-process `python:module:callable` adapter, so the
adapter contract tests can hold both kinds to the same plan.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import attrs

from fsm_agent import ModelReply, Prompt
from fsm_agent.adapters.models import ModelCallFailed


@attrs.frozen
class Act:
    """What the server does with one request."""

    status: int = 200
    body: Any = None  # JSON-able, sent as JSON; or bytes, sent as they are
    headers: tuple[tuple[str, str], ...] = ()
    delay_s: float = 0.0  # wait before answering (a hang, if longer than the client waits)
    reset: bool = False  # drop the connection with a TCP reset instead of answering
    echo_auth: bool = False  # put the request's Authorization header into the body
    #: build the body from the request's bearer token (a server that echoes the key back
    #: inside a reply): a JSON-able value, or bytes sent as they are
    echo: Callable[[str], Any] | None = None


def completion(message: dict[str, Any], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """A chat completion body with one choice carrying `message`."""
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": "test-model",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def tool_call(name: str, args: Any, *, usage: dict[str, Any] | None = None) -> Act:
    """A reply calling one tool; `args` as a dict (sent as JSON text) or as raw text."""
    arguments = args if isinstance(args, str) else json.dumps(args)
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return Act(body=completion({"content": None, "tool_calls": [call]}, usage))


def text(content: str | None, *, usage: dict[str, Any] | None = None) -> Act:
    """A reply whose message is `content` (an answer is the JSON text {"answer": …})."""
    return Act(body=completion({"content": content}, usage))


def answer(value: str, *, usage: dict[str, Any] | None = None) -> Act:
    return text(json.dumps({"answer": value}), usage=usage)


class _Handler(BaseHTTPRequestHandler):
    server: ModelServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet: no access log
        return

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        try:
            request = json.loads(raw)
        except ValueError:
            request = None
        self.server.record(self.path, dict(self.headers), request)
        act = self.server.next_act(self.path)
        if act.delay_s:
            time.sleep(act.delay_s)
        if act.reset:
            linger = struct.pack("ii", 1, 0)  # close with RST, not FIN
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            self.connection.close()
            self.close_connection = True
            return
        body = act.body
        if act.echo_auth:
            body = {"error": {"message": f"bad key: {self.headers.get('Authorization')}"}}
        if act.echo is not None:
            body = act.echo(self.headers.get("Authorization", "").removeprefix("Bearer "))
        data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        try:
            self.send_response(act.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in act.headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (a hang it timed out on)
            self.close_connection = True


class ModelServer(ThreadingHTTPServer):
    """The server; `script` is the list of acts still to play."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: list[Act] = []
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def reset(self) -> None:
        """Forget the script and the requests (between tests sharing one server)."""
        with self._lock:
            self.script.clear()
            self.requests.clear()

    def play(self, *acts: Act) -> None:
        with self._lock:
            self.script.extend(acts)

    def record(self, path: str, headers: dict[str, str], body: Any) -> None:
        with self._lock:
            self.requests.append(
                {"path": path, "headers": headers, "body": body, "at": time.monotonic()}
            )

    def next_act(self, path: str) -> Act:
        with self._lock:
            if path != "/v1/chat/completions":
                return Act(status=404, body={"error": {"message": f"no route {path}"}})
            if not self.script:
                return Act(status=500, body={"error": {"message": "the test script ran out"}})
            return self.script.pop(0)

    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a connection the test reset or the client dropped is not a test failure


S = TypeVar("S", bound=ThreadingHTTPServer)


@contextmanager
def serving(server: S) -> Iterator[S]:
    """`server` serving on a daemon thread; shut down and closed on exit (a hanging handler
    is a daemon thread too). The test servers on 127.0.0.1 all run this way."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.daemon = True
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def model_server() -> contextlib.AbstractContextManager[ModelServer]:
    """A running `ModelServer`; shut down on exit."""
    return serving(ModelServer())


# --- the same plan, in process: a python:module:callable adapter ------------------------------

#: Dollars per million input / output tokens: what both adapter kinds charge in the contract.
PRICE_IN, PRICE_OUT = 2.0, 8.0
#: The acts `python_model` plays, one per call (the contract tests fill it).
PLAN: list[Act] = []
#: The prompts `python_model` was called with.
SEEN: list[Prompt] = []


def python_model(prompt: Prompt) -> ModelReply:
    """Play the next act of `PLAN` the way a hand-written adapter would: a reply becomes its
    proposal (with the cost it reports), and a failed call raises `ModelCallFailed`."""
    SEEN.append(prompt)
    act = PLAN.pop(0) if PLAN else Act(status=500)
    if act.status != 200 or not isinstance(act.body, dict):
        raise ModelCallFailed("http_error", f"HTTP {act.status}", raw=str(act.body))
    message = act.body["choices"][0]["message"]
    usage = act.body.get("usage", {})
    tokens_in, tokens_out = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    cost = (tokens_in * PRICE_IN + tokens_out * PRICE_OUT) / 1_000_000
    calls = message.get("tool_calls")
    if calls:
        function = calls[0]["function"]
        try:
            args = json.loads(function["arguments"])
        except ValueError as exc:
            raise ModelCallFailed(
                "bad_tool_arguments", str(exc), raw=function["arguments"], rejection="schema_fail"
            ) from exc
        return ModelReply({"tool_call": {"name": function["name"], "args": args}}, cost=cost)
    return ModelReply(message.get("content"), cost=cost)
