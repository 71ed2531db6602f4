"""The console's endpoints: the pages, the JSON its script reads (a step, the report's parts
and the list's rows drawn again as runs move), the live stream and (in write mode only) the
acts. A page of one run (its body, a step, its parts, its live transitions) is read through
`Journal.read_run`, on a pool of read-only connections, several at a time: a slow run page
never holds up the list. The list, the charts and the acts go through `Journal.read`, one
worker thread at a time on the console's own connection (whose change counter, and the
verdicts kept while it stands, they share).
"""

from __future__ import annotations

import functools
import json
import queue
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Route

from fsm_agent.console import acts as console_acts
from fsm_agent.console import pages
from fsm_agent.console.live import live_state, stream
from fsm_agent.console.queries import (
    STATUSES,
    Listed,
    RunFilters,
    RunPage,
    ToolTimes,
    chart_data,
    listed,
    run_page,
    step_detail,
)
from fsm_agent.console.step import step_html
from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.errors import FsmAgentError, InvalidInputError
from fsm_agent.halt import HaltReason
from fsm_agent.journal.store import Store
from fsm_agent.review.report import ReportSections
from fsm_agent.review.report_html import CSS as REPORT_CSS
from fsm_agent.review.report_html import esc
from fsm_agent.review.truth import Truths
from fsm_agent.run_ids import RunNotFound

T = TypeVar("T")
#: The charts' window when the page names none.
DEFAULT_SINCE = "7d"
#: How many pages of single runs are read at once (each on a read-only connection of its own).
READERS = 4


class Journal:
    """The console's store, read by one worker thread at a time (a connection is not for
    concurrent use), and, given `opener`, a pool of up to `READERS` read-only stores for the
    pages of single runs, each used by one worker thread at a time."""

    def __init__(self, store: Store, opener: Callable[[], Store] | None = None) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.tools = ToolTimes()
        #: the verdicts on the runs' chains, kept while the journal does not change
        self.truths = Truths()
        self._opener = opener
        self._idle: queue.SimpleQueue[Store] = queue.SimpleQueue()
        self._opened: list[Store] = []
        self._limiter: anyio.CapacityLimiter | None = None

    def _locked(self, fn: Callable[[Store], T]) -> T:
        with self.lock:
            return fn(self.store)

    def read(self, fn: Callable[[Store], T]) -> Awaitable[T]:
        """`fn(store)` in a worker thread, under the lock."""
        return anyio.to_thread.run_sync(self._locked, fn)

    def _pooled(self, fn: Callable[[Store], T]) -> T:
        try:
            store = self._idle.get_nowait()
        except queue.Empty:  # fewer than READERS open: the limiter lets no more in at once
            assert self._opener is not None  # noqa: S101 - only called with an opener
            store = self._opener()
            with self.lock:
                self._opened.append(store)
        try:
            return fn(store)
        finally:
            self._idle.put(store)

    async def read_run(self, fn: Callable[[Store], T]) -> T:
        """`fn(store)` for a page of one run: on a pooled read-only store, up to `READERS`
        at once (without an opener, as `read`)."""
        if self._opener is None:
            return await self.read(fn)
        if self._limiter is None:  # made in the event loop (anyio's limiters belong to one)
            self._limiter = anyio.CapacityLimiter(READERS)
        return await anyio.to_thread.run_sync(self._pooled, fn, limiter=self._limiter)

    def close(self) -> None:
        """Close the pooled stores (the console's own store is its opener's to close)."""
        with self.lock:
            opened, self._opened = self._opened, []
        for store in opened:
            store.close()


def json_response(data: Any, status: int = 200) -> Response:
    """JSON with `<`, `>`, `&` escaped: safe even if a browser were to sniff it."""
    text = json.dumps(data, ensure_ascii=True, default=str)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return Response(text, status_code=status, media_type="application/json")


def _upto(q: Any) -> int | None:
    """A run page's `upto` (the last seq its timeline lists): digits, or absent."""
    raw = q.get("upto")
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or not raw.isascii():
        raise InvalidInputError(f"upto must be a sequence number, not {raw[:40]!r}")
    return int(raw)


def _filters(q: dict[str, str]) -> tuple[RunFilters, tuple[str, str] | None]:
    """The run list's filters and cursor from its query string (`InvalidInputError`)."""
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


def _report(
    store: Store, run_id: str, upto: int | None = None
) -> tuple[ReportSections | None, str]:
    """The run's report parts as of now (None, and why, when they cannot be drawn), its
    timeline a page of transitions: `pages.TIMELINE_PAGE` ending at seq `upto` (default:
    the newest)."""
    from fsm_agent.journal.chain import verify_run
    from fsm_agent.journal.chain_key import key_from_env
    from fsm_agent.review.lineage import parent_facts
    from fsm_agent.review.report import report_sections

    run = store.get_run(run_id)
    events = store.events(run_id)
    try:
        chain = verify_run(store, run_id, key=key_from_env())
        parent = parent_facts(store, events)
        window = pages.timeline_page(run_id, upto)
        return report_sections(run, events, chain, parent, timeline=window), ""
    except FsmAgentError as exc:
        return None, f"the report cannot be drawn: {exc}"


def _run_body(store: Store, run_id: str, acts: bool, upto: int | None = None) -> str:
    """One run's page body: its live panel, its acts, the report's parts. The panel is read
    first: the stream sends every transition after its seq, the report may hold more."""
    state = live_state(store, run_id)
    parts, problem = _report(store, run_id, upto)
    act_forms = pages.run_acts(run_id) if acts and not state["ended"] else ""
    record = store.get_run(run_id).record if acts and state["status"] == "waiting" else None
    if record is not None and record.handoff is not None:
        act_forms = pages.decision_acts(run_id, record.handoff)
    return pages.run_page(run_id, parts, problem, pages.live_panel(state), act_forms)


def _parts(store: Store, run_id: str, upto: int | None = None) -> dict[str, Any]:
    """The report's parts as the run page redraws them while the run is live."""
    parts, problem = _report(store, run_id, upto)
    if parts is None:
        return {"error": problem}
    return {"sections": pages.report_parts(parts)}


def _step(store: Store, run_id: str, seq: int) -> str | None:
    """The step viewer's body for the event at `seq` (None: none there): that event and the
    run's row are read, however long the run."""
    ev = store.event_at(run_id, seq)
    if ev is None:
        return None
    run = store.get_run(run_id)
    return step_html(_declared(run.run_id, run.machine_text), ev)


@functools.lru_cache(maxsize=32)
def _declared(run_id: str, text: str) -> MachineSpec:
    """The declaration a run ran under, parsed once for all its step views (a key press
    each: the parse is not done again per step)."""
    from fsm_agent.declaration.load import parse_machine

    return parse_machine(text, source=f"journal:{run_id}", resolve=False)


class Endpoints:
    """The console's routes over one journal; `guard` (None: read-only) lets acts in."""

    def __init__(self, journal: Journal, where: str, guard: console_acts.Guard | None) -> None:
        self.journal = journal
        self.where = where
        self.guard = guard

    def routes(self) -> list[Route]:
        """Every route; the act route only in write mode."""
        found = [
            Route("/", self.runs),
            Route("/runs/{run_id}", self.one_run),
            Route("/charts", self.charts),
            Route("/api/runs", self.rows),
            Route("/api/runs/{run_id}/events/{seq:int}", self.step),
            Route("/api/runs/{run_id}/steps/{seq:int}", self.step_view),
            Route("/api/runs/{run_id}/parts", self.parts),
            Route("/api/runs/{run_id}/live", self.live),
            Route("/api/charts", self.charts_api),
            Route("/static/report.css", self.report_css),
        ]
        if self.guard is not None:
            found.append(Route("/acts/{act}", self.act, methods=["POST"]))
        return found

    def _html(self, title: str, page: str, body: str, status: int = 200) -> HTMLResponse:
        token = self.guard.token if self.guard else None
        text = pages.layout(title, page, body, token=token, where=self.where)
        return HTMLResponse(text, status_code=status)

    def _listed(
        self, f: RunFilters, cursor: tuple[str, str] | None
    ) -> Callable[[Store], tuple[RunPage, tuple[Listed, ...], str | None]]:
        known = self.journal.truths

        def read(s: Store) -> tuple[RunPage, tuple[Listed, ...], str | None]:
            version = s.control_version()
            found = run_page(s, f, cursor)
            return found, listed(s, found.runs, known), None if version is None else str(version)

        return read

    async def runs(self, request: Request) -> Response:
        """The run list: filters, one page, the next page's link."""
        raw = dict(request.query_params.items())
        error = ""
        try:
            f, cursor = _filters(raw)
        except InvalidInputError as exc:
            f, cursor, error = RunFilters(), None, str(exc)
        found, runs, version = await self.journal.read(self._listed(f, cursor))
        acts = pages.routing_acts() if self.guard else ""
        body = pages.runs_page(found, runs, f, raw, acts, error, version)
        return self._html("fsm-agent console: runs", "runs", body, 400 if error else 200)

    async def rows(self, request: Request) -> Response:
        """The run list's rows as the page's script draws them again while runs move:
        `{"version": …, "html": …}`, or `{"version": …}` alone when the journal has not
        changed since `version` (SQLite's data_version)."""
        raw = dict(request.query_params.items())
        try:
            f, cursor = _filters(raw)
        except InvalidInputError as exc:
            return json_response({"error": str(exc)}, 400)
        found, runs, version = await self.journal.read(self._listed(f, cursor))
        if version is not None and version == raw.get("version"):
            return json_response({"version": version})
        return json_response({"version": version, "html": pages.run_list(found, runs, raw)})

    async def one_run(self, request: Request) -> Response:
        """One run: live panel, acts, report, step viewer."""
        run_id = request.path_params["run_id"]
        acts = self.guard is not None
        try:
            upto = _upto(request.query_params)
        except InvalidInputError as exc:
            return self._html("bad request", "run", f"<h1>{esc(str(exc))}</h1>", 400)
        try:
            body = await self.journal.read_run(lambda s: _run_body(s, run_id, acts, upto))
        except RunNotFound:
            return self._html("no such run", "run", "<h1>No such run</h1>", 404)
        return self._html(f"fsm-agent run {esc(run_id)}", "run", body)

    async def step(self, request: Request) -> Response:
        """One journaled transition as JSON (the step viewer's)."""
        run_id, seq = request.path_params["run_id"], int(request.path_params["seq"])
        try:
            data = await self.journal.read_run(lambda s: step_detail(s, run_id, seq))
        except RunNotFound:
            data = None
        if data is None:
            return json_response({"error": "no such step"}, 404)
        return json_response(data)

    async def step_view(self, request: Request) -> Response:
        """One journaled transition as the step viewer shows it: `{"seq": …, "html": …}`."""
        run_id, seq = request.path_params["run_id"], int(request.path_params["seq"])
        try:
            found = await self.journal.read_run(lambda s: _step(s, run_id, seq))
        except RunNotFound:
            found = None
        except FsmAgentError as exc:
            return json_response({"error": f"the step cannot be drawn: {exc}"}, 500)
        if found is None:
            return json_response({"error": "no such step"}, 404)
        return json_response({"seq": seq, "html": found})

    async def parts(self, request: Request) -> Response:
        """The run's report parts, drawn again (`{"sections": {id: html}}`)."""
        run_id = request.path_params["run_id"]
        try:
            upto = _upto(request.query_params)
        except InvalidInputError as exc:
            return json_response({"error": str(exc)}, 400)
        try:
            return json_response(await self.journal.read_run(lambda s: _parts(s, run_id, upto)))
        except RunNotFound:
            return json_response({"error": "no such run"}, 404)

    async def live(self, request: Request) -> Response:
        """The run's state as Server-Sent Events until it ends; `?after=SEQ`: with every
        transition journaled after SEQ."""
        run_id = request.path_params["run_id"]
        raw = request.query_params.get("after")
        if raw is not None and not raw.isdigit():
            return json_response({"error": "after must be a sequence number"}, 400)
        after = None if raw is None else int(raw)
        try:
            await self.journal.read(lambda s: s.get_run(run_id))
        except RunNotFound:
            return json_response({"error": "no such run"}, 404)
        return StreamingResponse(
            stream(self.journal.read, run_id, after, fetch=self.journal.read_run),
            media_type="text/event-stream",
            headers={"x-accel-buffering": "no"},
        )  # fmt: skip

    async def charts(self, request: Request) -> Response:
        """The charts' page (the script fetches their data)."""
        since = request.query_params.get("since") or DEFAULT_SINCE
        return self._html("fsm-agent console: charts", "charts", pages.charts_page(since))

    async def charts_api(self, request: Request) -> Response:
        """The charts' data for the runs started since `since`."""
        from fsm_agent.review.stats import time_key

        try:
            since = time_key(request.query_params.get("since") or DEFAULT_SINCE)
        except InvalidInputError as exc:
            return json_response({"error": str(exc)}, 400)
        tools, known = self.journal.tools, self.journal.truths
        return json_response(await self.journal.read(lambda s: chart_data(s, since, tools, known)))

    async def report_css(self, request: Request) -> Response:
        """The incident report's stylesheet, the one the offline report inlines."""
        return Response(REPORT_CSS, media_type="text/css")

    async def act(self, request: Request) -> Response:
        """An operator act, if the request passes the guard (403 otherwise)."""
        if self.guard is None:  # never: the route exists only with a guard
            return json_response({"error": "this console is read-only"}, 404)
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            self.guard.check(request.method, headers, request.url.scheme)
        except console_acts.Refused as exc:
            return json_response({"error": str(exc)}, 403)
        name = request.path_params["act"]
        try:
            body = json.loads(await request.body())
            if not isinstance(body, dict):
                raise InvalidInputError("the body must be a JSON object")
            done = await self.journal.read(lambda s: console_acts.perform(s, name, body))
        except (ValueError, FsmAgentError) as exc:
            return json_response({"error": str(exc)}, 400)
        return json_response(done)
