"""The shape of the two declaration files, a machine and a halt policy, declared once as types.

The JSON Schemas shipped in `machines/` (`fsm_agent.machines`) are generated from these types
(`declaration_schema`; a test fails when a shipped file differs from a fresh one), and the
loaders check against the same types: `spec_check` takes its known keys from them and, after
its own checks (which give the friendlier messages), refuses anything that does not convert
to `MachineDocument` (`structural_problem`); `policy.SCHEMA`, the table the policy reader
checks, is read off `PolicyDocument`. A field added here is in the schema and in the loader.

What a JSON Schema cannot say stays in the loader (`spec_check.LOADER_ONLY` lists it): that
`initial`, `source` and `dest` name declared states, which terminal states exist, that
guards and actions resolve, halt reasons that match their terminal state, the graph.

Imported only when a declaration loads or a schema is printed (msgspec costs ~40 ms).
"""

from __future__ import annotations

import json
import math
import re
import typing
from typing import Annotated, Any, Final, Literal

import msgspec
from msgspec import Meta

from fsm_agent.halt import HaltReason
from fsm_agent.runtime.budgets import MAX_BUDGET

#: The largest count or amount a declaration may give: the largest integer every JSON
#: reader (a JavaScript editor too) holds exactly.
MAX_NUMBER: Final = MAX_BUDGET
#: The longest state name or trigger, in characters.
MAX_NAME: Final = 200
#: Draft-07: the newest draft that yaml-language-server (VS Code's YAML extension, among
#: others) fully supports. The schemas use nothing newer: `$defs` is only where the
#: definitions sit, reached by JSON pointer, and no `$ref` has siblings.
JSON_SCHEMA_DIALECT: Final = "http://json-schema.org/draft-07/schema#"

_NAME = Meta(min_length=1, max_length=MAX_NAME, pattern=r"\S")
StateName = Annotated[str, _NAME, Meta(description="A state name: 1-200 characters, not blank.")]
Text = Annotated[str, Meta(pattern=r"\S", description="Text that is not blank.")]
Count = Annotated[int, Meta(gt=0, le=MAX_NUMBER)]


class _Document(msgspec.Struct, forbid_unknown_fields=True):
    """A mapping with exactly the declared keys: an unknown key is refused."""


class StateDocument(_Document, kw_only=True):
    """One state: `action` for a state the worker acts in, `terminal: true` for a terminal
    state (done, budget_exhausted or handoff), never both."""

    action: Annotated[
        str | None,
        Meta(
            description="What the worker does in this state: model, tool, receipts, or a user"
            " action package.module:function.",
            examples=["model", "tool", "receipts", "package.module:function"],
        ),
    ] = None
    outcomes: Annotated[
        Annotated[list[Annotated[str, _NAME]], Meta(min_length=1)] | None,
        Meta(
            description="A user action's outcomes (the ActionResult outcomes it may return;"
            " failed and timed_out are always possible): every edge from this state names one,"
            " check proves each is handled, and any other the action returns is a failure.",
            examples=[["webhook_received", "no_webhook"]],
        ),
    ] = None
    terminal: Annotated[bool, Meta(description="True for a terminal state.")] = False


class TransitionDocument(_Document, kw_only=True):
    """One transition. Candidates for a trigger are tried in declaration order; the first
    whose guards all pass is taken."""

    trigger: Annotated[
        str,
        _NAME,
        Meta(description="An outcome of the source state's action ('budget' is reserved)."),
    ]
    source: Annotated[str, Meta(description="A declared non-terminal state.")]
    dest: Annotated[str, Meta(description="A declared state.")]
    guards: Annotated[
        tuple[
            Annotated[
                str,
                Meta(
                    description="A built-in guard name, 'not NAME', or a user guard"
                    " package.module:function."
                ),
            ],
            ...,
        ],
        Meta(description="Guards that must all pass."),
    ] = ()
    halt: Annotated[
        HaltReason | None,
        Meta(description="Required exactly when dest is terminal: a reason ending there."),
    ] = None
    retry: Annotated[
        bool, Meta(description="The edge spends one retry (only into a non-terminal state).")
    ] = False


class BudgetsDocument(_Document):
    """The run's default caps; every budget is required (an operator may raise them)."""

    max_steps: Annotated[Count, Meta(description="Model calls, retries included.")]
    wall_clock_ms: Annotated[Count, Meta(description="Wall-clock cap of the run, in ms.")]
    max_cost: Annotated[
        float, Meta(gt=0, le=MAX_NUMBER, description="Dollars, as the model adapters report.")
    ]
    tool_timeout_ms: Annotated[Count, Meta(description="Time cap of one tool call, in ms.")]
    max_retries: Annotated[
        int,
        Meta(ge=0, le=MAX_NUMBER, description="Parse retries and retryable tool errors."),
    ]


class MachineDocument(_Document, kw_only=True):
    """An fsm-agent machine declaration (`fsm-agent validate FILE` checks one).

    This schema is the file's structure. The loader also refuses what no JSON Schema can
    say: an `initial`, `source` or `dest` that is not a declared state; terminal states
    other than exactly done, budget_exhausted and handoff; actions and guards that do not
    resolve; a halt reason that does not end in its dest; a trigger the action never
    produces; unreachable states or states with no way out; names with control characters.
    """

    name: Annotated[Text, Meta(description="The machine's name.")]
    description: Annotated[str | None, Meta(description="What the machine does.")] = None
    initial: Annotated[str, Meta(description="The state a run starts in (not terminal).")]
    budgets: BudgetsDocument
    thrash_limit: Annotated[
        int,
        Meta(
            ge=0,
            le=MAX_NUMBER,
            description="Halt 'thrashing' after the same tool call this many times in a row;"
            " 0 = off.",
        ),
    ] = 0
    wait_limit_ms: Annotated[
        int,
        Meta(
            ge=1,
            le=MAX_NUMBER,
            description="How long a run may wait in handoff for a person's decision (approve,"
            " deny, answer) before it ends 'wait_expired'; default 86400000 (24 hours).",
        ),
    ] = 86_400_000
    tools: Annotated[
        tuple[Annotated[str, Meta(min_length=1)], ...] | None,
        Meta(description="The tool allow-list; absent: every tool in the bound registry."),
    ] = None
    policy: Annotated[
        Text | None,
        Meta(description="A halt policy file, relative to this file; loaded with it."),
    ] = None
    states: Annotated[
        dict[StateName, StateDocument],
        Meta(min_length=1, description="Every state by name, terminal ones included."),
    ]
    transitions: Annotated[
        tuple[TransitionDocument, ...],
        Meta(min_length=1, description="The declared transitions, in order."),
    ]


class ControlPlaneDocument(_Document):
    """Who owns each control decision: only a local function may."""

    halt: Annotated[Literal["local_only"], Meta(description="Who decides a halt.")]
    retry_budget: Annotated[Literal["local_only"], Meta(description="Who spends retries.")]
    schema_repair_vote: Annotated[
        Literal["local_only"], Meta(description="Who may rewrite an invalid model reply.")
    ]


class DataPlaneDocument(_Document):
    """Where drafts, summaries and fixtures may run."""

    draft: Annotated[
        Literal["allow_free_lane", "local_only"], Meta(description="Where drafts may run.")
    ]
    summarize: Annotated[
        Literal["allow_free_lane", "local_only"], Meta(description="Where summaries may run.")
    ]
    fixture_host: Annotated[
        Literal["allow_free_server", "local_only"], Meta(description="Where fixtures are hosted.")
    ]


class RoutingDocument(_Document):
    """What a missing routing target does, and what privileged tools wait for."""

    missing_target: Annotated[
        Literal["fail_closed"], Meta(description="A missing target fails closed.")
    ]
    privileged_tools_require: Annotated[
        Literal["local_halt", "local_halt_and_approval", "local_halt_and_approval_by_another"],
        Meta(
            description="Privileged tools wait for the local halt; with _and_approval, each"
            " call also for a person's approval (fsm-agent approve); _by_another: from"
            " someone other than who started the run."
        ),
    ]


class PolicyDocument(_Document):
    """An fsm-agent halt policy file. Every key is required and none has a default:
    config silence is never permission."""

    control_plane: ControlPlaneDocument
    data_plane: DataPlaneDocument
    routing: RoutingDocument


#: kind -> (document type, schema file name, title)
KINDS: Final[dict[str, tuple[type[msgspec.Struct], str, str]]] = {
    "machine": (MachineDocument, "machine.schema.json", "fsm-agent machine declaration"),
    "policy": (PolicyDocument, "halt-policy.schema.json", "fsm-agent halt policy"),
}


def declaration_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft-07) of a declaration kind, generated from its type."""
    cls, filename, title = KINDS[kind]
    generated = msgspec.json.schema(cls)
    defs = dict(generated["$defs"])
    root = defs.pop(cls.__name__)
    schema: dict[str, Any] = {
        "$schema": JSON_SCHEMA_DIALECT,
        "$id": f"urn:fsm-agent:schema:{filename}",
        "title": title,
        **{k: v for k, v in root.items() if k != "title"},
    }
    if defs:
        schema["$defs"] = defs
    reflowed: dict[str, Any] = _reflowed(schema)
    return reflowed


def _reflowed(node: Any) -> Any:
    """Descriptions come from docstrings wrapped at 100 columns: join each paragraph's lines
    (an editor shows a description as one paragraph per line)."""
    if isinstance(node, dict):
        return {
            k: re.sub(r"(?<!\n)\n(?!\n)", " ", v)
            if k == "description" and isinstance(v, str)
            else _reflowed(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_reflowed(v) for v in node]
    return node


def schema_text(kind: str) -> str:
    """The schema file's text, exactly as shipped in `machines/`."""
    return json.dumps(declaration_schema(kind), indent=2, ensure_ascii=False) + "\n"


def section_values(cls: type[msgspec.Struct]) -> dict[str, frozenset[str]]:
    """key -> the values a section type accepts (each of its fields a Literal of text)."""
    out = {}
    for field in msgspec.structs.fields(cls):
        tp = field.type
        while typing.get_origin(tp) is Annotated:
            tp = typing.get_args(tp)[0]
        values = typing.get_args(tp)
        if typing.get_origin(tp) is not Literal or not all(isinstance(v, str) for v in values):
            raise TypeError(f"{cls.__name__}.{field.name} must be a Literal of strings")
        out[field.name] = frozenset(values)
    return out


def field_names(cls: type[msgspec.Struct]) -> frozenset[str]:
    """The keys a document type declares."""
    return frozenset(f.name for f in msgspec.structs.fields(cls))


def structural_problem(data: Any, cls: type[msgspec.Struct]) -> tuple[str, str] | None:
    """Why `data` (loaded YAML) does not have the shape of `cls`, as (message, key path), or
    None when it does. A whole float (`8.0`) counts as an integer, as in JSON Schema."""
    try:
        msgspec.convert(_whole_floats_as_int(data), cls)
    except msgspec.ValidationError as exc:
        message, _, where = str(exc).rpartition(" - at ")
        if not message:
            return str(exc), "$"
        where = where.strip("`")
        if where.startswith("key` in `"):
            where, message = where[len("key` in `") :], f"{message} (as a key)"
        return message, re.sub(r"\[\.\.\.\].*", "", where)
    return None


def _whole_floats_as_int(data: Any) -> Any:
    if isinstance(data, float) and math.isfinite(data) and data.is_integer():
        return int(data)
    if isinstance(data, dict):
        return {k: _whole_floats_as_int(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_whole_floats_as_int(v) for v in data]
    return data
