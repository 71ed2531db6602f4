"""Generated encoders and decoders for the journal's hot types (snapshots, guard results,
facts, events): straight-line code per attrs class instead of cattrs' generic walk.

They are the converter's (`fsm_agent.journal.serde`) fast path and give exactly what it gives:

- `compact_unstructure(cls)` builds the compact form (fields equal to their defaults left
  out, declared order, a proposal tagged with its class) that `serde.dumps_compact` encodes,
  so the stored text is byte for byte what it always was and every chain still verifies.
- `structurer(cls)` is strict the same way (no extra keys, no coerced primitives) and
  stricter where that is cheaper (a sequence must be a JSON array). Anything it does not
  take is handed to the converter, which either builds the same value or raises the error
  with the path that it always raised: a corrupt row reads exactly as before.

A field of a type this module does not know is handed to the converter too (slower, same
result).
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable
from typing import Any, Literal

import attrs
import cattrs

Hook = Callable[[Any], Any]


class Refused(Exception):
    """The fast path does not take this value: the converter decides."""


_PRIMITIVE_CHECKS = {
    str: "    if {x}.__class__ is not str: raise R\n",
    int: "    if {x}.__class__ is not int: raise R\n",
    bool: "    if {x}.__class__ is not bool: raise R\n",
    float: (
        "    if {x}.__class__ is not float:\n"
        "        if {x}.__class__ is not int: raise R\n"
        "        {x} = float({x})\n"
    ),
}


def _optional_arg(tp: Any) -> Any | None:
    """X for `X | None`, else None."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0]
    return None


class _Gen:
    """Generates the code of one converter's structure and unstructure functions."""

    def __init__(self, converter: cattrs.Converter, unions: dict[Any, tuple[type, ...]]) -> None:
        self.converter = converter
        #: tagged unions (the tag is the `type` key, the value the class name)
        self.unions = unions
        self.structurers: dict[Any, Hook] = {}
        self.unstructurers: dict[Any, Hook] = {}

    # --- structure ----------------------------------------------------------------------------

    def check(self, tp: Any, x: str, env: dict[str, Any], indent: str = "") -> str:
        """Statements that validate and convert local `x` (of type `tp`) in place."""
        if tp in _PRIMITIVE_CHECKS:
            return "".join(
                indent + line + "\n" for line in _PRIMITIVE_CHECKS[tp].format(x=x).splitlines()
            )
        if tp is Any:
            return ""
        inner = _optional_arg(tp)
        if inner is not None and self._tagged(tp) is None:
            body = self.check(inner, x, env, indent + "    ")
            return f"{indent}    if {x} is not None:\n{body}" if body else ""
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is Literal and all(type(a) is str for a in args):
            key = f"L_{len(env)}"
            env[key] = frozenset(args)
            return f"{indent}    if {x}.__class__ is not str or {x} not in {key}: raise R\n"
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            item = args[0]
            head = f"{indent}    if {x}.__class__ is not list: raise R\n"
            if item in (str, int, bool):
                cls = item.__name__
                return (
                    f"{head}{indent}    for e in {x}:\n"
                    f"{indent}        if e.__class__ is not {cls}: raise R\n"
                    f"{indent}    {x} = tuple({x})\n"
                )
            fn = self._fn(item, env)
            return f"{head}{indent}    {x} = tuple([{fn}(e) for e in {x}])\n"
        if origin is dict and args[1] is Any and args[0] is str:
            return f"{indent}    if {x}.__class__ is not dict: raise R\n"
        fn = self._fn(tp, env)
        return f"{indent}    {x} = {fn}({x})\n"

    def _fn(self, tp: Any, env: dict[str, Any]) -> str:
        """The name in `env` of a function structuring `tp` (raising `Refused` or the
        converter's error)."""
        name = f"F_{len(env)}"
        env[name] = self._structure_fn(tp)
        return name

    def _tagged(self, tp: Any) -> tuple[tuple[type, ...], bool] | None:
        """The classes of a tagged union `tp` (or `tp | None`), and whether None is one."""
        if typing.get_origin(tp) not in (typing.Union, types.UnionType):
            return None
        args = typing.get_args(tp)
        classes = tuple(a for a in args if a is not type(None))
        for members in self.unions.values():
            if set(classes) == set(members):
                return members, len(classes) < len(args)
        return None

    def _structure_fn(self, tp: Any) -> Hook:
        tagged = self._tagged(tp)
        if tagged is not None:
            union = self._union_fn(tagged[0])
            if not tagged[1]:
                return union
            return lambda v: None if v is None else union(v)
        if isinstance(tp, type) and attrs.has(tp):
            return self.class_structurer(tp)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return tp
        convert = self.converter.structure
        return lambda v: convert(v, tp)

    def _union_fn(self, members: tuple[type, ...]) -> Hook:
        by_tag = {c.__name__: self.class_structurer(c) for c in members}

        def structure(v: Any) -> Any:
            if v.__class__ is not dict or v.get("type") not in by_tag:
                raise Refused
            rest = dict(v)
            return by_tag[rest.pop("type")](rest)

        return structure

    def class_structurer(self, cls: type) -> Hook:
        """Fast structure of attrs class `cls` from a dict (raises `Refused` on anything it
        does not take)."""
        found = self.structurers.get(cls)
        if found is not None:
            return found
        fields = attrs.fields(attrs.resolve_types(cls))
        env: dict[str, Any] = {"R": Refused, "C": cls, "M": attrs.NOTHING}
        env["N"] = frozenset(f.name for f in fields)
        lines = [
            "def structure(d):\n",
            "    if d.__class__ is not dict or not d.keys() <= N: raise R\n",
        ]
        args = []
        for i, f in enumerate(fields):
            x = f"a{i}"
            body = self.check(f.type, x, env)
            if f.default is attrs.NOTHING:
                lines.append(f"    {x} = d[{f.name!r}]\n{body}")
            elif isinstance(f.default, attrs.Factory):  # type: ignore[arg-type]
                made = f.default.factory()
                if _frozen(made):  # one default value can serve every instance
                    env[f"D{i}"] = made
                    lines.append(f"    {x} = d.get({f.name!r}, D{i})\n")
                    lines.append(f"    if {x} is not D{i}:\n{_indent(body)}" if body else "")
                else:
                    env[f"D{i}"] = f.default.factory
                    lines.append(f"    {x} = d.get({f.name!r}, M)\n    if {x} is M: {x} = D{i}()\n")
                    lines.append(f"    else:\n{_indent(body)}" if body else "")
            else:
                env[f"D{i}"] = f.default
                lines.append(f"    {x} = d.get({f.name!r}, D{i})\n")
                lines.append(f"    if {x} is not D{i}:\n{_indent(body)}" if body else "")
            args.append(f"{f.name}={x}")
        lines.append(f"    return C({', '.join(args)})\n")
        exec("".join(lines), env)  # noqa: S102 - our own code, generated from the attrs fields
        fn: Hook = env["structure"]
        self.structurers[cls] = fn
        return fn

    def delta_structurer(
        self, cls: type, trusted: dict[str, str], untrusted: dict[str, str], args: str
    ) -> Hook:
        """Like `class_structurer`, but a field missing from the dict takes the value of an
        expression over the function's `args` (after `d`): one in `trusted` as it is (an
        already structured value), one in `untrusted` checked like a value in the dict."""
        fields = attrs.fields(attrs.resolve_types(cls))
        env: dict[str, Any] = {"R": Refused, "C": cls, "M": attrs.NOTHING}
        env["N"] = frozenset(f.name for f in fields)
        lines = [
            f"def structure(d, {args}):\n",
            "    if d.__class__ is not dict or not d.keys() <= N: raise R\n",
        ]
        for i, f in enumerate(fields):
            x, body = f"a{i}", self.check(f.type, f"a{i}", env)
            if f.name in untrusted:
                lines.append(f"    {x} = d.get({f.name!r}, M)\n")
                lines.append(f"    if {x} is M: {x} = {untrusted[f.name]}\n{body}")
                continue
            if f.name in trusted:
                fallback = trusted[f.name]
            elif f.default is attrs.NOTHING:
                lines.append(f"    {x} = d[{f.name!r}]\n{body}")
                continue
            elif isinstance(f.default, attrs.Factory):  # type: ignore[arg-type]
                env[f"D{i}"], fallback = f.default.factory, f"D{i}()"
            else:
                env[f"D{i}"], fallback = f.default, f"D{i}"
            lines.append(f"    {x} = d.get({f.name!r}, M)\n    if {x} is M: {x} = {fallback}\n")
            lines.append(f"    else:\n{_indent(body)}" if body else "")
        kwargs = ", ".join(f"{f.name}=a{i}" for i, f in enumerate(fields))
        lines.append(f"    return C({kwargs})\n")
        exec("".join(lines), env)  # noqa: S102 - our own code, generated from the attrs fields
        fn: Hook = env["structure"]
        return fn

    # --- unstructure --------------------------------------------------------------------------

    def _unstructure_expr(self, tp: Any, x: str, env: dict[str, Any]) -> str:
        """An expression giving the compact form of local `x` (of type `tp`)."""
        if tp in (str, int, bool, float) or tp is Any:
            return x
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is Literal or (origin is dict and args == (str, Any)):
            return x
        inner = _optional_arg(tp)
        if inner is not None and self._tagged(tp) is None:
            value = self._unstructure_expr(inner, x, env)
            return x if value == x else f"(None if {x} is None else {value})"
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            item = self._unstructure_expr(args[0], "e", env)
            return x if item == "e" else f"[{item} for e in {x}]"
        name = f"U_{len(env)}"
        env[name] = self._unstructure_fn(tp)
        return f"{name}({x})"

    def _unstructure_fn(self, tp: Any) -> Hook:
        union = self._tagged(tp)
        if union is not None:
            by_class = {c: self.class_unstructurer(c) for c in union[0]}

            def tagged(v: Any) -> Any:
                if v is None:
                    return None
                return {**by_class[v.__class__](v), "type": v.__class__.__name__}

            return tagged
        if isinstance(tp, type) and attrs.has(tp):
            return self.class_unstructurer(tp)
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return lambda v: v.value
        unstructure = self.converter.unstructure
        return lambda v: unstructure(v, unstructure_as=tp)

    def class_unstructurer(self, cls: type) -> Hook:
        """The compact form of attrs class `cls`: a dict of the fields that are not their
        default, in declared order."""
        found = self.unstructurers.get(cls)
        if found is not None:
            return found
        fn = self.unstructurers[cls] = self.delta_unstructurer(cls, {}, "")
        return fn

    def delta_unstructurer(self, cls: type, against: dict[str, str], args: str) -> Hook:
        """The compact form of attrs class `cls` (the fields not at their default, in
        declared order), except that a field named in `against` is written when it is not
        equal to the expression given there (over the function's `args`, after `o`)."""
        fields = attrs.fields(attrs.resolve_types(cls))
        env: dict[str, Any] = {}
        lines = [f"def unstructure(o, {args}):\n" if args else "def unstructure(o):\n"]
        lines.append("    d = {}\n")
        for i, f in enumerate(fields):
            value = self._unstructure_expr(f.type, "v", env)
            lines.append(f"    v = o.{f.name}\n")
            if f.name in against:
                lines.append(f"    if v != {against[f.name]}: d[{f.name!r}] = {value}\n")
            elif f.default is attrs.NOTHING:
                lines.append(f"    d[{f.name!r}] = {value}\n")
            else:
                default = f.default
                if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                    default = default.factory()
                env[f"D{i}"] = default
                lines.append(f"    if v != D{i}: d[{f.name!r}] = {value}\n")
        lines.append("    return d\n")
        exec("".join(lines), env)  # noqa: S102 - our own code, generated from the attrs fields
        fn: Hook = env["unstructure"]
        return fn

    def value_structurer(self, tp: Any) -> Hook:
        """Fast structure of any type `tp` (an attrs class, a tuple of them …)."""
        found = self.structurers.get(tp)
        if found is not None:
            return found
        env: dict[str, Any] = {"R": Refused}
        code = f"def structure(x):\n{self.check(tp, 'x', env)}    return x\n"
        exec(code, env)  # noqa: S102 - our own code, generated from the type
        fn: Hook = env["structure"]
        self.structurers[tp] = fn
        return fn


def _frozen(value: Any) -> bool:
    """Whether `value` is an instance of a frozen attrs class (so it can be shared)."""
    cls = type(value)
    return attrs.has(cls) and getattr(cls.__setattr__, "__name__", "") == "_frozen_setattrs"


def _indent(body: str) -> str:
    return "".join(f"    {line}\n" for line in body.splitlines())


def generator(converter: cattrs.Converter, unions: dict[Any, tuple[type, ...]]) -> _Gen:
    """The code generator for `converter`'s types, with its tagged `unions`."""
    return _Gen(converter, unions)
