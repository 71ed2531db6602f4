"""The halt policy file (`halt-policy.yml`): loaded strictly, failing closed.

A policy names who may own each decision. The control plane (`halt`, `retry_budget`,
`schema_repair_vote`) is `local_only`, always; the data plane (`draft`, `summarize`,
`fixture_host`) may allow a free lane or a free server; routing says that a missing target
fails closed and that privileged tools wait for the local halt check. Every key is required
and no key has a default: config silence is never permission. A missing key, an unknown
key or an unknown value raises `PolicyError` naming the file, the line and the key path.
"""

from __future__ import annotations

import importlib.resources
import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs
import msgspec

from fsm_agent.declaration.documents import PolicyDocument, section_values
from fsm_agent.errors import InvalidInputError, MachineSpecError
from fsm_agent.runtime.lanes import CONTROL_KEYS, ControlPlane, Lane, halt_lane_refusal

if TYPE_CHECKING:
    from fsm_agent.declaration.yamlsource import LineIndex

#: section -> key -> the values accepted there. Nothing outside this table is accepted. Read
#: off `declarations.PolicyDocument`, the type the shipped JSON Schema is generated from.
SCHEMA: Final[Mapping[str, Mapping[str, frozenset[str]]]] = MappingProxyType(
    {
        field.name: MappingProxyType(section_values(field.type))
        for field in msgspec.structs.fields(PolicyDocument)
    }
)
#: Why a section accepts only what it does (appended to an unknown-value error).
_WHY: Final[Mapping[str, str]] = MappingProxyType(
    {
        "$.control_plane": "only a local function may own a control decision",
        "$.routing.missing_target": "a missing routing target fails closed, it never defaults",
        "$.routing.privileged_tools_require": "privileged tools wait for the local halt check",
    }
)
PolicyErrorKind = Literal["malformed", "missing", "unknown_key", "bad_value"]


class PolicyError(InvalidInputError):
    """A halt policy file is unreadable, incomplete or says something unknown; it fails closed.

    `kind` is `malformed` (not YAML, not a mapping), `missing` (a required key), `unknown_key`
    or `bad_value`; `key` is the key path (`$.routing.missing_target`).
    """

    def __init__(
        self, message: str, *, source: str, line: int | None, key: str, kind: PolicyErrorKind
    ) -> None:
        self.source = source
        self.line = line
        self.key = key
        self.kind = kind
        self.detail = message
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {message} @ {key}")


@attrs.frozen
class ControlPlanePolicy:
    """`control_plane`: who owns the halt vote, the retry budget and the schema repair vote."""

    halt: str
    retry_budget: str
    schema_repair_vote: str


@attrs.frozen
class DataPlanePolicy:
    """`data_plane`: where drafts, summaries and fixtures may run."""

    draft: str
    summarize: str
    fixture_host: str


@attrs.frozen
class RoutingPolicy:
    """`routing`: what a missing target does, and what privileged tools require first."""

    missing_target: str
    privileged_tools_require: str


@attrs.frozen
class Policy:
    """A halt policy in the `halt-policy.yml` shape. `source` and `lines` (key path -> line)
    say where it was read from; they are not part of its value."""

    control_plane: ControlPlanePolicy
    data_plane: DataPlanePolicy
    routing: RoutingPolicy
    source: str = attrs.field(default="<policy>", kw_only=True, eq=False)
    lines: Mapping[str, int] = attrs.field(factory=dict, kw_only=True, eq=False, repr=False)

    def value(self, section: str, key: str) -> str:
        """The value at `section.key` (both must be in `SCHEMA`)."""
        if key not in SCHEMA.get(section, {}):
            raise KeyError(f"{section}.{key}")
        return str(getattr(getattr(self, section), key))

    def line_of(self, key_path: str) -> int | None:
        """The line of `key_path` (or of its nearest ancestor) in the file, if read from one."""
        return _nearest_line(self.lines, key_path)

    def control_plane_for_runtime(self) -> ControlPlane:
        """The runtime's `ControlPlane`, every control key taken from this policy."""
        c = self.control_plane
        needs = self.routing.privileged_tools_require
        approval = {"local_halt_and_approval": "required"}.get(needs, "none")
        if needs == "local_halt_and_approval_by_another":
            approval = "by_another"
        return ControlPlane(
            halt=c.halt,
            retry_budget=c.retry_budget,
            schema_repair_vote=c.schema_repair_vote,
            privileged_approval=approval,
        )


def _nearest_line(lines: Mapping[str, int], key: str) -> int | None:
    probe = key
    while probe not in lines and ("." in probe or "[" in probe):
        probe = probe[: max(probe.rfind("."), probe.rfind("["))]
    return lines.get(probe)


def policy_problems(policy: Policy) -> list[tuple[str, str]]:
    """Every value of `policy` outside `SCHEMA`, as (key path, message). Empty when valid.

    `parse_policy` refuses such a policy; this re-checks one built in code."""
    problems = []
    for section, keys in SCHEMA.items():
        for key, allowed in keys.items():
            value = policy.value(section, key)
            if value not in allowed:
                problems.append((f"$.{section}.{key}", _bad_value(section, key, value)))
    return problems


def _bad_value(section: str, key: str, value: Any) -> str:
    allowed = ", ".join(sorted(SCHEMA[section][key]))
    why = _WHY.get(f"$.{section}.{key}") or _WHY.get(f"$.{section}")
    return f"unknown value {value!r} (allowed: {allowed})" + (f": {why}" if why else "")


def default_policy_path() -> Path:
    """The shipped policy, `machines/halt-policy.yml` (the minimal policy)."""
    return Path(str(importlib.resources.files("fsm_agent.machines").joinpath("halt-policy.yml")))


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """Load and validate a policy file; raises `PolicyError` (fail closed) on any problem."""
    from fsm_agent.declaration.yamlsource import Unreadable, read_source

    source = str(path)
    try:
        text = read_source(path)
    except Unreadable as exc:
        raise PolicyError(
            f"cannot read the policy file: {exc.why}",
            source=source,
            line=exc.line,
            key="$",
            kind="malformed",
        ) from exc
    return parse_policy(text, source)


def parse_policy(text: str, source: str) -> Policy:
    """Validate a policy given as YAML text; `source` names it in errors."""
    from fsm_agent.declaration.yamlsource import (  # YAML only when a policy loads
        LineIndex,
        load_yaml,
    )

    try:
        data = load_yaml(text, source=source)
    except MachineSpecError as exc:
        line = exc.source[len(source) + 1 :] if exc.source.startswith(f"{source}:") else ""
        raise PolicyError(
            exc.detail,
            source=source,
            line=int(line) if line.isdigit() else None,
            key="$",
            kind="malformed",
        ) from exc
    return _Reader(data, LineIndex(text, source)).build()


class _Reader:
    """Reads the parsed YAML into a `Policy`, refusing at the first problem."""

    def __init__(self, data: Any, lines: LineIndex) -> None:
        self.data = data
        self.lines = lines

    def fail(self, message: str, key: str, kind: PolicyErrorKind) -> PolicyError:
        line = _nearest_line(self.lines.lines, key)
        return PolicyError(message, source=self.lines.source, line=line, key=key, kind=kind)

    def build(self) -> Policy:
        if not isinstance(self.data, dict):
            raise self.fail(
                f"a policy is a mapping with {', '.join(SCHEMA)} (got {type(self.data).__name__})",
                "$",
                "malformed",
            )
        self._refuse_unknown(self.data, SCHEMA, "$")
        values = {section: self._section(section) for section in SCHEMA}
        policy = Policy(
            control_plane=ControlPlanePolicy(**values["control_plane"]),
            data_plane=DataPlanePolicy(**values["data_plane"]),
            routing=RoutingPolicy(**values["routing"]),
            source=self.lines.source,
            lines=MappingProxyType(dict(self.lines.lines)),
        )
        for key, message in policy_problems(policy):
            raise self.fail(message, key, "bad_value")
        return policy

    def _refuse_unknown(
        self, mapping: Mapping[Any, Any], known: Mapping[str, Any], at: str
    ) -> None:
        for key in mapping:
            if key not in known:
                raise self.fail(
                    f"unknown key {key!r} (known: {', '.join(known)})", f"{at}.{key}", "unknown_key"
                )

    def _section(self, section: str) -> dict[str, str]:
        path = f"$.{section}"
        body = self.data.get(section)
        if section not in self.data:
            raise self.fail("required key missing", path, "missing")
        if not isinstance(body, dict):
            raise self.fail(
                f"{section} must be a mapping of {', '.join(SCHEMA[section])}", path, "malformed"
            )
        self._refuse_unknown(body, SCHEMA[section], path)
        out = {}
        for key in SCHEMA[section]:
            if body.get(key) is None:
                raise self.fail("required key missing", f"{path}.{key}", "missing")
            value = body[key]
            if not isinstance(value, str):
                raise self.fail(_bad_value(section, key, value), f"{path}.{key}", "bad_value")
            out[key] = value
        return out


def policy_refusal(policy: Policy, key: str, lane: Lane | None) -> str | None:
    """Why `lane` may not take decision or work `key` under `policy`, or None when it may.

    Control keys go through `lanes.halt_lane_refusal`. A data-plane key follows its value:
    `local_only` needs a local function off the free tier, `allow_free_lane` refuses only a
    free server (that hosts fixtures), `allow_free_server` takes any lane. Any other key has
    no routing target and fails closed. Pure.
    """
    if key in CONTROL_KEYS:
        return halt_lane_refusal(policy.control_plane_for_runtime(), key, lane)
    if key not in SCHEMA["data_plane"]:
        return f"no routing target for {key!r}: a missing target fails closed"
    if lane is None:
        return f"no lane declared for {key!r}: config silence is not permission"
    value = policy.value("data_plane", key)
    if value == "allow_free_server":
        return None
    if value == "allow_free_lane":
        if lane.kind == "free_server":
            return f"{key!r} allows a free model lane, not a free server (that hosts fixtures)"
        return None
    if value == "local_only":
        if lane.kind != "local_fn" or lane.tier == "free":
            return f"{key!r} is local_only: lane {lane} is not a local function off the free tier"
        return None
    return f"unknown routing value {value!r} for {key!r}: fails closed"
