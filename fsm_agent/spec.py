"""Machine declarations: load a YAML machine, validate it, fail with the file, line and key.

A declaration names its states (each with the action the worker performs there, or none
for terminal states), its transitions (trigger, source, dest, guards by name, and for
transitions into a terminal state the halt reason), its default budgets and optionally a
tool allow-list. Everything is checked at load time (`fsm_agent.spec_check`); nothing is
resolved lazily. The file's shape is `fsm_agent.declarations.MachineDocument`, from which
the shipped JSON Schema (`fsm-agent schema machine`) is generated.
"""

from __future__ import annotations

import functools
import importlib
import importlib.resources
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from fsm_agent.errors import MachineSpecError
from fsm_agent.halt import HaltReason

if TYPE_CHECKING:
    pass

#: Built-in actions and the outcomes (triggers) each one can produce.
ACTION_OUTCOMES: Mapping[str, tuple[str, ...]] = {
    "model": ("tool_call", "answer", "handoff", "rejected"),
    "tool": ("tool_returned", "tool_failed", "tool_timed_out"),
    "receipts": ("collected",),
}
#: Trigger the worker fires, from every non-terminal state, when a meter trips.
BUDGET_TRIGGER = "budget"


@attrs.frozen
class StateSpec:
    """One declared state: the action performed there (None for a terminal state)."""

    name: str
    action: str | None
    terminal: bool


@attrs.frozen
class TransitionSpec:
    """One declared transition. Candidates for a trigger are tried in declaration order."""

    index: int
    trigger: str
    source: str
    dest: str
    guards: tuple[str, ...] = ()
    halt: HaltReason | None = None
    retry: bool = False
    implicit: bool = False


@attrs.frozen
class MachineSpec:
    """A validated machine declaration."""

    name: str
    source: str
    text: str
    sha256: str
    description: str
    initial: str
    states: tuple[StateSpec, ...]
    transitions: tuple[TransitionSpec, ...]
    budgets: Mapping[str, int | float]
    thrash_limit: int
    tools: tuple[str, ...] | None
    #: the halt policy file the declaration names, as written (relative to the file)
    policy: str | None = None

    def policy_path(self) -> Path | None:
        """The declared policy file, resolved next to the declaration (None if none)."""
        if self.policy is None:
            return None
        return Path(self.source).parent / self.policy

    def state(self, name: str) -> StateSpec:
        for s in self.states:
            if s.name == name:
                return s
        raise KeyError(name)

    def candidates(self, source: str, trigger: str) -> tuple[TransitionSpec, ...]:
        return tuple(t for t in self.transitions if t.source == source and t.trigger == trigger)


def machine_path(ref: str) -> Path:
    """A declaration file from a name in the `machines` package or a path to a YAML file."""
    if ref.endswith((".yaml", ".yml")) or "/" in ref or "\\" in ref:
        path = Path(ref)
        if not path.is_file():
            raise MachineSpecError("no such machine file", source=ref)
        return path
    resource = importlib.resources.files("machines").joinpath(f"{ref}.yaml")
    if not resource.is_file():
        known = sorted(
            p.name[: -len(".yaml")]
            for p in importlib.resources.files("machines").iterdir()
            if p.name.endswith(".yaml")
        )
        raise MachineSpecError(
            f"no declared machine named {ref!r} (known: {', '.join(known)}; or pass a .yaml path)",
            source=ref,
        )
    return Path(str(resource))


def load_machine(ref: str) -> MachineSpec:
    """Load and validate a machine by name or path."""
    from fsm_agent.yamlsource import Unreadable, read_source

    path = machine_path(ref)
    try:
        text = read_source(path)
    except Unreadable as exc:
        raise MachineSpecError(f"cannot read: {exc.why}", source=str(path)) from exc
    spec = parse_machine(text, source=str(path))
    declared = spec.policy_path()
    if declared is not None:  # a declared policy must load: it fails closed at load time
        from fsm_agent.policy import PolicyError, load_policy

        try:
            load_policy(declared)
        except PolicyError as exc:
            from fsm_agent.yamlsource import LineIndex

            raise LineIndex(text, str(path)).error(
                f"policy {spec.policy!r}: {exc}", "$.policy"
            ) from exc
    return spec


def parse_machine(text: str, *, source: str) -> MachineSpec:
    """Validate a declaration given as YAML text; `source` names it in errors.

    A valid declaration is parsed once per process (pure-Python YAML costs ~75 ms for the
    agent loop): the frozen spec is shared by every later call with the same text and
    source — a worker that runs many runs of one machine pays once."""
    return _parse(text, source)


@functools.lru_cache(maxsize=64)
def _parse(text: str, source: str) -> MachineSpec:
    # YAML and the checks are imported only when a machine loads.
    from fsm_agent.spec_check import Validator
    from fsm_agent.yamlsource import LineIndex, load_yaml

    data = load_yaml(text, source=source)
    return Validator(data, LineIndex(text, source)).build(text)
