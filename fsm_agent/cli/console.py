"""`fsm-agent console`: a local web console over the journal (`fsm_agent.console`).

Registered on the `fsm-agent` group when imported (`fsm_agent.cli.group.COMMANDS`); a thin
layer like the rest of it. The server (Starlette, uvicorn) is the optional `console` extra,
imported only here.
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Sequence

import click

from fsm_agent.cli.group import cli
from fsm_agent.cli.options import cli_errors, db_option, journal_store, shown
from fsm_agent.console.hosts import (
    allowed_name,
    answered_hosts,
    host_form,
    is_loopback,
    require_names,
)
from fsm_agent.errors import InvalidInputError
from fsm_agent.halt import EXIT_INVALID_INPUT

INSTALL_HINT = "the console needs its server: pip install 'fsm-agent[console]'"


def _allowed(
    _ctx: click.Context, _param: click.Parameter, values: Sequence[str]
) -> tuple[str, ...]:
    """The --allowed-host values in their Host header form, checked as the line is read."""
    try:
        return tuple(allowed_name(value) for value in values)
    except InvalidInputError as exc:
        raise click.BadParameter(str(exc)) from exc


@cli.command()
@db_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback exposes the journal.")  # fmt: skip
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    callback=_allowed,
    metavar="NAME",
    help="A host name or address other machines use to reach the console (repeatable). It"
    " answers only these, its bound address and loopback; needed with --host 0.0.0.0 or ::.",
)
@click.option("--port", default=8470, show_default=True, type=click.IntRange(0, 65535),
              help="Port to listen on (0: any free port, printed).")  # fmt: skip
@click.option(
    "--allow-operator-acts",
    is_flag=True,
    help="Offer pause, raise-budget and routing freeze on the pages (journaled with who and"
    " why, as by the CLI). Without it the console cannot write at all.",
)
@cli_errors
def console(
    db: str, host: str, allowed_hosts: tuple[str, ...], port: int, allow_operator_acts: bool
) -> None:
    """Serve a local web console over the journal: the runs with filters, each run live
    and as its incident report, and charts across runs. Read-only unless
    --allow-operator-acts. Off loopback it answers only the names given with
    --allowed-host (and its own address). Stop it with Ctrl-C."""
    host = host.strip().removeprefix("[").removesuffix("]")
    require_names(host, allowed_hosts)
    try:
        import uvicorn

        from fsm_agent.console.app import build_app
        from fsm_agent.stores import open_store
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("uvicorn", "starlette", "anyio"):
            raise
        click.echo(f"Error: {INSTALL_HINT}", err=True)
        raise click.exceptions.Exit(EXIT_INVALID_INPUT) from exc
    with journal_store(db, must_exist=True, read_only=not allow_operator_acts) as store:
        sock = _listen(host, port)
        address, bound = sock.getsockname()[:2]
        hosts = answered_hosts(host, allowed_hosts, address)
        if not is_loopback(address):
            click.echo(
                f"WARNING: listening on {host_form(host) or '*'}, not loopback: anyone who can"
                " reach it reads every task, reply and tool result in the journal"
                + (", and can pause runs and raise their caps" if allow_operator_acts else "")
                + f". It answers only Host {', '.join(hosts)}.",
                err=True,
            )
        app = build_app(store, where=shown(db), acts=allow_operator_acts, hosts=hosts,
                        readers=functools.partial(open_store, db, read_only=True))  # fmt: skip
        config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                                timeout_graceful_shutdown=1)  # fmt: skip
        server = uvicorn.Server(config)
        mode = "operator acts ON" if allow_operator_acts else "read-only"
        click.echo(f"fsm-agent console ({mode}) on http://{hosts[0]}:{bound}/", nl=True)
        server.run(sockets=[sock])


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the server starts (so the URL printed has the
    port the OS chose for --port 0)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(128)
    sock.set_inheritable(True)
    return sock
