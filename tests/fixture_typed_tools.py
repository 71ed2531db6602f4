"""Tools with typed signatures, for the schema and argument-check tests."""

from __future__ import annotations

import dataclasses
import typing
from typing import Annotated, Literal, TypedDict

import attrs
import msgspec

from fsm_agent.runtime.receipts import Receipt
from fsm_agent.runtime.tools import ToolRegistry, ToolResult

TOOLS = ToolRegistry()


@dataclasses.dataclass
class Line:
    sku: str
    qty: int = 1


class Address(TypedDict):
    street: str
    city: str


@attrs.frozen
class Window:
    start: int
    end: int


@TOOLS.tool(side_effect=False)
def search(
    query: str,
    limit: int | None = None,
    mode: Literal["exact", "fuzzy"] = "exact",
    tags: list[str] = [],  # noqa: B006 - never mutated; shown as the schema's default
) -> ToolResult:
    """Search the notes for a query.

    A hit carries a receipt.

    Args:
        query: what to look for
        limit: at most this many hits
            (None: all of them)
    """
    return ToolResult(
        receipts=(Receipt(status=200, id=f"note:{query}"),),
        observation={"hit": f"the {query} note", "limit": limit, "mode": mode, "tags": tags},
    )


@TOOLS.tool()
def order(
    lines: list[Line],
    ship_to: Annotated[Address, "where the parcel goes"],
    window: Window | None = None,
    rush: Annotated[bool, msgspec.Meta(description="ship today")] = False,
    weight_kg: Annotated[float, msgspec.Meta(ge=0)] = 1.0,
) -> ToolResult:
    """Place an order.

    Parameters
    ----------
    lines
        what to send
    """
    kinds = {
        "lines": [type(x).__name__ for x in lines],
        "window": type(window).__name__,
        "weight_kg": type(weight_kg).__name__,
    }
    return ToolResult(receipts=(Receipt(status=201, id="order:1"),), observation=kinds)


@TOOLS.tool(side_effect=False)
def tag(note: str, **labels: int) -> ToolResult:
    """Label a note.

    :param note: the note's id
    :param labels: a weight per label
    """
    return ToolResult(observation={"note": note, "labels": labels})


@TOOLS.tool(side_effect=False)
def echo(anything, also: object = None) -> ToolResult:  # type: ignore[no-untyped-def]
    """Return what it was given: unannotated, it takes any value."""
    return ToolResult(observation=[anything, also])


@dataclasses.dataclass
class Node:
    """A recursive type: a tree of named nodes."""

    name: str
    children: list[Node] = dataclasses.field(default_factory=list)


class Cat(msgspec.Struct, tag=True):
    lives: int = 9


class Dog(msgspec.Struct, tag=True, forbid_unknown_fields=True):
    good: bool = True


class Point(typing.NamedTuple):
    x: int
    line: Line | None = None
