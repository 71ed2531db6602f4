"""Choosing a model adapter from a model spec (`scripted:PATH`, `python:module:callable`,
`openai:MODEL`): the OpenAI-compatible lane is imported only for runs that use it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fsm_agent.adapters.models import ModelAdapter, ScriptedModel
from fsm_agent.declaration.refs import BadReference, Search, resolve_callable
from fsm_agent.errors import AdapterError

if TYPE_CHECKING:
    from fsm_agent.adapters.openai import Endpoint


def load_model(spec: str, *, endpoint: Endpoint | None = None, search: Search = ()) -> ModelAdapter:
    """`scripted:PATH`, `python:package.module:callable`, or `openai:MODEL` with the
    `Endpoint` it is served from (base URL, the name of the key's environment variable,
    lane tier, prices). A `python:` module is looked for on sys.path, then in `search`
    (the CLI's `--model` gives the working directory; see `fsm_agent.declaration.refs`)."""
    kind, _, rest = spec.partition(":")
    if endpoint is not None and kind != "openai":
        raise AdapterError("an endpoint applies only to an openai:MODEL model", spec=spec)
    if kind == "openai" and rest:
        from fsm_agent.adapters.openai import OpenAIChatModel  # httpx only for runs that use it

        if endpoint is None:
            raise AdapterError("an openai: model needs an endpoint (--base-url)", spec=spec)
        return OpenAIChatModel(rest, endpoint)
    if kind == "scripted" and rest:
        return ScriptedModel.from_file(rest)
    if kind == "python" and ":" in rest:
        try:
            return resolve_callable(rest, search)
        except BadReference as exc:
            raise AdapterError(str(exc), spec=spec) from exc
    raise AdapterError(
        "a model spec is scripted:PATH or python:module:callable (or openai:MODEL with an"
        " endpoint: --base-url)",
        spec=spec,
    )
