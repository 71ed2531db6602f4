"""Traces from the command line: `--otel` on the commands that drive runs (`run`, `resume`,
`worker`), and `fsm-agent export-traces` for runs already in the journal.

Registered on the `fsm-agent` group when imported (`fsm_agent.cli.group.COMMANDS`); the
spans are built and sent by `fsm_agent.telemetry`, whose OpenTelemetry imports happen only
when traces are asked for.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click

from fsm_agent.cli.group import cli
from fsm_agent.cli.options import (
    InputProblem,
    cli_errors,
    db_option,
    json_option,
    read_journal,
    shown,
)
from fsm_agent.redaction import Redactor, env_secrets
from fsm_agent.run_ids import resolve_run_id

if TYPE_CHECKING:
    from fsm_agent.journal.store import Store
    from fsm_agent.telemetry.live import LiveTracer

F = TypeVar("F", bound=Callable[..., Any])

#: What the help of `--otel` and `export-traces` says of where spans go.
_WHERE = (
    "to the OTLP endpoint the standard OTEL_EXPORTER_OTLP_* variables name (default"
    " http://localhost:4318, http/protobuf)"
)


def otel_options(fn: F) -> F:
    """`--otel` and `--otel-content`, handed to the command as `otel` and `otel_content`."""
    fn = click.option(
        "--otel-content",
        is_flag=True,
        help="With --otel: put the task, prompts, replies, tool arguments and results in the"
        " spans (cut to 4,000 characters, secrets redacted); also turned on by"
        " OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true.",
    )(fn)
    return click.option(
        "--otel",
        is_flag=True,
        envvar="FSM_AGENT_OTEL",
        help=f"Send OpenTelemetry traces of the run(s) {_WHERE}, off the halt path: an"
        " exporter that is down or slow never delays or changes a run. Env: FSM_AGENT_OTEL.",
    )(fn)


def _options(content: bool, secrets: Redactor) -> Any:
    from fsm_agent.telemetry.content import TraceOptions, capture_from_env

    return TraceOptions(content=content or capture_from_env(), redactor=secrets)


def _endpoint() -> str:
    """Where the spans go, as the standard variables name it, for messages (without any
    user or password the URL holds)."""
    import urllib.parse

    env = os.environ
    url = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or (
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318").rstrip("/") + "/v1/traces"
    )
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


@contextmanager
def live_traces(
    enabled: bool, content: bool, db: str, secrets: Redactor
) -> Iterator[LiveTracer | None]:
    """A `LiveTracer` for the runs this command drives when `--otel` asks for one (None
    otherwise, or under OTEL_SDK_DISABLED=true); on the way out it is given `FLUSH_S` to
    send what is left, and what was not sent is said on stderr."""
    from fsm_agent.telemetry.otlp import disabled

    if not enabled or disabled():
        yield None
        return
    from fsm_agent.telemetry.live import FLUSH_S, LiveTracer
    from fsm_agent.telemetry.otlp import preload, quiet_exporter_logs

    preload()  # a missing package or protocol: `Error: …`, exit 2, before the run
    quiet_exporter_logs()

    def journal() -> Store:
        from fsm_agent.stores import open_store

        return open_store(db, read_only=True)

    tracer = LiveTracer(journal, _options(content, secrets))
    try:
        yield tracer
    finally:
        left = tracer.close(FLUSH_S)
        counts = tracer.counts
        lost = [f"{n} {what}" for n, what in ((counts.failed, "span(s) not taken"),
                (counts.dropped, "event(s) dropped: queue full"),
                (left, f"item(s) still unsent after {FLUSH_S:g} s")) if n]  # fmt: skip
        if lost:
            why = f" ({counts.error})" if counts.error else ""
            with contextlib.suppress(OSError):
                click.echo(f"traces to {_endpoint()}: {'; '.join(lost)}{why}", err=True)


def traced(tracer: LiveTracer | None, *callbacks: Callable[[Any], None]) -> Callable[[Any], None]:
    """One `on_transition` calling `callbacks`, then handing the event to `tracer`."""

    def on_transition(event: Any) -> None:
        for callback in callbacks:
            callback(event)
        if tracer is not None:
            tracer.on_transition(event)

    return on_transition


def _selected(store: Store, given: tuple[str, ...], since: str | None, until: str | None,
              every: bool) -> list[str]:  # fmt: skip
    """The run ids the command line names, oldest first."""
    modes = sum([bool(given), since is not None or until is not None, every])
    if modes != 1:
        raise InputProblem("name the runs: RUN_ID..., or --since/--until TIME, or --all")
    if given:
        return list(dict.fromkeys(resolve_run_id(store, g) for g in given))
    if every:
        return store.run_ids()
    from fsm_agent.review.stats import time_key

    low = None if since is None else time_key(since, what="--since")
    high = None if until is None else time_key(until, what="--until")
    if low is not None and high is not None and low > high:
        raise InputProblem(f"--since {since} is after --until {until}: no run can match")
    return [r.run_id for r in reversed(store.list_runs(None, since=low, until=high))]


@cli.command("export-traces")
@click.argument("run_ids", nargs=-1, metavar="[RUN_ID]...")
@click.option("--since", metavar="TIME", help="The runs started at or after TIME (as for runs).")
@click.option("--until", metavar="TIME", help="The runs started at or before TIME.")
@click.option("--all", "every", is_flag=True, help="Every run in the journal.")
@click.option(
    "--content",
    is_flag=True,
    help="Put the task, prompts, replies, tool arguments and results in the spans (cut to"
    " 4,000 characters); also OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true.",
)
@click.option(
    "--secret-env",
    "secret_env",
    metavar="NAME",
    multiple=True,
    help="With content: redact the value of environment variable NAME (an API key) from it"
    " too, as [redacted:NAME]. Repeatable.",
)
@db_option
@json_option
@cli_errors
def export_traces(
    run_ids: tuple[str, ...],
    since: str | None,
    until: str | None,
    every: bool,
    content: bool,
    secret_env: tuple[str, ...],
    db: str,
    as_json: bool,
) -> None:
    """Send runs from the journal as OpenTelemetry traces, so runs recorded before tracing
    was set up can be looked at. The ids are the ones a live run (--otel) sends: a run
    exported twice is one trace. A run not halted yet is sent without its root span.

    Exit 1 when the endpoint did not take a run (the runs after it are not tried).
    """
    from fsm_agent.telemetry.export import export_runs
    from fsm_agent.telemetry.otlp import Sender, quiet_exporter_logs, require_otel

    secrets = env_secrets(secret_env)
    require_otel()
    quiet_exporter_logs()

    def progress(n: int, total: int, run_id: str) -> None:
        if total > 1:
            with contextlib.suppress(OSError):
                click.echo(f"run {n}/{total} {run_id}", err=True)

    with read_journal(db) as store:
        ids = _selected(store, run_ids, since, until, every)
        sender = Sender()
        try:
            results = export_runs(store, ids, sender, _options(content, secrets), progress)
        finally:
            sender.close()
    _report(results, ids, as_json, db)


def _report(results: list[dict[str, Any]], ids: list[str], as_json: bool, db: str) -> None:
    failed = [r["run_id"] for r in results if not r["sent"]]
    untried = ids[len(results) :]
    spans = sum(r["spans"] for r in results if r["sent"])
    if as_json:
        data = {"endpoint": _endpoint(), "journal": shown(db), "runs": results,
                "sent_runs": len(results) - len(failed), "sent_spans": spans,
                "failed": failed, "not_tried": untried}  # fmt: skip
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(f"sent {spans} span(s) of {len(results) - len(failed)} run(s) to {_endpoint()}")
        for r in results:
            if not r["sent"]:
                why = f": {r['error']}" if r["error"] else ""
                click.echo(f"not taken: run {r['run_id']} (the endpoint did not take its"
                           f" spans{why})")  # fmt: skip
        if untried:
            click.echo(f"not tried: {len(untried)} run(s) after it")
    if failed:
        raise SystemExit(1)
