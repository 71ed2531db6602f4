"""Reading a machine declaration's YAML: safe, strict about duplicate keys, with line numbers.

Imported only when a machine is loaded, so `import fsm_agent` does not pay for PyYAML.
"""

from __future__ import annotations

from typing import Any

import yaml

from fsm_agent.errors import MachineSpecError


def load_yaml(text: str, *, source: str) -> Any:
    """Parse YAML text with the safe loader; errors name the file and line."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        raise MachineSpecError(f"not valid YAML: {exc}", source=where) from exc


class _StrictLoader(yaml.SafeLoader):
    """Safe loading that refuses duplicate keys (the last one would silently win)."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
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
        try:
            node = yaml.compose(text)
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
