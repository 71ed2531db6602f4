"""The options and the error boundary every `fsm-agent` command shares.

Library errors become `Error: …` and an exit code in `cli_errors` and only there; `--db`,
`--json`, the budget flags and the model flags are declared once here and handed to the
commands as values (`db`, `as_json`, `budgets`, `model`).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from fsm_agent.encoding import harden_streams
from fsm_agent.errors import FsmAgentError, InvalidInputError
from fsm_agent.halt import EXIT_INTERNAL_ERROR, EXIT_INVALID_INPUT
from fsm_agent.redaction import env_secrets
from fsm_agent.runtime.record import DEFAULT_RECORD_PATH

if TYPE_CHECKING:
    from fsm_agent.adapters.models import ModelAdapter
    from fsm_agent.adapters.openai import Endpoint
    from fsm_agent.journal.store import Store


def load_model(spec: str, *, endpoint: Endpoint | None, search: tuple[Path, ...]) -> ModelAdapter:
    """`fsm_agent.adapters.loading.load_model`, imported only by a command that takes a
    model (the adapters are not what `runs` or `show` need)."""
    from fsm_agent.adapters.loading import load_model as load

    return load(spec, endpoint=endpoint, search=search)


def here() -> tuple[Path, ...]:
    """Where a module named on the command line (`--tools`, `--model python:…`) is looked
    for after sys.path: the working directory, as an absolute path (a worker's
    threads and a tool's child process look in the same place)."""
    from fsm_agent.declaration.refs import working_directory

    return working_directory()


F = TypeVar("F", bound=Callable[..., Any])


class InputProblem(click.ClickException):
    """Invalid input, shown as `Error: …`; exit 2."""

    exit_code = EXIT_INVALID_INPUT


class InternalProblem(click.ClickException):
    """An internal or journal error, shown as `Error: …`; exit 70."""

    exit_code = EXIT_INTERNAL_ERROR


def cli_errors(fn: F) -> F:
    """Turn library errors into `Error: …` lines with the documented exit codes."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        harden_streams()  # any text a run holds can be printed (see fsm_agent.encoding)
        try:
            return fn(*args, **kwargs)
        except InvalidInputError as exc:
            raise InputProblem(str(exc)) from exc
        except FsmAgentError as exc:
            raise InternalProblem(str(exc)) from exc
        except (click.ClickException, click.exceptions.Exit, click.Abort, BrokenPipeError):
            raise
        except Exception as exc:
            if os.environ.get("FSM_AGENT_DEBUG"):
                raise
            raise InternalProblem(
                f"internal error: {type(exc).__name__}: {exc} (set FSM_AGENT_DEBUG=1 for a"
                " traceback)"
            ) from exc

    return wrapper  # type: ignore[return-value]


if TYPE_CHECKING:  # generic in the click releases that ship type hints for it
    _PathType = click.ParamType[str]
else:
    _PathType = click.ParamType


class OutputPath(_PathType):
    """An output file (or, with `directory`, directory) option, checked when the command
    line is read, before anything runs (`fsm_agent.outputs`): a directory, a device, a
    database, an empty path or a place this process cannot write is `Error: Invalid value
    for '--record': …`, exit 2."""

    name = "path"

    def __init__(self, *, directory: bool = False) -> None:
        self.directory = directory

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from fsm_agent.outputs import output_problem

        text = str(os.fspath(value))
        problem = output_problem(text, directory=self.directory)
        if problem is not None:
            self.fail(f"{text!r} {problem}", param, ctx)
        return text


def refuse_overlaps(
    db: str | None,
    outputs: dict[str, str | None],
    inputs: dict[str, str | None] | None = None,
) -> None:
    """Before anything runs: no output is the journal (`--db`), an input file read by the
    command, or another output (`Error: --record: …`, exit 2)."""
    from fsm_agent.outputs import check_distinct, is_regular_file

    files = {what: p for what, p in (inputs or {}).items() if p is not None and is_regular_file(p)}
    check_distinct(outputs, journal=db, inputs=files)


def shown(db: str) -> str:
    """A `--db` value as messages print it: a DSN without its password."""
    from fsm_agent.stores.dsn import redact_dsn

    return redact_dsn(db)


def shell_arg(db: str) -> str:
    """A `--db` value as a command line to paste shows it: redacted, quoted for the shell."""
    import shlex

    return shlex.quote(shown(db))


#: The journal a command uses when `--db` (and FSM_AGENT_DB) is not given; the library has
#: no default (a library call names its journal).
DEFAULT_DB = "fsm-agent.db"


def db_option(fn: F) -> F:
    return click.option(
        "--db",
        "db",
        default=DEFAULT_DB,
        show_default=True,
        envvar="FSM_AGENT_DB",
        help="Journal: a SQLite file, or a postgresql:// DSN. Env: FSM_AGENT_DB.",
    )(fn)


def _names(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...] | None:
    """`--allow a,b --allow c` -> ("a", "b", "c"); None when not given."""
    if not value:
        return None
    names = tuple(n.strip() for v in value for n in v.split(","))
    if not all(names):
        raise click.BadParameter(f"an empty tool name in {','.join(value)!r}")
    return names


def allow_option(fn: F) -> F:
    """`--allow NAME[,NAME]`: the tools a run may call (the operator's grant)."""
    return click.option(
        "--allow",
        "allow",
        multiple=True,
        metavar="NAME[,NAME]",
        callback=_names,
        help="Tools this run may call: narrows the machine's tools:, or, for a machine that"
        " lists none, is the whole allow-list (without it, none: --tools registers tools,"
        " it does not permit them). Repeatable.",
    )(fn)


def record_option(fn: F) -> F:
    """`--record PATH`, where a command that drives a run writes its halt record."""
    return click.option(
        "--record",
        "record_path",
        type=OutputPath(),
        default=DEFAULT_RECORD_PATH,
        show_default=True,
        help="Where the halt record JSON is written (never over the journal, a directory or a"
        " device).",
    )(fn)


def policy_option(fn: F) -> F:
    """`--policy FILE`, the halt policy a declaration is checked against (lint, check)."""
    return click.option(
        "--policy",
        "policy_path",
        type=click.Path(dir_okay=False),
        help="Halt policy file (default: the one the machine declares, else the shipped"
        " machines/halt-policy.yml).",
    )(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(fn)


def say_result(as_json: bool, data: dict[str, Any], text: str) -> None:
    """A command's result: `data` as one JSON object with `--json`, else the line `text`."""
    import json

    click.echo(json.dumps(data, indent=2) if as_json else text)


_BUDGET_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("--max-steps", "max_steps", int, "Cap on model calls (retries included)."),
    ("--wall-clock-ms", "wall_clock_ms", int, "Cap on the run's real time."),
    ("--max-cost", "max_cost", float, "Cap on dollars reported by the adapters."),
    ("--tool-timeout-ms", "tool_timeout_ms", int, "Cap on one tool call's time."),
    ("--max-retries", "max_retries", int, "Retries allowed after failures."),
)


def budget_options(fn: F) -> F:
    """The five budget flags, handed to the command as one `budgets` dict (None = unset)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs["budgets"] = {name: kwargs.pop(name) for _, name, _, _ in _BUDGET_FLAGS}
        return fn(*args, **kwargs)

    decorated: Any = wrapper
    for flag, name, kind, text in reversed(_BUDGET_FLAGS):
        decorated = click.option(flag, name, type=kind, help=text)(decorated)
    return decorated  # type: ignore[no-any-return]


@contextmanager
def journal_store(db: str, *, must_exist: bool = False, read_only: bool = False) -> Iterator[Store]:
    """The journal `--db` names, closed afterwards: a SQLite file (`must_exist`: refuse a
    file that is not there rather than create it) or a PostgreSQL DSN (a server's journal is
    created on first use; a server that cannot be reached is a `JournalError`).
    `read_only`: for a command that only reads — the journal is never created, migrated or
    written."""
    # The backend (sqlite-utils, psycopg) is imported only by commands that use a journal.
    from fsm_agent.stores import open_store
    from fsm_agent.stores.dsn import is_dsn

    if (must_exist or read_only) and not is_dsn(db) and not Path(db).exists():
        raise InvalidInputError(f"no journal at {db} (run something first, or pass --db PATH)")
    store = open_store(db, read_only=read_only)
    try:
        yield store
    finally:
        store.close()


def read_journal(db: str) -> contextlib.AbstractContextManager[Store]:
    """The journal of a command that only reads (`runs`, `show`, `replay`, `export`,
    `report`, `stats`, `verify`, `queue`): it must exist, and is never migrated or
    written."""
    return journal_store(db, must_exist=True, read_only=True)


def _endpoint(model_spec: str, options: dict[str, Any]) -> Endpoint | None:
    """The HTTP endpoint of an `openai:MODEL` model from the run's options (None otherwise)."""
    given = [f"--{name.replace('_', '-')}" for name, value in options.items() if value is not None]
    if not model_spec.startswith("openai:"):
        if given:
            raise InvalidInputError(f"{', '.join(given)}: only for an openai:MODEL model")
        return None
    if options["base_url"] is None:
        raise InvalidInputError(f"{model_spec}: --base-url is required (the server's …/v1 URL)")
    from fsm_agent.adapters.openai import Endpoint

    return Endpoint(
        base_url=options["base_url"],
        api_key_env=options["api_key_env"],
        tier=options["lane_tier"] or "free",
        price_in=options["price_in"],
        price_out=options["price_out"],
        worst_case_cost=options["worst_case_cost"],
    )


_MODEL_OPTIONS = (
    click.option(
        "--model",
        "model_spec",
        required=True,
        help="scripted:PATH (JSON list of replies), python:module:callable, or openai:MODEL"
        " (an OpenAI-compatible server; see --base-url).",
    ),
    click.option(
        "--base-url",
        help="openai: the server's base URL (e.g. http://127.0.0.1:8080/v1); the adapter POSTs"
        " to BASE_URL/chat/completions.",
    ),
    click.option(
        "--api-key-env",
        metavar="NAME",
        help="openai: the NAME of the environment variable that holds the API key (never the key"
        " itself).",
    ),
    click.option(
        "--lane-tier",
        type=click.Choice(["free", "paid", "local"]),
        help="openai: the model lane's tier (kind http).  [default: free]",
    ),
    click.option("--price-in", type=float, help="openai: dollars per million input tokens."),
    click.option("--price-out", type=float, help="openai: dollars per million output tokens."),
    click.option(
        "--worst-case-cost",
        type=float,
        help="openai: dollars counted for a call whose usage is unknown (required with prices).",
    ),
    click.option(
        "--secret-env",
        "secret_env",
        metavar="NAME",
        multiple=True,
        help="The NAME of an environment variable whose value is a secret: redacted as"
        " [redacted:NAME] from the task, every reply and tool result before anything is"
        " journaled (the --api-key-env key always is). Repeatable.",
    ),
)


temporal_option = click.option(
    "--temporal",
    metavar="ADDRESS",
    help="A Temporal server (host:port) the run goes on as a workflow of; `dev`: a local"
    " development server (`fsm-agent worker --temporal dev` starts one on 127.0.0.1:7233)."
    " Needs pip install 'fsm-agent[temporal]'.",
)

#: The same, `--model` not required (`model_or_temporal_options`).
_MODEL_OPTIONS_OPTIONAL = (
    click.option(
        "--model",
        "model_spec",
        help="scripted:PATH (JSON list of replies), python:module:callable, or openai:MODEL"
        " (an OpenAI-compatible server; see --base-url). Required, except with --temporal.",
    ),
    *_MODEL_OPTIONS[1:],
)


_ENDPOINT_OPTIONS = ("base_url", "api_key_env", "lane_tier", "price_in", "price_out",
                     "worst_case_cost")  # fmt: skip


def _with_model(
    fn: F, build: Callable[[str, Endpoint | None], Any], *, unless_temporal: bool = False
) -> F:
    """`--model` and the endpoint options, handed to the command as
    `model=build(spec, endpoint)`, and `--secret-env` as `secret_env` (names, checked).
    `unless_temporal`: a command that also takes `--temporal` needs no model with it (the
    Temporal workers have theirs): `model` is then None, and a `--model` given is refused."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        spec = kwargs.pop("model_spec")
        endpoint_options = {name: kwargs.pop(name) for name in _ENDPOINT_OPTIONS}
        env_secrets(kwargs["secret_env"])  # unset or too short: `Error: …`, exit 2, now
        if unless_temporal and kwargs.get("temporal") is not None:
            if spec is not None:
                raise InvalidInputError("--model is the Temporal workers' own with --temporal")
            kwargs["model"] = None
            return fn(*args, **kwargs)
        if spec is None:
            raise click.UsageError("Missing option '--model'.")
        kwargs["model"] = build(spec, _endpoint(spec, endpoint_options))
        return fn(*args, **kwargs)

    decorated: Any = cli_errors(wrapper)  # a bad model spec is `Error: …`, exit 2
    for option in reversed(_MODEL_OPTIONS_OPTIONAL if unless_temporal else _MODEL_OPTIONS):
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]


def model_options(fn: F) -> F:
    """The model options, handed to the command as one loaded `model` adapter."""
    return _with_model(
        fn, lambda spec, endpoint: load_model(spec, endpoint=endpoint, search=here())
    )


def model_or_temporal_options(fn: F) -> F:
    """`model_options` for a command that also takes `--temporal`: no `--model` with it."""
    return _with_model(
        fn,
        lambda spec, endpoint: load_model(spec, endpoint=endpoint, search=here()),
        unless_temporal=True,
    )


def model_factory_options(fn: F) -> F:
    """The model options, handed to the command as a `model` factory (`fsm-agent worker`
    builds its adapter when it starts serving). The spec is loaded once now, so a bad one
    is `Error: …` (exit 2) before anything is served."""

    def factory(spec: str, endpoint: Endpoint | None) -> Callable[[], ModelAdapter]:
        load_model(spec, endpoint=endpoint, search=here())
        return functools.partial(load_model, spec, endpoint=endpoint, search=here())

    return _with_model(fn, factory)
