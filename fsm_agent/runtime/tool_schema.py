"""A tool's arguments: the JSON Schema a model is shown, built from the function's
signature, and the strict check each call's arguments pass before the call is made.

The type work is msgspec's: `msgspec.json.schema_components` writes the schema of every
annotation, and each argument is checked by decoding its JSON with a strict
`msgspec.json.Decoder` of its parameter's type. A model sends JSON, so an argument fits
when its JSON decodes as that type: `"5"` is not an `int` nor `5` a `str`, `null` only
where the type allows None, a `Literal` only its values, a nested dataclass, attrs class,
TypedDict or msgspec Struct field by field, an unknown field refused there too
(`fsm_agent.runtime.strict_fields`). An unannotated parameter, or one annotated `Any` or `object`,
accepts any value. (msgspec's one strictness beyond the types' meaning: in a union with an
int-like member, an integer is checked against that member alone, so `float | Literal[1]`
refuses 0.) The tool is called with the decoded values: for JSON types the values the model
sent (an integer for a `float` parameter becomes a float), for a dataclass an instance; the
journal keeps the arguments as the model sent them.

Descriptions: the tool's is the docstring's first paragraph; a parameter's comes from
`Annotated[T, "text"]` (or metadata with a string `description`, such as
`msgspec.Meta(description=...)`), else from the docstring's parameter section (Google
`Args:`, NumPy `Parameters`, reST `:param x:`, read by docstring_parser). Both libraries
are imported when a tool is first described or checked, never by `import fsm_agent` or
`fsm-agent --help`.
"""

from __future__ import annotations

import functools
import inspect
import json
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any

import attrs

from fsm_agent.errors import AdapterError

if TYPE_CHECKING:
    import msgspec

#: How much the model is told of a refused argument: the library's detail, the parameter's
#: schema, and the whole problem (a hostile argument is never echoed at length).
MAX_DETAIL_CHARS = 240
MAX_NAME_CHARS = 64
MAX_SCHEMA_CHARS = 300
MAX_PROBLEM_CHARS = 800


class ArgumentsRefused(Exception):
    """The arguments of a call do not fit the tool's signature; the message says why."""


class Misfit(Exception):
    """Raised by a `Check`: the value does not fit (the message says how)."""


#: A parameter's check: the value to call the tool with, or `Misfit`.
Check = Callable[[Any, str], Any]


@attrs.frozen(eq=False)
class ArgumentSchema:
    """What a tool's signature says about its arguments, computed once per tool."""

    #: the docstring's first paragraph
    description: str
    #: the JSON Schema (an object) of the arguments, as a model is shown it
    parameters: dict[str, Any]
    #: None for a callable with no signature (a builtin): its call decides
    signature: inspect.Signature | None
    #: the parameters as a model should read them: `lookup(q, limit=…)`
    shown: str
    #: the check of each typed parameter's argument (an untyped one has none: anything goes)
    checks: Mapping[str, Check] = attrs.field(factory=dict)
    #: the check of each `**kwargs` value, when they are typed
    extra: Check | None = None
    #: each typed parameter's schema as the model is told it when its argument is refused
    #: (each `**kwargs` value's under `**`)
    quoted: Mapping[str, str] = attrs.field(factory=dict)


def argument_schema(fn: Callable[..., Any], name: str) -> ArgumentSchema:
    """The argument schema of the tool `name`, computed once per function. Raises
    `AdapterError` naming the tool (and the parameter) when an annotation does not resolve
    or names a type JSON cannot carry."""
    try:
        hash(fn)
    except TypeError:  # an unhashable callable: not cached
        return _build(fn, name)
    return _cached_build(fn, name)


def checked_arguments(fn: Callable[..., Any], name: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments to call the tool with: `args` decoded by each parameter's type (for JSON
    types the same values, but an integer for a `float` parameter becomes a float; a
    dataclass, attrs or datetime parameter gets an instance). Raises `ArgumentsRefused` when
    they do not fit: an argument missing or unknown, or a value of the wrong type."""
    schema = argument_schema(fn, name)
    if schema.signature is not None:
        problem = _names_problem(schema, tuple(args))
        if problem is not None:
            raise ArgumentsRefused(_clip(problem, MAX_PROBLEM_CHARS))
    checks = schema.checks
    if not checks and schema.extra is None:
        return dict(args)
    values = dict(args)
    for key, value in args.items():
        check = checks.get(key, schema.extra)
        if check is not None:
            try:
                values[key] = check(value, key)
            except Misfit as misfit:
                raise ArgumentsRefused(_type_problem(schema, key, str(misfit))) from None
    return values


def _type_problem(schema: ArgumentSchema, key: str, detail: str) -> str:
    where = detail.replace(" - at `$", f" - at `{key}").replace(" in `$`", f" in `{key}`")
    quoted = schema.quoted.get(key if key in schema.checks else "**")
    problem = f"argument {key!r} does not fit its type: {_clip(where, MAX_DETAIL_CHARS)}"
    if quoted is not None:
        problem += f"; {key} takes {quoted}"
    return _clip(f"{problem} (it takes {schema.shown})", MAX_PROBLEM_CHARS)


def _names_problem(schema: ArgumentSchema, names: tuple[str, ...]) -> str | None:
    """Why the names alone cannot be bound (missing, unknown, positional-only), or None.
    Kept per tool and set of names, as the names of a tool's calls repeat."""
    try:
        return _cached_bind_problem(schema, names)
    except TypeError:  # not hashable: a key that is not a string
        return _bind_problem(schema, names)


def _bind_problem(schema: ArgumentSchema, names: tuple[str, ...]) -> str | None:
    signature = schema.signature
    if signature is None:
        return None
    try:
        signature.bind(**dict.fromkeys(names))
    except TypeError as exc:
        text = str(exc)
        for long in (n for n in names if len(n) > MAX_NAME_CHARS):  # never echoed at length
            text = text.replace(long, _clip(long, MAX_NAME_CHARS))
        return f"{text} (it takes {schema.shown})"
    return None


_cached_bind_problem = functools.lru_cache(maxsize=4096)(_bind_problem)


@functools.cache
def _encoder() -> msgspec.json.Encoder:
    import msgspec

    return msgspec.json.Encoder()


def _build(fn: Callable[..., Any], name: str) -> ArgumentSchema:
    where = f"tool {name!r}"
    description, documented = _docstring(fn)
    try:
        inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without one: the call decides
        return ArgumentSchema(description, {"type": "object"}, None, f"{name}(…)")
    try:
        signature = inspect.signature(fn, eval_str=True)
    except Exception as exc:  # an annotation is evaluated: any error is the tool's
        raise AdapterError(
            f"its annotations do not resolve ({type(exc).__name__}: {exc}); define or import"
            " the names they use before the tools are loaded",
            spec=where,
        ) from None
    params, extra = _parameters(signature, documented, where)
    return _assemble(name, description, signature, params, extra)


_cached_build = functools.lru_cache(maxsize=1024)(_build)


@attrs.frozen
class _Param:
    name: str
    type: Any  # None: accepts anything
    description: str | None
    default: Any = inspect.Parameter.empty


def _parameters(
    signature: inspect.Signature, documented: Mapping[str, str], where: str
) -> tuple[list[_Param], _Param | None]:
    """The parameters a model can name, and `**kwargs` (or None)."""
    params: list[_Param] = []
    extra = None
    for p in signature.parameters.values():
        if p.kind is p.VAR_POSITIONAL:  # a model names every argument: never filled
            continue
        kind, description = annotation_parts(p.annotation)
        param = _Param(p.name, kind, description or documented.get(p.name), p.default)
        if p.kind is p.VAR_KEYWORD:
            extra = param
        elif p.kind is not p.POSITIONAL_ONLY:
            params.append(param)
        elif p.default is p.empty:
            raise AdapterError(
                f"parameter {p.name!r} is positional-only, but a model names every argument"
                " it sends: make it a normal parameter",
                spec=where,
            )
    return params, extra


def _assemble(
    name: str,
    description: str,
    signature: inspect.Signature,
    params: list[_Param],
    extra: _Param | None,
) -> ArgumentSchema:
    import msgspec

    from fsm_agent.runtime.strict_fields import field_plan

    where = f"tool {name!r}"

    typed = [p for p in params if p.type is not None]
    if extra is not None and extra.type is not None:
        typed.append(extra)
    decoders = {p.name: _decoder(p, where) for p in typed}
    schemas, components = msgspec.json.schema_components(
        [p.type for p in typed], ref_template="#/$defs/{name}"
    )
    quoted = {
        p.name: _clip(json.dumps(s), MAX_SCHEMA_CHARS) for p, s in zip(typed, schemas, strict=True)
    }
    of = {p.name: dict(s) for p, s in zip(typed, schemas, strict=True)}
    properties: dict[str, Any] = {}
    for p in params:
        properties[p.name] = prop = of.get(p.name, {})
        if p.description:
            prop["description"] = p.description
        if p.default is not inspect.Parameter.empty:
            _set_default(prop, p.default)
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    required = [p.name for p in params if p.default is inspect.Parameter.empty]
    if required:
        parameters["required"] = required
    if extra is None:
        parameters["additionalProperties"] = False
    elif extra.type is not None:
        parameters["additionalProperties"] = of[extra.name]
    if components:
        parameters["$defs"] = {k: _closed(v) for k, v in components.items()}
    extra_name = "" if extra is None else extra.name
    checks = {p.name: _check_of(decoders[p.name], field_plan(p.type)) for p in typed}
    return ArgumentSchema(
        description=description,
        parameters=parameters,
        signature=signature,
        shown=f"{name}({_shown(signature)})",
        checks={k: c for k, c in checks.items() if k != extra_name},
        extra=checks.get(extra_name),
        quoted={("**" if k == extra_name else k): q for k, q in quoted.items()},
    )


def _check_of(decoder: msgspec.json.Decoder[Any], plan: Any) -> Check:
    """The check of one parameter: the JSON of the value decoded strictly as its type, then
    (for a type with objects inside that msgspec lets unknown fields through) walked for
    such fields. Everything it uses is bound here, once: the call's cost is the check."""
    import msgspec

    from fsm_agent.runtime.strict_fields import unknown_field

    encode, decode, kind = _encoder().encode, decoder.decode, decoder.type
    invalid, unwritable = msgspec.ValidationError, (msgspec.EncodeError, TypeError, ValueError)

    def check(value: Any, key: str) -> Any:
        try:
            try:
                raw = encode(value)
            except (*unwritable, OverflowError):
                # not writable as UTF-8 JSON (a lone surrogate, a Python adapter's object):
                # checked as the Python value it is
                decoded = msgspec.convert(value, kind, strict=True)
            else:
                decoded = decode(raw)
        except invalid as exc:
            raise Misfit(str(exc)) from None
        except (TypeError, ValueError) as exc:  # msgspec.convert on such a value
            detail = f"got a value that cannot be checked as JSON ({type(exc).__name__})"
            raise Misfit(detail) from None
        found = None if plan is None else unknown_field(value, plan, key)
        if found is not None:
            raise Misfit(f"Object contains unknown field - at `{found}`")
        return decoded

    return check


def _decoder(param: _Param, where: str) -> msgspec.json.Decoder[Any]:
    """A strict decoder of the parameter's type; its schema is written too, so that a type
    either library cannot handle is refused here, naming the parameter."""
    import msgspec

    try:
        msgspec.json.schema(param.type)
        return msgspec.json.Decoder(param.type, strict=True)
    except Exception as exc:  # a type is inspected: a dataclass's field may not resolve
        raise AdapterError(
            f"parameter {param.name!r} is annotated {_type_name(param.type)}, a type its"
            f" JSON arguments cannot be checked against ({type(exc).__name__}:"
            f" {_last_line(exc)}); annotate it with JSON types (str, int, float, bool,"
            " None, list, dict, Literal, a dataclass, attrs class or TypedDict of them …)"
            " or leave it unannotated to accept anything",
            spec=where,
        ) from None


def _closed(component: dict[str, Any]) -> dict[str, Any]:
    """An object's schema as it is checked: no field beyond its properties (see
    `fsm_agent.runtime.strict_fields`)."""
    if component.get("type") == "object" and "properties" in component:
        return {**component, "additionalProperties": component.get("additionalProperties", False)}
    return component


def _set_default(prop: dict[str, Any], default: Any) -> None:
    """Show the default when it is JSON (a sentinel object is left unshown)."""
    import msgspec

    try:
        prop["default"] = msgspec.to_builtins(default)
    except (TypeError, msgspec.EncodeError):
        prop.pop("default", None)


def annotation_parts(annotation: Any) -> tuple[Any, str | None]:
    """The type an argument is checked against (None: anything) and the description the
    annotation carries: `Annotated[T, "text"]`, or metadata with a string `description`
    (`msgspec.Meta`, a pydantic `Field`). `msgspec.Meta` is kept, for its constraints
    (`ge`, `max_length`, `pattern` …); other metadata is dropped."""
    if annotation is inspect.Parameter.empty or annotation is Any or annotation is object:
        return None, None
    if typing.get_origin(annotation) is not Annotated:
        return annotation, None
    import msgspec

    base, *metadata = typing.get_args(annotation)
    description = None
    kept = []
    for item in metadata:
        text = item if isinstance(item, str) else getattr(item, "description", None)
        if isinstance(text, str):
            description = text
        if isinstance(item, msgspec.Meta):
            kept.append(item)
    if base is Any or base is object:
        return None, description
    return (Annotated[(base, *kept)] if kept else base), description


def _docstring(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The docstring's first paragraph, and each documented parameter's description."""
    doc = inspect.getdoc(fn) or ""
    if not doc.strip():
        return "", {}
    import docstring_parser

    try:
        parsed = docstring_parser.parse(doc)
    except docstring_parser.ParseError:  # not a form it reads: the first paragraph only
        return " ".join(doc.split("\n\n", 1)[0].split()), {}
    summary = parsed.short_description or ""
    if parsed.long_description and not parsed.blank_after_short_description:
        summary += " " + parsed.long_description.split("\n\n", 1)[0]
    documented = {
        p.arg_name.lstrip("*"): " ".join(p.description.split())
        for p in parsed.params
        if p.description
    }
    return " ".join(summary.split()), documented


def _shown(signature: inspect.Signature) -> str:
    """The parameters as a model should read them: names, `*`/`**`, `=…` for a default."""
    shown = []
    for p in signature.parameters.values():
        star = "*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else ""
        shown.append(f"{star}{p.name}{'' if p.default is p.empty else '=…'}")
    return ", ".join(shown)


def _type_name(kind: Any) -> str:
    return kind.__qualname__ if isinstance(kind, type) else repr(kind)


def _last_line(exc: Exception) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return _clip(lines[-1] if lines else "", MAX_DETAIL_CHARS)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit} more]"
