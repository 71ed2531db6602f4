"""Reading a declaration's YAML (a machine or a halt policy): safe, bounded, strict about
duplicate keys, with line numbers.

Only the safe loader's plain data is built (no `!!python/...` tags). Hostile documents are
refused with the file and line before they can cost much: a file over `MAX_YAML_BYTES`,
text that is not UTF-8 or holds a control character, nesting deeper than `MAX_YAML_DEPTH`,
and more than `MAX_YAML_NODES` nodes once every alias is counted as a full copy of its
anchor (so a billion-laughs document is refused after a few thousand nodes, in
milliseconds). Anchors and aliases within that budget are fine; a recursive alias is not.

Imported only when a machine is loaded, so `import fsm_agent` does not pay for PyYAML.
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from fsm_agent.errors import MachineSpecError

#: The largest declaration file read (bytes; for text given directly, characters).
MAX_YAML_BYTES = 256 * 1024
#: How deep mappings and sequences may nest (a machine needs about five levels).
MAX_YAML_DEPTH = 64
#: The most nodes a document may expand to, every alias counted as a copy of its anchor.
MAX_YAML_NODES = 10_000


class Unreadable(Exception):
    """A declaration file that cannot be read as text; callers raise their own error kind."""

    def __init__(self, why: str, line: int | None = None) -> None:
        self.why = why
        self.line = line
        super().__init__(why)


def read_source(path: str | os.PathLike[str]) -> str:
    """A declaration file's text: at most `MAX_YAML_BYTES`, strict UTF-8 (a BOM is allowed).
    Raises `Unreadable` with the reason (and the line, for a byte that is not UTF-8)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_YAML_BYTES + 1)
    except OSError as exc:
        raise Unreadable(str(exc)) from exc
    if len(data) > MAX_YAML_BYTES:
        raise Unreadable(f"the file is larger than {MAX_YAML_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise Unreadable(
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line}, column {column}",
            line,
        ) from exc


def load_yaml(text: str, *, source: str) -> Any:
    """Parse YAML text with the safe loader; errors name the file and line."""
    if len(text) > MAX_YAML_BYTES:
        raise MachineSpecError(
            f"not valid YAML: the text is longer than {MAX_YAML_BYTES} characters", source=source
        )
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        line, problem = _describe(exc, text)
        where = f"{source}:{line}" if line is not None else source
        raise MachineSpecError(f"not valid YAML: {problem}", source=where) from exc


def _describe(exc: yaml.YAMLError, text: str) -> tuple[int | None, str]:
    """The line and a one-line description of a PyYAML error."""
    if isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        return line, f"character {char!r} is not allowed in YAML (column {column})"
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        problem = ": ".join(p for p in (exc.context, exc.problem) if p) or type(exc).__name__
        if "'\\t'" in problem:
            problem += " (indent with spaces: YAML does not allow tabs there)"
        if mark is None:
            return None, problem
        return mark.line + 1, f"{problem} (column {mark.column + 1})"
    return None, str(exc).replace("\n", " ")


class _StrictLoader(yaml.SafeLoader):
    """Safe loading that refuses duplicate keys (the last one would silently win), nesting
    past `MAX_YAML_DEPTH`, and documents that expand past `MAX_YAML_NODES`."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._expanded = 0  # nodes so far, each alias counted as its anchor's expanded size
        self._sizes: dict[int, int] = {}  # id(node) -> its expanded size, once composed

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
        if self.check_event(yaml.AliasEvent):
            node = super().compose_node(parent, index)
            size = self._sizes.get(id(node))
            if size is None:
                raise yaml.composer.ComposerError(
                    None, None, "found a recursive alias (an alias inside its own anchor)", mark
                )
            self._count(size, mark)
            return node
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested more than {MAX_YAML_DEPTH} levels deep", mark
            )
        before = self._expanded
        self._count(1, mark)
        node = super().compose_node(parent, index)
        self._sizes[id(node)] = self._expanded - before
        self._depth -= 1
        return node

    def _count(self, nodes: int, mark: yaml.Mark) -> None:
        self._expanded += nodes
        if self._expanded > MAX_YAML_NODES:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"the document expands to more than {MAX_YAML_NODES} nodes"
                " (aliases count as copies of their anchors)",
                mark,
            )


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping",
                node.start_mark,
                "found a key that is a mapping or a sequence",
                key_node.start_mark,
            ) from None
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping",
                node.start_mark,
                f"found duplicate key {key!r} (first on line {seen[key]})",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates
)


class LineIndex:
    """Maps key paths like `$.transitions[2].guards[0]` to line numbers of the YAML source."""

    def __init__(self, text: str, source: str) -> None:
        self.source = source
        self.lines: dict[str, int] = {}
        try:  # the same bounds as loading: no deep or exponential walk below
            node = yaml.compose(text, Loader=_StrictLoader) if len(text) <= MAX_YAML_BYTES else None
        except yaml.YAMLError:
            node = None
        if node is not None:
            self._walk(node, "$")

    def _walk(self, node: yaml.Node, path: str) -> None:
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = f"{path}.{key.value}"
                self.lines[sub] = key.start_mark.line + 1
                self._walk(value, sub)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._walk(item, f"{path}[{i}]")

    def error(self, message: str, key: str) -> MachineSpecError:
        """A `MachineSpecError` at `key`, with the line of the nearest key that has one."""
        probe = key
        while probe not in self.lines and ("." in probe or "[" in probe):
            probe = probe[: max(probe.rfind("."), probe.rfind("["))]
        line = self.lines.get(probe)
        where = f"{self.source}:{line}" if line else self.source
        return MachineSpecError(message, source=where, key=key)
