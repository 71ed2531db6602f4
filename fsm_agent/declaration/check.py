"""Checking a machine declaration: every key, state, transition, guard, halt reason and
budget, at load time, each error with the file, line and key path (see
`fsm_agent.declaration.spec`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any

from fsm_agent.declaration.documents import (
    MAX_NAME,
    MachineDocument,
    StateDocument,
    TransitionDocument,
    field_names,
    structural_problem,
)
from fsm_agent.declaration.refs import BadReference, Search, check_form, resolve_callable
from fsm_agent.declaration.spec import (
    ACTION_OUTCOMES,
    BUDGET_TRIGGER,
    DECISION_TRIGGERS,
    DEFAULT_WAIT_MS,
    USER_FAILURES,
    MachineSpec,
    StateSpec,
    TransitionSpec,
)
from fsm_agent.declaration.yamlsource import LineIndex
from fsm_agent.encoding import text_sha256
from fsm_agent.errors import BudgetError
from fsm_agent.halt import BUDGET_EXHAUSTED, HANDOFF, TERMINAL_STATE, TERMINAL_STATES, HaltReason
from fsm_agent.runtime.budgets import BUDGET_NAMES, MAX_BUDGET, check_budget
from fsm_agent.runtime.effects import RECEIPTS_GUARD
from fsm_agent.runtime.guards import UnknownGuard, guard_form, resolve_guard

_TOP_KEYS = field_names(MachineDocument)
_STATE_KEYS = field_names(StateDocument)
_TRANSITION_KEYS = field_names(TransitionDocument)
#: What the loader refuses that the machine schema cannot: (a fragment of the message, why no
#: JSON Schema says it). Everything else the loader refuses, the schema refuses too
#: (tests/test_declaration_schemas.py checks both directions on mutated machines).
LOADER_ONLY: tuple[tuple[str, str], ...] = (
    ("unknown state", "source and dest name states declared in the same file"),
    ("'initial' must name a declared state", "initial names a state declared in the file"),
    ("the initial state cannot be terminal", "depends on the state's declaration"),
    ("is not one of done, budget_exhausted, handoff", "which states may be terminal"),
    ("missing terminal state", "done, budget_exhausted, handoff are each declared terminal"),
    ("a terminal state has no action", "action and terminal exclude each other"),
    ("a non-terminal state needs an action", "action is one of three names or a reference"),
    ("action '", "a user action must import and be callable"),
    ("unknown guard", "a guard must be a built-in (or its negation)"),
    ("guard '", "a user guard must import and be callable"),
    ("is reserved", "the runtime's own 'budget' trigger"),
    ("never produces", "a trigger must be an outcome of the source state's action"),
    ("transition out of terminal state", "depends on the source state's declaration"),
    ("a person's decision (", "a decision edge's dest depends on the dest's declaration"),
    ("runs the frozen call", "an approval's dest depends on the dest's action"),
    ("names the user guard that stopped the run", "guard_refused needs a user guard"),
    ("only a transition into a terminal state", "halt depends on the dest's declaration"),
    ("needs 'halt:'", "halt is required exactly when the dest is terminal"),
    ("ends in '", "a halt reason ends in one terminal state"),
    ("only on a non-terminal dest", "retry depends on the dest's declaration"),
    ("has no way out", "the graph: every non-terminal state has an edge out"),
    ("is unreachable", "the graph: every state is reachable from initial"),
    ("may not contain control characters", "portable regexes have no Unicode categories"),
    ("must be text of 1 to", "a YAML key that is not text: JSON keys always are"),
    ("must be finite", "YAML's .nan: JSON has no NaN, and no comparison refuses it"),
    ("policy '", "the named policy file must load (load_machine)"),
    ("only a user action", "outcomes depend on the state's action"),
    ("declared twice", "a JSON Schema's uniqueItems is not said as a name"),
    ("every user action may fire", "failed, timed_out and budget are never declared"),
)
#: Unicode categories refused in names: controls, format characters (bidi overrides,
#: zero-width), line and paragraph separators, surrogates, unassigned.
_CONTROL = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Cn"})


class Validator:
    """Builds a `MachineSpec` from loaded YAML, refusing the first thing that is wrong."""

    def __init__(
        self, data: Any, lines: LineIndex, search: Search = (), resolve: bool = True
    ) -> None:
        self.data = data
        #: where the declaration's `module:function` references are looked for after sys.path
        self.search = search
        #: False: `module:function` references are checked for their form only, nothing is
        #: imported (a journaled declaration read for review, away from the author's code)
        self.resolve = resolve
        self.err = lines.error
        self.source = lines.source

    def build(self, text: str) -> MachineSpec:
        d = self.data
        if not isinstance(d, dict):
            raise self.err("a machine declaration must be a mapping", "$")
        extra = sorted(set(map(str, d)) - _TOP_KEYS)
        if extra:
            raise self.err(
                f"unknown key {extra[0]!r} (known: {', '.join(sorted(_TOP_KEYS))})", f"$.{extra[0]}"
            )
        name = self._str(d, "name", "$.name")
        states = self._states(d.get("states"))
        initial = self._initial(d.get("initial"), states)
        declared = self._transitions(d.get("transitions"), states)
        implicit = tuple(
            TransitionSpec(
                index=len(declared) + i,
                trigger=BUDGET_TRIGGER,
                source=s.name,
                dest=BUDGET_EXHAUSTED,
                guards=("budget_tripped",),
                implicit=True,
            )
            for i, s in enumerate(s for s in states if not s.terminal)
        )
        self._check_graph(states, declared, initial)
        spec = MachineSpec(
            name=name,
            source=self.source,
            text=text,
            sha256=text_sha256(text),
            description=self._description(d.get("description")),
            initial=initial,
            states=states,
            transitions=declared + implicit,
            budgets=self._budgets(d.get("budgets")),
            thrash_limit=self._thrash(d.get("thrash_limit", 0)),
            wait_limit_ms=self._wait_limit(d.get("wait_limit_ms", DEFAULT_WAIT_MS)),
            tools=self._tools(d),
            policy=self._policy(d.get("policy")),
        )
        # The structural check: the declaration's type, the one the schema is generated from.
        # The checks above refuse the usual mistakes with friendlier words; this refuses
        # anything else that is not in the declared shape.
        problem = structural_problem(d, MachineDocument)
        if problem is not None:
            message, key = problem
            raise self.err(f"{message} (the shape: `fsm-agent schema machine`)", key)
        return spec

    def _description(self, raw: Any) -> str:
        if raw is not None and not isinstance(raw, str):
            raise self.err(f"description must be text, got {raw!r}", "$.description")
        return raw or ""

    def _policy(self, raw: Any) -> str | None:
        if raw is None:
            return None
        if not isinstance(raw, str) or not raw.strip():
            raise self.err(
                "policy must name a halt policy file (relative to this file)", "$.policy"
            )
        return raw

    def _check_name(self, name: Any, what: str, path: str) -> None:
        """Names reach pictures, logs and terminals: text of 1-200 characters with no
        control character or line break (any letter, digit, punctuation or space is fine)."""
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
            raise self.err(f"{what} must be text of 1 to {MAX_NAME} characters, got {name!r}", path)
        bad = next((c for c in name if unicodedata.category(c) in _CONTROL), None)
        if bad is not None:
            raise self.err(
                f"{what} may not contain control characters or line breaks (found"
                f" U+{ord(bad):04X} in {name!r})",
                path,
            )

    def _str(self, d: Mapping[str, Any], key: str, path: str) -> str:
        value = d.get(key)
        if not isinstance(value, str) or not value.strip():
            raise self.err(f"required field {key!r} missing or not a non-empty string", path)
        return value

    def _states(self, raw: Any) -> tuple[StateSpec, ...]:
        if not isinstance(raw, dict) or not raw:
            raise self.err("required field 'states' missing or not a mapping of states", "$.states")
        out = []
        for name, body in raw.items():
            path = f"$.states.{name}"
            self._check_name(name, "a state name", path)
            body = {} if body is None else body
            if not isinstance(body, dict) or set(body) - _STATE_KEYS:
                raise self.err(
                    "a state is a mapping with 'action' (and, for a user action, 'outcomes')"
                    " or 'terminal: true'",
                    path,
                )
            terminal = body.get("terminal", False)
            if not isinstance(terminal, bool):
                raise self.err(
                    f"terminal must be true or false, got {terminal!r}", f"{path}.terminal"
                )
            action = body.get("action")
            if terminal and action is not None:
                raise self.err("a terminal state has no action", f"{path}.action")
            if not terminal:
                self._check_action(action, f"{path}.action")
            if terminal and name not in TERMINAL_STATES:
                raise self.err(
                    f"terminal state {name!r} is not one of {', '.join(TERMINAL_STATES)}"
                    " (every halt reason ends in one of them)",
                    path,
                )
            outcomes = self._outcomes(body.get("outcomes"), action, f"{path}.outcomes")
            out.append(StateSpec(str(name), action, terminal, outcomes))
        names = {s.name for s in out}
        for t in TERMINAL_STATES:
            if t not in names or not next(s for s in out if s.name == t).terminal:
                raise self.err(
                    f"missing terminal state {t!r} (declare it with 'terminal: true')", "$.states"
                )
        return tuple(out)

    def _outcomes(self, raw: Any, action: Any, path: str) -> tuple[str, ...] | None:
        """A user action's declared outcomes: names, at least one, none twice, none of the
        outcomes every user action has."""
        if raw is None:
            return None
        if not isinstance(action, str) or ":" not in action:
            raise self.err(
                "only a user action (package.module:function) declares outcomes: a built-in"
                " action's are fixed",
                path,
            )
        if not isinstance(raw, list) or not raw:
            raise self.err("outcomes is a non-empty list of names", path)
        for i, name in enumerate(raw):
            if not isinstance(name, str) or not name.strip():
                raise self.err(f"an outcome is a non-empty name, got {name!r}", f"{path}[{i}]")
            self._check_name(name, "an outcome", f"{path}[{i}]")
            if name in USER_FAILURES or name == BUDGET_TRIGGER:
                raise self.err(
                    f"{name!r} is not declared: every user action may fire failed and"
                    f" timed_out, and {BUDGET_TRIGGER!r} is the runtime's",
                    f"{path}[{i}]",
                )
            if name in raw[:i]:
                raise self.err(f"outcome {name!r} declared twice", f"{path}[{i}]")
        return tuple(raw)

    def _check_action(self, action: Any, path: str) -> None:
        if isinstance(action, str) and action in ACTION_OUTCOMES:
            return
        if not isinstance(action, str) or ":" not in action:
            raise self.err(
                f"a non-terminal state needs an action: one of "
                f"{', '.join(ACTION_OUTCOMES)} or 'package.module:function'"
                f" (got {action!r})",
                path,
            )
        try:
            resolve_callable(action, self.search) if self.resolve else check_form(action)
        except BadReference as exc:
            raise self.err(f"action {action!r}: {exc}", path) from None

    def _initial(self, raw: Any, states: tuple[StateSpec, ...]) -> str:
        by_name = {s.name: s for s in states}
        if not isinstance(raw, str) or raw not in by_name:
            raise self.err(f"'initial' must name a declared state (got {raw!r})", "$.initial")
        if by_name[raw].terminal:
            raise self.err("the initial state cannot be terminal", "$.initial")
        return raw

    def _transitions(self, raw: Any, states: tuple[StateSpec, ...]) -> tuple[TransitionSpec, ...]:
        if not isinstance(raw, list) or not raw:
            raise self.err("required field 'transitions' missing or not a list", "$.transitions")
        by_name = {s.name: s for s in states}
        return tuple(self._transition(i, t, by_name) for i, t in enumerate(raw))

    def _transition(self, i: int, t: Any, by_name: Mapping[str, StateSpec]) -> TransitionSpec:
        path = f"$.transitions[{i}]"
        if not isinstance(t, dict):
            raise self.err("a transition is a mapping of trigger, source, dest, guards", path)
        extra = sorted(set(map(str, t)) - _TRANSITION_KEYS)
        if extra:
            raise self.err(f"unknown key {extra[0]!r}", f"{path}.{extra[0]}")
        trigger = self._str(t, "trigger", f"{path}.trigger")
        self._check_name(trigger, "a trigger", f"{path}.trigger")
        if trigger == BUDGET_TRIGGER:
            raise self.err(
                f"trigger {BUDGET_TRIGGER!r} is reserved: the runtime adds it to every"
                " non-terminal state",
                f"{path}.trigger",
            )
        for end in ("source", "dest"):
            name = t.get(end)
            if not isinstance(name, str) or name not in by_name:
                raise self.err(f"unknown state {name!r}", f"{path}.{end}")
        source, dest = by_name[t["source"]], by_name[t["dest"]]
        if source.terminal:
            self._decision_edge(trigger, source, dest, t, path)
        produces = None if source.terminal else source.produces()
        if produces is not None and trigger not in produces:
            raise self.err(
                f"state {source.name!r} runs action {source.action!r}, which never"
                f" produces {trigger!r} (it produces: {', '.join(produces)})",
                f"{path}.trigger",
            )
        guards = self._guards(t.get("guards", []), path)
        halt = self._halt(t.get("halt"), dest, path)
        if halt is HaltReason.COMPLETED and RECEIPTS_GUARD not in guards:
            guards = (RECEIPTS_GUARD, *guards)  # the runtime's rule, in every declaration
        if halt is HaltReason.GUARD_REFUSED and not any(":" in g for g in guards):
            raise self.err(
                "halt 'guard_refused' names the user guard that stopped the run: this edge"
                " has none (reference one as 'package.module:function')",
                f"{path}.guards",
            )
        return TransitionSpec(
            index=i,
            trigger=trigger,
            source=source.name,
            dest=dest.name,
            guards=guards,
            halt=halt,
            retry=self._retry(t.get("retry", False), dest, path),
        )

    def _decision_edge(
        self, trigger: str, source: StateSpec, dest: StateSpec, t: Mapping[str, Any], path: str
    ) -> None:
        """The only edges out of a terminal state: a person's decision out of `handoff`
        (`approved`, `denied`, `answered`), into a state the run goes on in; `approved`
        into one that runs the frozen call."""
        if source.name != HANDOFF or trigger not in DECISION_TRIGGERS:
            raise self.err(
                f"transition out of terminal state {source.name!r} (only a person's decision"
                f" leaves handoff: {', '.join(DECISION_TRIGGERS)})",
                f"{path}.source",
            )
        if dest.terminal or "halt" in t or t.get("retry"):
            raise self.err(
                f"a person's decision ({trigger}) continues the run: its dest is a"
                " non-terminal state, with no halt and no retry",
                f"{path}.dest",
            )
        if trigger == "approved" and dest.action != "tool":
            raise self.err(
                f"'approved' runs the frozen call: its dest must be a state whose action is"
                f" tool ({dest.name!r} runs {dest.action!r})",
                f"{path}.dest",
            )

    def _wait_limit(self, raw: Any) -> int:
        """How long a run may wait for a person's decision, in ms (1 to MAX_BUDGET)."""
        whole = isinstance(raw, int) or (isinstance(raw, float) and raw.is_integer())
        if isinstance(raw, bool) or not whole or not 1 <= raw <= MAX_BUDGET:
            raise self.err(
                f"wait_limit_ms must be a whole number of ms from 1 to {MAX_BUDGET}, got {raw!r}",
                "$.wait_limit_ms",
            )
        return int(raw)

    def _guards(self, raw: Any, path: str) -> tuple[str, ...]:
        if not isinstance(raw, list) or not all(isinstance(g, str) for g in raw):
            raise self.err("guards must be a list of guard names", f"{path}.guards")
        for j, ref in enumerate(raw):
            try:
                resolve_guard(ref, self.search) if self.resolve else guard_form(ref)
            except UnknownGuard as exc:
                raise self.err(str(exc), f"{path}.guards[{j}]") from None
        return tuple(raw)

    def _halt(self, raw: Any, dest: StateSpec, path: str) -> HaltReason | None:
        if not dest.terminal:
            if raw is not None:
                raise self.err(
                    "only a transition into a terminal state has a halt reason", f"{path}.halt"
                )
            return None
        try:
            reason = HaltReason(raw)
        except ValueError:
            raise self.err(
                f"a transition into {dest.name!r} needs 'halt:' with a reason from the"
                f" enum (got {raw!r})",
                f"{path}.halt",
            ) from None
        if TERMINAL_STATE[reason] != dest.name:
            raise self.err(
                f"halt reason {reason.value!r} ends in {TERMINAL_STATE[reason]!r},"
                f" not {dest.name!r}",
                f"{path}.halt",
            )
        return reason

    def _retry(self, raw: Any, dest: StateSpec, path: str) -> bool:
        if not isinstance(raw, bool) or (raw and dest.terminal):
            raise self.err(
                "retry must be true or false, and only on a non-terminal dest", f"{path}.retry"
            )
        return raw

    def _check_graph(
        self, states: tuple[StateSpec, ...], declared: tuple[TransitionSpec, ...], initial: str
    ) -> None:
        for s in states:
            if not s.terminal and not any(t.source == s.name for t in declared):
                raise self.err(
                    f"non-terminal state {s.name!r} has no way out", f"$.states.{s.name}"
                )
        seen, frontier = {initial, BUDGET_EXHAUSTED}, [initial]
        while frontier:
            here = frontier.pop()
            for t in declared:
                if t.source == here and t.dest not in seen:
                    seen.add(t.dest)
                    frontier.append(t.dest)
        for s in states:
            if s.name not in seen:
                raise self.err(
                    f"state {s.name!r} is unreachable from {initial!r}", f"$.states.{s.name}"
                )

    def _budgets(self, raw: Any) -> Mapping[str, int | float]:
        if not isinstance(raw, dict):
            raise self.err("required field 'budgets' missing or not a mapping", "$.budgets")
        out: dict[str, int | float] = {}
        for name in BUDGET_NAMES:
            if name not in raw:
                raise self.err(
                    f"required field missing: every machine declares all of"
                    f" {', '.join(BUDGET_NAMES)}",
                    f"$.budgets.{name}",
                )
        for name, value in raw.items():
            try:
                out[str(name)] = check_budget(str(name), value)
            except BudgetError as exc:
                raise self.err(str(exc), f"$.budgets.{name}") from None
        return out

    def _thrash(self, raw: Any) -> int:
        """A whole number (`3.0` too, as JSON Schema counts it) from 0 (off) to MAX_BUDGET."""
        whole = isinstance(raw, int) or (isinstance(raw, float) and raw.is_integer())
        if isinstance(raw, bool) or not whole or not 0 <= raw <= MAX_BUDGET:
            raise self.err(
                f"thrash_limit must be a whole number from 0 (off) to {MAX_BUDGET}, got {raw!r}",
                "$.thrash_limit",
            )
        return int(raw)

    def _tools(self, d: Mapping[str, Any]) -> tuple[str, ...] | None:
        raw = d.get("tools")
        if raw is None:
            return None
        if not isinstance(raw, list) or not all(isinstance(x, str) and x for x in raw):
            raise self.err("tools must be a list of tool names (the allow-list)", "$.tools")
        return tuple(raw)
