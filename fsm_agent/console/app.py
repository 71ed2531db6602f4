"""The console's web application (Starlette): its routes, its security headers, and the
one journal connection every request reads through.

Read-only by default: the journal is opened read-only (nothing created, migrated or
written) and there is no route that writes. With `acts=True` the journal is opened for
writing and the act routes exist, guarded as `fsm_agent.console.acts` says.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fsm_agent.console import acts as console_acts
from fsm_agent.console import pages
from fsm_agent.console.live import live_state, stream
from fsm_agent.console.queries import (
    STATUSES,
    RunFilters,
    ToolTimes,
    chart_data,
    run_page,
    step_detail,
)
from fsm_agent.errors import FsmAgentError, InvalidInputError
from fsm_agent.halt import HaltReason
from fsm_agent.journal.store import Store
from fsm_agent.review.report_html import CSS as REPORT_CSS
from fsm_agent.review.report_html import esc
from fsm_agent.run_ids import RunNotFound

T = TypeVar("T")
#: Every response's Content-Security-Policy: scripts, styles and fetches from this origin
#: only; no inline script or style, no plugin, frame, base or foreign form target.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


class SecurityHeaders:
    """Adds `HEADERS` to every response (streams included), and no-store to all but the
    package's static files."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += HEADERS
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


class Journal:
    """The console's one store, read by one worker thread at a time (a SQLite connection
    is not for concurrent use)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.tools = ToolTimes()

    def _locked(self, fn: Callable[[Store], T]) -> T:
        with self.lock:
            return fn(self.store)

    def read(self, fn: Callable[[Store], T]) -> Awaitable[T]:
        """`fn(store)` in a worker thread, under the lock."""
        return anyio.to_thread.run_sync(self._locked, fn)


def _filters(q: dict[str, str]) -> tuple[RunFilters, tuple[str, str] | None]:
    from fsm_agent.review.stats import time_key

    reason = q.get("halt_reason") or None
    status = q.get("status") or None
    if reason is not None and reason not in {r.value for r in HaltReason}:
        raise InvalidInputError(f"no halt reason {reason!r}")
    if status is not None and status not in STATUSES:
        raise InvalidInputError(f"no status {status!r}")
    since, until = q.get("since") or None, q.get("until") or None
    f = RunFilters(
        machine=q.get("machine") or None,
        halt_reason=HaltReason(reason) if reason else None,
        status=status,
        since=None if since is None else time_key(since, what="since"),
        until=None if until is None else time_key(until, what="until"),
        text=q.get("text") or None,
    )
    at, rid = q.get("before_at"), q.get("before_id")
    return f, (at, rid) if at and rid else None


def build_app(store: Store, *, where: str, acts: bool, hosts: tuple[str, ...]) -> Starlette:
    """The console over `store`. `hosts`: the Host header values it answers (`*`: any)."""
    journal = Journal(store)
    guard = console_acts.Guard(console_acts.new_token()) if acts else None
    token = guard.token if guard else None

    def html(title: str, page: str, body: str, status: int = 200) -> HTMLResponse:
        text = pages.layout(title, page, body, token=token, where=where)
        return HTMLResponse(text, status_code=status)

    async def runs(request: Request) -> Response:
        raw = dict(request.query_params.items())
        error = ""
        try:
            f, cursor = _filters(raw)
        except InvalidInputError as exc:
            f, cursor, error = RunFilters(), None, str(exc)
        found = await journal.read(lambda s: run_page(s, f, cursor))
        body = pages.runs_page(found, f, raw, pages.routing_acts() if acts else "", error)
        return html("fsm-agent console: runs", "runs", body, 400 if error else 200)

    async def one_run(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            body = await journal.read(lambda s: _run_body(s, run_id, acts))
        except RunNotFound:
            return html("no such run", "run", "<h1>No such run</h1>", 404)
        return html(f"fsm-agent run {esc(run_id)}", "run", body)

    async def step(request: Request) -> Response:
        run_id, seq = request.path_params["run_id"], int(request.path_params["seq"])
        try:
            data = await journal.read(lambda s: step_detail(s.events(run_id), seq))
        except RunNotFound:
            data = None
        if data is None:
            return JSONResponse({"error": "no such step"}, status_code=404)
        return _json(data)

    async def live(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            await journal.read(lambda s: s.get_run(run_id))
        except RunNotFound:
            return JSONResponse({"error": "no such run"}, status_code=404)
        return StreamingResponse(
            stream(journal.read, run_id), media_type="text/event-stream",
            headers={"x-accel-buffering": "no"},
        )  # fmt: skip

    async def charts(request: Request) -> Response:
        since = request.query_params.get("since") or "7d"
        return html("fsm-agent console: charts", "charts", pages.charts_page(since))

    async def charts_api(request: Request) -> Response:
        from fsm_agent.review.stats import time_key

        try:
            since = time_key(request.query_params.get("since") or "7d")
        except InvalidInputError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return _json(await journal.read(lambda s: chart_data(s, since, journal.tools)))

    async def report_css(request: Request) -> Response:
        return Response(REPORT_CSS, media_type="text/css")

    routes: list[Route | Mount] = [
        Route("/", runs),
        Route("/runs/{run_id}", one_run),
        Route("/charts", charts),
        Route("/api/runs/{run_id}/events/{seq:int}", step),
        Route("/api/runs/{run_id}/live", live),
        Route("/api/charts", charts_api),
        Route("/static/report.css", report_css),
    ]
    if guard is not None:
        routes.append(Route("/acts/{act}", _act_endpoint(journal, guard), methods=["POST"]))
    routes.append(Mount("/static", StaticFiles(directory=static_dir()), name="static"))
    middleware = [
        Middleware(SecurityHeaders),
        Middleware(TrustedHostMiddleware, allowed_hosts=list(hosts)),
    ]
    return Starlette(routes=routes, middleware=middleware)


def _json(data: Any, status: int = 200) -> Response:
    """JSON with `<`, `>`, `&` escaped: safe even if a browser were to sniff it."""
    text = json.dumps(data, ensure_ascii=True, default=str)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return Response(text, status_code=status, media_type="application/json")


def _act_endpoint(
    journal: Journal, guard: console_acts.Guard
) -> Callable[[Request], Awaitable[Response]]:
    async def act(request: Request) -> Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            guard.check(request.method, headers, request.url.scheme)
        except console_acts.Refused as exc:
            return _json({"error": str(exc)}, 403)
        name = request.path_params["act"]
        try:
            body = json.loads(await request.body())
            if not isinstance(body, dict):
                raise InvalidInputError("the body must be a JSON object")
            done = await journal.read(lambda s: console_acts.perform(s, name, body))
        except (ValueError, FsmAgentError) as exc:
            return _json({"error": str(exc)}, 400)
        return _json(done)

    return act


def _run_body(store: Store, run_id: str, acts: bool) -> str:
    from fsm_agent.journal.chain import verify_run
    from fsm_agent.journal.chain_key import key_from_env
    from fsm_agent.review.report import report_sections

    run = store.get_run(run_id)
    events = store.events(run_id)
    state = live_state(store, run_id)
    parts, problem = None, ""
    try:
        parts = report_sections(run, events, verify_run(store, run_id, key=key_from_env()))
    except FsmAgentError as exc:
        problem = f"the report cannot be drawn: {exc}"
    act_forms = pages.run_acts(run_id) if acts and not state["ended"] else ""
    return pages.run_page(run_id, parts, problem, pages.live_panel(state), act_forms)


def static_dir() -> Path:
    """The package's static files (the script, the stylesheet, the chart library)."""
    return Path(str(resources.files("fsm_agent.console") / "static"))
