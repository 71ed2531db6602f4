"""The console's web application (Starlette): its endpoints (`fsm_agent.console.routes`),
the package's static files, and the security headers every response carries.

Read-only by default: the journal is opened read-only by the command (nothing created,
migrated or written) and there is no route that writes. With `acts=True` the journal is
opened for writing and the act route exists, guarded as `fsm_agent.console.acts` says.
Every request's Host header must be one of the names the console answers
(`fsm_agent.console.hosts`; no DNS rebinding), or it gets a 400 and nothing else.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from importlib import resources
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fsm_agent.console.acts import Guard, new_token
from fsm_agent.console.hosts import header_name
from fsm_agent.console.routes import Endpoints, Journal
from fsm_agent.journal.store import Store

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


class SecurityHeaders:
    """Adds `HEADERS` to every response (streams and errors included), and no-store to all
    but the package's static files."""

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


class HostCheck:
    """Passes on only a request with one Host header naming one of `hosts` (in
    `fsm_agent.console.hosts.host_form`, any port); any other gets a plain-text 400 that
    says why, before any route (no page, no token, no act)."""

    def __init__(self, app: ASGIApp, hosts: tuple[str, ...]) -> None:
        self.app = app
        self.hosts = frozenset(hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = [value.decode("latin-1") for key, value in scope["headers"] if key == b"host"]
        if len(given) == 1 and header_name(given[0]) in self.hosts:
            await self.app(scope, receive, send)
            return
        shown = f"Host {given[0][:100]!r}" if given else "a request with no Host header"
        if len(given) > 1:
            shown = f"{len(given)} Host headers"
        why = (
            f"this console does not answer to {shown}: it answers only the names it was"
            " started with (no DNS rebinding). Open it by one of those, or restart it with"
            " --allowed-host NAME.\n"
        )
        await PlainTextResponse(why, status_code=400)(scope, receive, send)


def build_app(
    store: Store,
    *,
    where: str,
    acts: bool,
    hosts: tuple[str, ...],
    readers: Callable[[], Store] | None = None,
) -> Starlette:
    """The console over `store` (`where`: the journal as its pages name it). `acts`: offer
    operator acts; `hosts`: the names it answers (`fsm_agent.console.hosts.answered_hosts`);
    `readers`: opens a read-only store of the same journal, for the pages of single runs
    (`Journal.read_run`; without it they are read on `store`, one at a time)."""
    guard = Guard(new_token()) if acts else None
    journal = Journal(store, readers)
    routes: list[BaseRoute] = list(Endpoints(journal, where, guard).routes())
    routes.append(Mount("/static", StaticFiles(directory=static_dir()), name="static"))
    middleware = [
        Middleware(SecurityHeaders),
        Middleware(HostCheck, hosts=hosts),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            journal.close()  # the pooled read-only stores

    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)


def static_dir() -> Path:
    """The package's static files (the script, the stylesheet, the chart library)."""
    return Path(str(resources.files("fsm_agent.console") / "static"))
