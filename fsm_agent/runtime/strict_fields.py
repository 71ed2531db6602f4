"""Unknown fields inside a tool's argument: the one check msgspec does not make for us.

msgspec refuses an unknown field only in a `Struct` declared `forbid_unknown_fields=True`;
in a dataclass, attrs class or TypedDict it drops the field silently, so a model's
`{"sku": "x", "quantity": 3}` for `Line(sku, qty=1)` would become `Line("x", 1)`. A tool
call is refused instead. Once per parameter, msgspec's own description of its type
(`msgspec.inspect.type_info`) is made into a plan of where objects can be (`field_plan`);
after msgspec has decoded an argument (so its shape fits the type), the argument is walked
along that plan and the first key no field is named for is reported (`unknown_field`). A
type with no such object inside has no plan and is never walked. Imported with msgspec, on
a tool's first use (see `fsm_agent.runtime.tool_schema`).
"""

from __future__ import annotations

from typing import Any

import msgspec.inspect as mi

_OBJECTS = (mi.StructType, mi.DataclassType, mi.TypedDictType)
_SEQUENCES = (mi.TupleType, mi.NamedTupleType)


class _Object:
    """An object's fields, by the name a model sends; `closed`: unknown keys are refused
    here (False for a Struct that msgspec already refuses them in)."""

    __slots__ = ("closed", "fields", "tag_field")

    def __init__(self, closed: bool, tag_field: str | None) -> None:
        self.closed = closed
        self.tag_field = tag_field
        self.fields: dict[str, _Node | None] = {}


class _Items:
    """Every item of an array (list, set, frozenset, `tuple[T, ...]`)."""

    __slots__ = ("item",)

    def __init__(self, item: _Node) -> None:
        self.item = item


class _Positions:
    """The items of a fixed-length array (tuple, NamedTuple, array-like Struct)."""

    __slots__ = ("items",)

    def __init__(self, items: tuple[_Node | None, ...]) -> None:
        self.items = items


class _Values:
    """Every value of a `dict[K, V]`."""

    __slots__ = ("value",)

    def __init__(self, value: _Node) -> None:
        self.value = value


class _Union:
    """A union: msgspec allows one object-like member (or Structs told apart by a tag) and
    one array-like member, so the JSON value's kind says which member it was decoded as."""

    __slots__ = ("array", "objects")

    def __init__(self, objects: list[tuple[str | None, Any, _Node]], array: _Node | None) -> None:
        self.objects = objects  # (tag field, tag, plan)
        self.array = array


_Node = _Object | _Items | _Positions | _Values | _Union


def field_plan(kind: Any) -> _Node | None:
    """The plan `unknown_field` walks for arguments of type `kind`, or None when no object
    inside it could let an unknown field through."""
    info = mi.type_info(kind)
    return _plan(info, {}) if _lenient(info, set()) else None


def unknown_field(value: Any, plan: _Node, path: str) -> str | None:
    """Where in `value` (a JSON value that msgspec has decoded) a key names no field, as
    `path.key` (or `path[0].key` …), or None."""
    found = _walk(value, plan)
    return None if found is None else path + "".join(reversed(found))


def _walk(value: Any, node: _Node) -> list[str] | None:
    """The path to the first unknown key, innermost step first."""
    if type(node) is _Union:
        picked = _pick(value, node)
        if picked is None:
            return None
        node = picked
    kind = type(node)
    if kind is _Object and type(value) is dict:
        return _walk_object(value, node)  # type: ignore[arg-type]
    if kind is _Values and type(value) is dict:
        return _walk_all(value.items(), node.value)  # type: ignore[union-attr]
    if kind is _Items and type(value) is list:
        return _walk_all(enumerate(value), node.item)  # type: ignore[union-attr]
    if kind is _Positions and type(value) is list:
        for i, (item, sub) in enumerate(zip(value, node.items, strict=False)):  # type: ignore[union-attr]
            found = None if sub is None else _walk(item, sub)
            if found is not None:
                found.append(f"[{i}]")
                return found
    return None


def _walk_object(value: dict[str, Any], node: _Object) -> list[str] | None:
    fields = node.fields
    for key, item in value.items():
        if key not in fields:
            if node.closed and key != node.tag_field:
                return [f".{key}"]
            continue
        sub = fields[key]
        found = None if sub is None else _walk(item, sub)
        if found is not None:
            found.append(f".{key}")
            return found
    return None


def _walk_all(items: Any, node: _Node) -> list[str] | None:
    for key, item in items:
        found = _walk(item, node)
        if found is not None:
            found.append(f"[{key!r}]")
            return found
    return None


def _pick(value: Any, node: _Union) -> _Node | None:
    if type(value) is list:
        return node.array
    if type(value) is dict:
        for tag_field, tag, plan in node.objects:
            if tag_field is None or value.get(tag_field) == tag:
                return plan
    return None


def _plan(info: Any, memo: dict[int, _Node | None]) -> _Node | None:
    """The plan of one msgspec type description (None: nothing to look at inside it).
    `memo` holds each object's plan while its fields are planned (a recursive type)."""
    if id(info) in memo:
        return memo[id(info)]
    if isinstance(info, mi.Metadata):  # Annotated
        return _plan(info.type, memo)
    if isinstance(info, _OBJECTS) and not getattr(info, "array_like", False):
        forbids = isinstance(info, mi.StructType) and info.forbid_unknown_fields
        node = _Object(closed=not forbids, tag_field=getattr(info, "tag_field", None))
        memo[id(info)] = node
        node.fields = {f.encode_name: _plan(f.type, memo) for f in info.fields}
        return node
    if isinstance(info, mi.CollectionType):
        item = _plan(info.item_type, memo)
        return None if item is None else _Items(item)
    if isinstance(info, (*_SEQUENCES, mi.StructType)):  # a Struct here is an array-like one
        kinds = info.item_types if isinstance(info, mi.TupleType) else [f.type for f in info.fields]
        items = tuple(_plan(k, memo) for k in kinds)
        return _Positions(items) if any(i is not None for i in items) else None
    if isinstance(info, mi.DictType):
        value = _plan(info.value_type, memo)
        return None if value is None else _Values(value)
    if isinstance(info, mi.UnionType):
        return _union_plan(info, memo)
    return None


def _union_plan(info: Any, memo: dict[int, _Node | None]) -> _Union | None:
    objects: list[tuple[str | None, Any, _Node]] = []
    array = None
    for member in info.types:
        plan = _plan(member, memo)
        kind = member.type if isinstance(member, mi.Metadata) else member
        if plan is None:
            continue
        if isinstance(plan, _Object | _Values):
            objects.append((getattr(kind, "tag_field", None), getattr(kind, "tag", None), plan))
        else:
            array = plan
    return _Union(objects, array) if objects or array is not None else None


def _lenient(info: Any, seen: set[int]) -> bool:
    """Whether an object that lets unknown fields through is inside the type."""
    if id(info) in seen:  # a recursive type: already being looked at
        return False
    seen.add(id(info))
    object_like = isinstance(info, _OBJECTS) and not getattr(info, "array_like", False)
    if object_like and not (isinstance(info, mi.StructType) and info.forbid_unknown_fields):
        return True
    return any(_lenient(inner, seen) for inner in _inner(info))


def _inner(info: Any) -> list[Any]:
    if isinstance(info, (*_OBJECTS, mi.NamedTupleType)):
        return [f.type for f in info.fields]
    if isinstance(info, mi.CollectionType):
        return [info.item_type]
    if isinstance(info, mi.TupleType):
        return list(info.item_types)
    if isinstance(info, mi.UnionType):
        return list(info.types)
    if isinstance(info, mi.DictType):
        return [info.value_type]
    if isinstance(info, mi.Metadata):
        return [info.type]
    return []
