"""An OpenAI-compatible model lane: `POST {base_url}/chat/completions` with tool calling.

vLLM, llama.cpp's server, Ollama, LM Studio and most hosted gateways speak this protocol.
The adapter is data plane only: it advertises the allow-listed tools as functions, turns
the one function call of a reply into `{"tool_call": …}` (message text goes to the parser
as it is) and reports the call's cost from the reply's token `usage`. It decides nothing:
the parser and the guards do.

Every fault fails closed as a `ModelCallFailed` with a named kind (see `FAULTS`); the
runtime journals it with the raw body (truncated) and treats it as a rejection, so a
broken reply can cost a step but never score as success. The API key is read from an
environment variable whose *name* is configured, sent only in the `Authorization` header,
and redacted (`[redacted:NAME]`, see `fsm_agent.redaction`) from everything this module
returns or reports: a reply's text, answer, tool name and arguments, a failed call's body
and message, in any JSON spelling of it. The wire format (messages,
advertised tools, strict reading of replies) is in `fsm_agent.adapters.openai_wire`.
"""

from __future__ import annotations

import functools
import math
import os
import re
import threading
import time
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeGuard

import attrs

from fsm_agent.adapters.models import ModelCallFailed, ModelReply, Prompt, RejectionKind
from fsm_agent.adapters.openai_wire import (
    advertised_tools,
    arguments_of,
    build_messages,
    function_of,
    reply_usage,
    retry_after_s,
    strict_json,
    text_of,
    token_count,
)
from fsm_agent.encoding import wire_json
from fsm_agent.errors import AdapterError
from fsm_agent.redaction import MIN_SECRET_CHARS, NO_SECRETS, Redactor, Secret
from fsm_agent.runtime.lanes import Lane, LaneTier
from fsm_agent.runtime.usage import ModelUsage

if TYPE_CHECKING:
    import ssl

    import httpx

FaultKind = Literal[
    "connect_failed",
    "timeout",
    "connection_reset",
    "http_error",
    "rate_limited",
    "invalid_json",
    "body_too_large",
    "no_choices",
    "bad_tool_call",
    "bad_tool_arguments",
    "several_tool_calls",
]

#: Each fault and the rejection it becomes: no reply came back (`empty_response`), or one
#: came back that is not a proposal (`schema_fail`). A tool name off the allow-list is not
#: a fault here: it reaches the parser as a proposal and the `tool_allowed` guard refuses it.
FAULTS: Mapping[FaultKind, RejectionKind] = {
    "connect_failed": "empty_response",  # no connection (refused, DNS, proxy)
    "timeout": "empty_response",  # no complete reply within the call's own time cap
    "connection_reset": "empty_response",  # the connection dropped mid-exchange
    "http_error": "empty_response",  # HTTP 4xx/5xx (other than 429), or a redirect
    "rate_limited": "empty_response",  # HTTP 429; the next call waits out Retry-After
    "invalid_json": "schema_fail",  # a truncated or invalid JSON body, or not an object
    "body_too_large": "schema_fail",  # the body passed max_body_bytes
    "no_choices": "empty_response",  # no choices, or a first choice with no message
    "bad_tool_call": "schema_fail",  # a tool call with no function name
    "bad_tool_arguments": "schema_fail",  # arguments that are not a JSON object
    "several_tool_calls": "schema_fail",  # more than one tool call in one reply
}

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: How long past the run's deadline the call's own timeouts fire: the worker abandons the
#: call at the deadline (the run halts `wall_clock`); the HTTP client then closes its socket.
GRACE_S = 0.25
#: A call's own cap when it runs outside a run (no wall clock in the prompt).
UNBOUNDED_CALL_S = 300.0


@attrs.frozen
class Endpoint:
    """Where an `openai:MODEL` is served and what it costs.

    `api_key_env` is the NAME of the environment variable holding the key (None for a
    server without auth). Prices are dollars per million input (prompt) and output
    (completion) tokens; with prices, a call whose cost cannot be read from its reply's
    `usage` counts `worst_case_cost`. `read_timeout_s` caps one call (None: the run's wall
    clock is the cap).
    """

    base_url: str
    api_key_env: str | None = None
    tier: LaneTier = "free"
    price_in: float | None = None
    price_out: float | None = None
    worst_case_cost: float | None = None
    connect_timeout_s: float = 10.0
    read_timeout_s: float | None = None
    max_body_bytes: int = 8 * 1024 * 1024


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check(endpoint: Endpoint, spec: str) -> None:
    """Raise `AdapterError` for an endpoint that cannot be used as configured."""
    parts = urllib.parse.urlsplit(endpoint.base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise AdapterError("the base URL must be http(s)://host[:port][/path]", spec=spec)
    if endpoint.tier not in ("free", "paid", "local"):
        raise AdapterError(
            f"lane tier must be free, paid or local, not {endpoint.tier!r}", spec=spec
        )
    prices = (endpoint.price_in, endpoint.price_out)
    if (prices[0] is None) != (prices[1] is None):
        raise AdapterError("give both prices (input and output) or neither", spec=spec)
    if prices[0] is not None:
        if not all(_number(p) and p >= 0 for p in prices):
            raise AdapterError("prices must be finite numbers >= 0", spec=spec)
        worst = endpoint.worst_case_cost
        if worst is None or not _number(worst) or worst <= 0:
            raise AdapterError(
                "with prices, a worst-case cost per call (> 0) is required: it counts a"
                " reply that reports no usage (--worst-case-cost)",
                spec=spec,
            )
    elif endpoint.worst_case_cost is not None:
        raise AdapterError("a worst-case cost applies only with prices", spec=spec)
    for name in ("connect_timeout_s", "read_timeout_s"):
        value = getattr(endpoint, name)
        if value is not None and (not _number(value) or value <= 0):
            raise AdapterError(f"{name} must be a number > 0", spec=spec)
    if isinstance(endpoint.max_body_bytes, bool) or endpoint.max_body_bytes <= 0:
        raise AdapterError("max_body_bytes must be > 0", spec=spec)


def _read_key(name: str | None, spec: str) -> str | None:
    if name is None:
        return None
    if not _ENV_NAME.match(name):  # never echo it: it may be a key pasted by mistake
        raise AdapterError(
            "--api-key-env takes the NAME of an environment variable, not a key", spec=spec
        )
    key = os.environ.get(name, "").strip()
    if not key:
        raise AdapterError(f"environment variable {name} (the API key) is not set", spec=spec)
    if not key.isascii() or not key.isprintable() or any(c.isspace() for c in key):
        # an HTTP header cannot carry it, and the client's error would quote it
        raise AdapterError(f"the API key in {name} is not one printable ASCII word", spec=spec)
    if len(key) < MIN_SECRET_CHARS:  # redacting it would redact ordinary text
        raise AdapterError(
            f"the API key in {name} is shorter than {MIN_SECRET_CHARS} characters", spec=spec
        )
    return key


class OpenAIChatModel:
    """A model behind `POST {base_url}/chat/completions`, on an `http` lane.

    Calls run in the worker's deadline thread; each also sets its own connect and read
    timeouts under the run's remaining wall clock (`Prompt.time_left_s`).
    """

    isolation = "thread"

    def __init__(self, model: str, endpoint: Endpoint) -> None:
        spec = f"openai:{model}"
        if not model.strip() or any(c.isspace() for c in model):
            raise AdapterError("the model name must be non-empty, without spaces", spec=spec)
        _check(endpoint, spec)
        self.model = model
        self.endpoint = endpoint
        self.url = endpoint.base_url.rstrip("/") + "/chat/completions"
        self.lane = Lane(kind="http", tier=endpoint.tier)
        self._key = _read_key(endpoint.api_key_env, spec)
        #: what the runtime redacts from everything the run stores (see fsm_agent.redaction)
        self.secrets: Redactor = NO_SECRETS
        if self._key is not None and endpoint.api_key_env is not None:
            self.secrets = Redactor([Secret(endpoint.api_key_env, self._key)])
        self._lock = threading.Lock()
        # Opened now, so a run's wall clock does not pay for loading the CA certificates.
        self._client: httpx.Client | None = _new_client()
        #: monotonic time before which a 429's Retry-After says not to call again
        self._not_before = 0.0

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.model!r}, {self.url!r}, lane {self.lane})"

    def close(self) -> None:
        """Close the HTTP connection pool (a later call opens a new one)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # --- one call ---------------------------------------------------------------------------

    def __call__(self, prompt: Prompt) -> ModelReply:
        import httpx

        started = time.monotonic()
        wall = math.inf if prompt.time_left_s is None else started + prompt.time_left_s
        cap = self.endpoint.read_timeout_s
        if cap is None:
            cap = UNBOUNDED_CALL_S if prompt.time_left_s is None else math.inf
        deadline = min(started + cap, wall + GRACE_S)
        self._wait_out_rate_limit(wall)
        budget = max(0.001, deadline - time.monotonic())
        timeout = httpx.Timeout(budget, connect=min(self.endpoint.connect_timeout_s, budget))
        request = wire_json(self.request_body(prompt))
        try:
            status, reason, headers, body = self._post(request, timeout, deadline)
        except httpx.TimeoutException as exc:
            raise self._fault("timeout", f"no reply within {budget:.2f} s ({_name(exc)})") from exc
        except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError) as exc:
            raise self._fault("connection_reset", f"{_name(exc)}: {exc}") from exc
        except httpx.TransportError as exc:
            raise self._fault("connect_failed", f"{_name(exc)}: {exc}") from exc
        return self._reply(status, reason, headers, body)

    def request_body(self, prompt: Prompt) -> dict[str, Any]:
        """The JSON sent for `prompt`: the rules and courtesy line, the task, the history."""
        body: dict[str, Any] = {"model": self.model, "messages": build_messages(prompt)}
        tools = advertised_tools(prompt)
        if tools:
            body.update(tools=tools, tool_choice="auto", parallel_tool_calls=False)
        return body

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = _new_client()
            return self._client

    def _post(
        self, request: bytes, timeout: httpx.Timeout, deadline: float
    ) -> tuple[int, str, httpx.Headers, bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key is not None:
            headers["Authorization"] = f"Bearer {self._key}"
        limit = self.endpoint.max_body_bytes
        with self._http().stream(
            "POST", self.url, content=request, headers=headers, timeout=timeout
        ) as response:
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > limit:
                    raise self._fault(
                        "body_too_large",
                        f"the body passed {limit} bytes (HTTP {response.status_code})",
                        raw=bytes(body),
                        cost=self._unknown_cost(),
                    )
                if time.monotonic() > deadline:
                    raise self._fault(
                        "timeout", "the body was still arriving at the call's deadline"
                    )
            return response.status_code, response.reason_phrase, response.headers, bytes(body)

    def _wait_out_rate_limit(self, wall: float) -> None:
        """Wait out a 429's Retry-After before calling again; if the wait would pass the
        run's wall clock, fail at once without sending (the run cannot use that time)."""
        wait = self._not_before - time.monotonic()
        if wait <= 0:
            return
        if time.monotonic() + wait >= wall:
            raise self._fault(
                "rate_limited",
                f"the server's Retry-After window is open for another {wait:.2f} s, past the"
                " run's wall clock: not sent",
            )
        time.sleep(wait)

    # --- the reply ---------------------------------------------------------------------------

    def _reply(self, status: int, reason: str, headers: httpx.Headers, body: bytes) -> ModelReply:
        if status == 429:
            after = retry_after_s(headers.get("retry-after"))
            if after is not None:
                self._not_before = max(self._not_before, time.monotonic() + after)
            note = "no Retry-After" if after is None else f"Retry-After {after:g} s"
            raise self._fault("rate_limited", f"HTTP 429 {reason} ({note})", raw=body)
        if not 200 <= status < 300:
            raise self._fault("http_error", f"HTTP {status} {reason}".rstrip(), raw=body)
        try:
            data = strict_json(body)
        except (ValueError, RecursionError) as exc:
            raise self._fault(
                "invalid_json",
                f"the body is not valid JSON (truncated?): {exc}",
                raw=body,
                cost=self._unknown_cost(),
            ) from exc
        if not isinstance(data, dict):
            raise self._fault(
                "invalid_json",
                f"the body is JSON {type(data).__name__}, not an object",
                raw=body,
                cost=self._unknown_cost(),
            )
        cost = self.cost(data.get("usage"))
        choices = data.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        usage = reply_usage(data, first, self.model)
        message = first.get("message") if isinstance(first, dict) else None
        if not isinstance(message, dict):
            what = "no choices" if first is None else "a first choice with no message"
            raise self._fault("no_choices", f"the reply has {what}", raw=body, cost=cost,
                              usage=usage)  # fmt: skip
        # A reply that echoes the key (in its text, an answer, a tool's name or arguments)
        # is redacted here, before the parser or the journal sees it.
        proposal = self._proposal(message, body, cost, usage)
        return ModelReply(content=self.secrets.value(proposal), cost=cost, usage=usage)

    def _proposal(
        self, message: dict[str, Any], body: bytes, cost: float, usage: ModelUsage
    ) -> Any:
        """The reply for the parser: its one tool call as `{"tool_call": …}`, else its text."""
        calls = message.get("tool_calls")
        if not calls:
            return text_of(message.get("content"))
        if not isinstance(calls, list):
            raise self._fault(
                "bad_tool_call", "tool_calls is not a list", raw=body, cost=cost, usage=usage
            )
        if len(calls) > 1:
            names = ", ".join(str(function_of(c).get("name")) for c in calls)
            raise self._fault(
                "several_tool_calls",
                f"{len(calls)} tool calls in one reply ({names}); one per turn",
                raw=body,
                cost=cost,
                usage=usage,
            )
        function = function_of(calls[0])
        name = function.get("name")
        if not isinstance(name, str) or not name.strip():
            raise self._fault("bad_tool_call", "a tool call with no function name", raw=body,
                              cost=cost, usage=usage)  # fmt: skip
        arguments = function.get("arguments")
        try:
            args = arguments_of(arguments)
        except (ValueError, RecursionError) as exc:
            raise self._fault(
                "bad_tool_arguments",
                f"the arguments of {name!r} are not a JSON object: {exc}",
                raw=body,
                cost=cost,
                usage=usage,
            ) from exc
        return {"tool_call": {"name": name, "args": args}}

    def cost(self, usage: Any) -> float:
        """Dollars for one reply: its token usage at the configured prices; the worst-case
        estimate when prices are set but the usage is missing or unreadable; 0 without prices."""
        price_in, price_out = self.endpoint.price_in, self.endpoint.price_out
        if price_in is None or price_out is None:
            return 0.0
        tokens = usage if isinstance(usage, dict) else {}
        t_in, t_out = (
            token_count(tokens.get("prompt_tokens")),
            token_count(tokens.get("completion_tokens")),
        )
        if t_in is None or t_out is None:
            return self._unknown_cost()
        return (t_in * price_in + t_out * price_out) / 1_000_000

    def _unknown_cost(self) -> float:
        """A call the server may have done work for, with no usage to show: the worst case."""
        return self.endpoint.worst_case_cost or 0.0

    def _fault(
        self,
        kind: FaultKind,
        detail: str,
        *,
        raw: bytes | None = None,
        cost: float | None = None,
        usage: ModelUsage | None = None,
    ) -> ModelCallFailed:
        """The named failure, its raw body and message with the key redacted (before the
        body is cut to size: no piece of it is left at the cut). A call that may have been
        served but returned nothing readable counts the worst case."""
        if cost is None:
            cost = self._unknown_cost() if kind in ("timeout", "connection_reset") else 0.0
        text = None if raw is None else self.secrets.text(raw.decode("utf-8", errors="replace"))
        if usage is None:
            usage = ModelUsage(request_model=self.model, provider="openai")
        return ModelCallFailed(
            kind,
            self.secrets.text(detail),
            raw=text,
            rejection=FAULTS[kind],
            cost=cost,
            usage=usage,
        )


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context per process: loading the CA bundle costs ~100 ms, a client ~0.5 ms."""
    import httpx

    return httpx.create_ssl_context()


def _new_client() -> httpx.Client:
    import httpx  # only runs that call a model server pay for it (it pulls in ssl)

    return httpx.Client(verify=_tls(), follow_redirects=False)


# --- the request ----------------------------------------------------------------------------


def _name(exc: BaseException) -> str:
    return type(exc).__name__
