"""Loading a machine declaration: by name from the packaged machines or from a YAML file,
checked (`fsm_agent.declaration.check`) and parsed once per process."""

from __future__ import annotations

import importlib
import importlib.resources
import os
from pathlib import Path

import attrs

from fsm_agent.declaration.spec import MachineSpec
from fsm_agent.errors import MachineSpecError


def machine_path(ref: str) -> Path:
    """A declaration file from a name in the `machines` package or a path to a YAML file."""
    if ref.endswith((".yaml", ".yml")) or "/" in ref or "\\" in ref:
        path = Path(ref)
        if not path.is_file():
            raise MachineSpecError("no such machine file", source=ref)
        return path
    resource = importlib.resources.files("fsm_agent.machines").joinpath(f"{ref}.yaml")
    if not resource.is_file():
        known = sorted(
            p.name[: -len(".yaml")]
            for p in importlib.resources.files("fsm_agent.machines").iterdir()
            if p.name.endswith(".yaml")
        )
        raise MachineSpecError(
            f"no declared machine named {ref!r} (known: {', '.join(known)}; or pass a .yaml path)",
            source=ref,
        )
    return Path(str(resource))


def load_machine(ref: str) -> MachineSpec:
    """Load and validate a machine by name or path."""
    from fsm_agent.declaration.yamlsource import Unreadable, read_source

    path = machine_path(ref)
    try:
        text = read_source(path)
    except Unreadable as exc:
        raise MachineSpecError(f"cannot read: {exc.why}", source=str(path)) from exc
    spec = parse_machine(text, source=str(path), home=path.parent)
    declared = spec.policy_path()
    if declared is not None:  # a declared policy must load: it fails closed at load time
        from fsm_agent.declaration.policy import PolicyError, load_policy

        try:
            load_policy(declared)
        except PolicyError as exc:
            from fsm_agent.declaration.yamlsource import LineIndex

            raise LineIndex(text, str(path)).error(
                f"policy {spec.policy!r}: {exc}", "$.policy"
            ) from exc
    return spec


def parse_machine(
    text: str,
    *,
    source: str,
    home: str | os.PathLike[str] | None = None,
    resolve: bool = True,
) -> MachineSpec:
    """Validate a declaration given as YAML text; `source` names it in errors. Its
    `package.module:function` references are looked for on sys.path, then in `home` (the
    directory of the declaration's file, when it has one), then in the working directory
    (see `fsm_agent.declaration.refs`). With `resolve=False` they are checked for their
    form only and nothing is imported: a journaled declaration read for review (its
    diagram, its timeline) needs none of the author's code; only running it, or re-deciding
    it (`replay`), does.

    A valid declaration is parsed once per process (pure-Python YAML costs ~75 ms for the
    agent loop): every later call with the same text gets that spec, with its own `source`
    (which names it in errors and places its policy file; nothing else depends on it) — a
    worker that runs, resumes or replays many runs of one machine pays once."""
    from fsm_agent.declaration.refs import working_directory

    mine = () if home is None else (Path(os.path.abspath(home)),)
    search = (*mine, *working_directory())
    key = (text, search, resolve)
    spec = _VALID.get(key)
    if spec is None:
        spec = _parse(text, source, search, resolve)
        if len(_VALID) >= _VALID_MAX:
            _VALID.pop(next(iter(_VALID)))
        _VALID[key] = spec
    return spec if spec.source == source else attrs.evolve(spec, source=source)


#: Valid declarations by (text, search path, resolved), as first parsed: the same text given
#: another source is the same spec with that source (threads racing here only parse a text
#: twice).
_VALID: dict[tuple[str, tuple[Path, ...], bool], MachineSpec] = {}
_VALID_MAX = 64


def _parse(text: str, source: str, search: tuple[Path, ...], resolve: bool) -> MachineSpec:
    # YAML and the checks are imported only when a machine loads.
    from fsm_agent.declaration.check import Validator
    from fsm_agent.declaration.yamlsource import LineIndex, load_yaml

    data = load_yaml(text, source=source)
    return Validator(data, LineIndex(text, source), search, resolve).build(text)
