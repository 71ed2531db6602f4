"""Tools: plain Python callables behind a small registry, each declaring its lane.

A tools module exposes its registry as `TOOLS`; `fsm-agent run --tools MODULE` binds it. A
tool returns a `ToolResult` (or a dict of the same shape); receipts are its evidence.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from fsm_agent.declaration.refs import BadReference, Search, import_module
from fsm_agent.errors import AdapterError
from fsm_agent.runtime.deadline import Isolation
from fsm_agent.runtime.interrupts import raised_by_user_code
from fsm_agent.runtime.lanes import LOCAL, Lane
from fsm_agent.runtime.receipts import Receipt, finite_cost
from fsm_agent.runtime.tool_schema import ArgumentsRefused, argument_schema, checked_arguments


@attrs.frozen
class ToolResult:
    """What a tool reports: receipts (the evidence), what the model sees, and the goal value.

    `final` is the run's answer when this call achieves the goal; it counts only when the
    receipts are complete.
    """

    receipts: tuple[Receipt, ...] = ()
    observation: Any = None
    final: str | None = None
    cost: float = attrs.field(default=0.0, validator=finite_cost)


class ToolError(Exception):
    """Raised by a tool to report a failure; `retryable=False` means retrying cannot help.

    Any other exception a tool raises is treated as non-retryable: an unknown failure of a
    side-effecting tool is not retried blindly.
    """

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        self.retryable = retryable
        super().__init__(message)


@attrs.frozen
class Tool:
    """One tool. `side_effect=False` declares a read (see the attribute); `privileged` tools
    run only after the local halt check has cleared them;
    `isolation="process"` runs each call in a child process that is killed at the deadline;
    the default, "thread", makes it on the run's driver thread, abandoned at the deadline
    (`fsm_agent.runtime.driver`); `isolation="inline"` makes it there too, but the deadline does not
    stop it (a late result is refused): only for tools that cannot block."""

    name: str
    fn: Callable[..., Any]
    lane: Lane = LOCAL
    privileged: bool = False
    idempotent: bool = False
    isolation: Isolation = "thread"
    #: False only for a read: a call that cannot change the world. A run never ends
    #: `completed` while a side-effecting call lacks complete receipts; the default fails
    #: closed, so a forgotten declaration never lets an unreceipted write pass as done.
    side_effect: bool = True
    #: True when calling it again with the same arguments after it took effect is meant (a
    #: second e-mail, a new id per call). Otherwise the runtime refuses such a repeat
    #: (`repeat_refused`); an idempotent tool may always repeat (the same effect again).
    repeatable: bool = False
    #: True when a person must approve each call before it runs: the run stops in `handoff`
    #: (`approval_required`) with the call frozen, and `fsm-agent approve` lets exactly that
    #: call run (`fsm_agent.runtime.decisions`)
    approval: bool = False


def argument_problem(tool: Tool, args: Mapping[str, Any]) -> str | None:
    """Why the tool cannot take `args` (a required argument missing, one it does not know, a
    value that does not fit its parameter's type), or None. See `tool_arguments`."""
    try:
        tool_arguments(tool, args)
    except ArgumentsRefused as exc:
        return str(exc)
    return None


def tool_arguments(tool: Tool, args: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments the tool is called with, checked before the call against the JSON
    Schema of its signature (`fsm_agent.runtime.tool_schema`): a call the tool's signature refuses
    is never made, so the model can be asked again without a side effect to worry about.
    Raises `ArgumentsRefused` saying why."""
    return checked_arguments(tool.fn, tool.name, args)


class ToolRegistry:
    """The tools a run may call, by name. The allow-list is checked against it."""

    def __init__(self, tools: tuple[Tool, ...] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.add(t)

    def add(self, tool: Tool) -> Tool:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} registered twice")
        self._tools[tool.name] = tool
        return tool

    def tool(
        self,
        name: str | None = None,
        *,
        lane: Lane = LOCAL,
        privileged: bool = False,
        idempotent: bool = False,
        isolation: Isolation = "thread",
        side_effect: bool = True,
        repeatable: bool = False,
        approval: bool = False,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: register a function as a tool (named after the function by default)."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.add(
                Tool(
                    name=name or fn.__name__,
                    fn=fn,
                    lane=lane,
                    privileged=privileged,
                    idempotent=idempotent,
                    isolation=isolation,
                    side_effect=side_effect,
                    repeatable=repeatable,
                    approval=approval,
                )
            )
            return fn

        return register

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)


def load_tools(module_name: str, search: Search = ()) -> ToolRegistry:
    """The registry of a tools module, for one run: looked for on sys.path, then in the
    `search` directories (the CLI's `--tools` gives the working directory; see
    `fsm_agent.declaration.refs`).

    A module whose tools keep state exposes `new_tools()`, which returns a fresh registry per
    run (so state never leaks from one run into the next); otherwise its `TOOLS`.
    """
    try:
        module = import_module(module_name, search)
    except BadReference as exc:
        raise AdapterError(f"tools module: {exc}", spec=module_name) from exc
    factory = getattr(module, "new_tools", None)
    try:
        registry = factory() if callable(factory) else getattr(module, "TOOLS", None)
    except BaseException as exc:  # even sys.exit: a tools module cannot end the command
        if not raised_by_user_code(exc):
            raise
        raise AdapterError(
            f"new_tools() raised {type(exc).__name__}: {exc}", spec=module_name
        ) from exc
    if not isinstance(registry, ToolRegistry):
        raise AdapterError(
            "module has no TOOLS = ToolRegistry(...) (or new_tools() returning one)",
            spec=module_name,
        )
    check_tools(registry)
    return registry


def check_tools(registry: ToolRegistry, names: tuple[str, ...] | None = None) -> None:
    """Build the argument schema of each tool (or of those among `names`) now, so that an
    annotation that does not resolve, or names a type JSON cannot carry, is an
    `AdapterError` naming the tool before a run starts, not a failure in the middle of one.
    (Not done by `ToolRegistry.add`: a tools module may define the types its annotations
    name after the functions that use them.)"""
    for tool in registry:
        if names is None or tool.name in names:
            argument_schema(tool.fn, tool.name)
