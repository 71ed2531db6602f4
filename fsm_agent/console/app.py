"""The console's web application (Starlette): its endpoints (`fsm_agent.console.routes`),
the package's static files, and the security headers every response carries.

Read-only by default: the journal is opened read-only by the command (nothing created,
migrated or written) and there is no route that writes. With `acts=True` the journal is
opened for writing and the act route exists, guarded as `fsm_agent.console.acts` says.
Every request's Host header must name the console (no DNS rebinding).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fsm_agent.console.acts import Guard, new_token
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


def build_app(store: Store, *, where: str, acts: bool, hosts: tuple[str, ...]) -> Starlette:
    """The console over `store` (`where`: the journal as its pages name it). `acts`: offer
    operator acts; `hosts`: the Host header values it answers (`*`: any)."""
    guard = Guard(new_token()) if acts else None
    routes: list[BaseRoute] = list(Endpoints(Journal(store), where, guard).routes())
    routes.append(Mount("/static", StaticFiles(directory=static_dir()), name="static"))
    middleware = [
        Middleware(SecurityHeaders),
        Middleware(TrustedHostMiddleware, allowed_hosts=list(hosts)),
    ]
    return Starlette(routes=routes, middleware=middleware)


def static_dir() -> Path:
    """The package's static files (the script, the stylesheet, the chart library)."""
    return Path(str(resources.files("fsm_agent.console") / "static"))
