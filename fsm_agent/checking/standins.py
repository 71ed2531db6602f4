"""The tools a counterexample run calls, and who plays each part the path needs.

A path's tool calls need parts: a tool on the allow-list or off it; on it, privileged or
not, and a read or a write (a call that leaves a side effect pending is a write; where the
path does not tell, a read, which the contract's rules on repeats and pending effects leave
alone). With the machine's tools module (`check --tools`), each part is played by a real
tool of the module: the run calls it by its name, with arguments that fit its signature
(`fsm_agent.checking.arguments`), under its signature and its declared flags (privileged,
idempotent, a read or a write, repeatable), so the runtime checks every call as it would
in production; only its body is a stand-in that returns what the path needs. Without a
tools module, the parts are the checker's own stand-ins (named after the declaration's
`tools:` where it lists some), whose arguments (`{"call": n}`) fit no signature but theirs:
`Cast.notes` says so, and the run's task repeats it.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from fsm_agent.declaration.spec import MachineSpec

if TYPE_CHECKING:
    from fsm_agent.runtime.tools import Tool, ToolRegistry

TOOL, UNLISTED = "checker_tool", "checker_unlisted"
#: A part: (allow-listed, privileged, a write). Off the allow-list only the name matters.
Part = tuple[bool, bool, bool]
#: The checker's own stand-in for each part.
STAND_INS: dict[Part, str] = {
    (True, False, True): TOOL,
    (True, False, False): "checker_read",
    (True, True, True): "checker_privileged",
    (True, True, False): "checker_privileged_read",
}


def part(allowed: bool, privileged: bool, write: bool) -> Part:
    """The part a call plays (off the allow-list, its flags do not matter: it never runs)."""
    return (True, privileged, write) if allowed else (False, False, True)


@attrs.frozen
class Cast:
    """Who plays each part, the registry the run is given, and what a reader should know."""

    players: dict[Part, str]
    registry: ToolRegistry
    #: the run's `allow` (None: the declaration's `tools:` is the allow-list)
    allow: tuple[str, ...] | None
    #: name -> the real tool a stand-in copies (its signature builds the arguments)
    real: dict[str, Tool]
    notes: tuple[str, ...] = ()

    def name(self, p: Part) -> str:
        """The tool that plays `p` (a part nobody plays: a name off every allow-list)."""
        return self.players.get(p, UNLISTED)

    def arguments(self, name: str, n: int, *, distinct: bool) -> dict[str, Any]:
        """The arguments of call `n` of `name`: fitting its signature when it is real."""
        from fsm_agent.checking.arguments import fitting_arguments

        tool = self.real.get(name)
        if tool is None:
            return {"call": n}
        return fitting_arguments(tool.fn, name, n, distinct=distinct)


def cast(
    spec: MachineSpec, parts: set[Part], body: Callable[..., Any], tools: ToolRegistry | None
) -> Cast:
    """The cast of a path that needs `parts`; every registered stand-in runs `body`."""
    if tools is not None:
        return _real_cast(spec, parts, body, tools)
    return _stand_in_cast(spec, parts, body)


def _stand_in_cast(spec: MachineSpec, parts: set[Part], body: Callable[..., Any]) -> Cast:
    """The checker's stand-ins: its own names when the declaration lists no tools (then
    they are the run's allow-list), else the declaration's names, a part each while they
    last (a name playing two parts has the first one's flags)."""
    from fsm_agent.runtime.tools import Tool, ToolRegistry

    def scripted(call: int = 0) -> Any:
        """Return what the checker's path needs from this call."""
        return body()

    needed = [p for p in STAND_INS if p in parts]
    if spec.tools is None:
        players = {p: STAND_INS[p] for p in needed}
    else:
        listed = [n for n in spec.tools if n != UNLISTED]
        players = {p: listed[min(i, len(listed) - 1)] for i, p in enumerate(needed) if listed}
    flags: dict[str, Part] = {}
    for p in needed:
        if p in players:
            flags.setdefault(players[p], p)
    registered = tuple(
        Tool(name, scripted, privileged=p[1], side_effect=p[2]) for name, p in flags.items()
    )
    notes: tuple[str, ...] = ()
    if registered:
        notes = (
            f"its tool calls are the checker's stand-ins ({', '.join(flags)}) with placeholder"
            ' arguments {"call": n}: check with --tools MODULE for calls whose arguments fit'
            " the real tools' signatures",
        )
    allow = None if spec.tools is not None else tuple(flags)
    return Cast(players, ToolRegistry(registered), allow, {}, notes)


def _real_cast(
    spec: MachineSpec, parts: set[Part], body: Callable[..., Any], tools: ToolRegistry
) -> Cast:
    """Real tools of the module play the parts (the allow-list as `check --tools` reads
    it: the declaration's `tools:`, else every registered tool): for each part the first
    tool with its flags, else the first that is a read or a write as the part is (a
    privileged tool may play an unprivileged part: the path's halt lane is local), else the
    first that may; off the allow-list, the first registered tool not on it."""
    from fsm_agent.runtime.tools import ToolRegistry

    allowed = [t for t in tools if spec.tools is None or t.name in spec.tools]
    players: dict[Part, str] = {}
    real: dict[str, Tool] = {}
    notes = []
    for p in sorted(parts):
        listed, privileged, write = p
        if listed:  # under a local halt lane a privileged tool takes an unprivileged part
            fits = [t for t in allowed if t.privileged or not privileged]
            fits.sort(key=lambda t: (t.side_effect != write, t.privileged != privileged))
            pick = fits[0] if fits else None
        else:
            pick = next((t for t in tools if t not in allowed), None)
        if pick is not None:
            players[p], real[pick.name] = pick.name, pick
        elif listed:
            notes.append(
                "the tools module has no allow-listed tool: the path's calls are made as"
                f" {UNLISTED}, which the runtime refuses"
            )
    stand_ins = tuple(_stand_in(t, body) for t in real.values() if t in allowed)
    allow = None if spec.tools is not None else tuple(t.name for t in stand_ins)
    return Cast(players, ToolRegistry(stand_ins), allow, real, tuple(notes))


def _stand_in(tool: Tool, body: Callable[..., Any]) -> Tool:
    """`tool` with its name, signature and flags, and `body` for its call."""
    from fsm_agent.runtime.tools import Tool

    def stand_in(**_: Any) -> Any:
        return body()

    with contextlib.suppress(TypeError, ValueError):  # none: any arguments, as the real one
        stand_in.__signature__ = inspect.signature(tool.fn, eval_str=True)  # type: ignore[attr-defined]
    stand_in.__doc__ = tool.fn.__doc__
    return Tool(
        tool.name,
        stand_in,
        privileged=tool.privileged,
        idempotent=tool.idempotent,
        side_effect=tool.side_effect,
        repeatable=tool.repeatable,
    )
